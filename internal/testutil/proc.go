package testutil

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreePort returns a port on 127.0.0.1 that is free for both TCP and UDP
// right now (a node's gossip port needs both); it fails t after 200 tries.
//
// The port lies outside the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a port inside it can become the local
// port of any outgoing connection on the machine between this check and
// the node's bind, and the node then fails with "address already in use"
// (the suspected cause of a node missing in one CI run). No port is
// handed out twice by one process; other processes pick at random from
// about 20,000 ports.
func FreePort(t testing.TB) int {
	t.Helper()
	lo, hi := portRange()
	for range 200 {
		port := lo + rand.IntN(hi-lo)
		if !claimPort(port) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatalf("no port in [%d, %d) free for both TCP and UDP on 127.0.0.1 in 200 tries", lo, hi)
	return 0
}

var (
	portsMu     sync.Mutex
	portsHanded = map[int]bool{}
)

// claimPort records port as handed out and reports whether it was not yet.
func claimPort(port int) bool {
	portsMu.Lock()
	defer portsMu.Unlock()
	if portsHanded[port] {
		return false
	}
	portsHanded[port] = true
	return true
}

// portRange returns [lo, hi): the ports from 10000 up to the start of the
// ephemeral range, or above its end when that leaves more (Linux's default
// range is 32768-60999; elsewhere, or unreadable, that default is assumed).
func portRange() (int, int) {
	first, last := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var a, z int
		if n, _ := fmt.Sscan(string(b), &a, &z); n == 2 && a > 0 && z >= a {
			first, last = a, z
		}
	}
	if below, above := first-10000, 65536-(last+1); below >= above && below > 0 {
		return 10000, first
	} else if above > 0 {
		return last + 1, 65536
	}
	return 1024, 65536 // the whole range is ephemeral: nothing better to do
}

// SyncBuffer is a bytes.Buffer that a child process's output copier and
// the test may use at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// RepoRoot is the module's root directory, found from this file's path.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// BuildNodeup builds the nodeup binary (CGO_ENABLED=0, as `make build`
// without the GPU helper) into dir and returns its path; the error carries
// the compiler's output.
func BuildNodeup(dir string) (string, error) {
	bin := filepath.Join(dir, "nodeup")
	if err := GoBuild(dir+string(filepath.Separator), "."); err != nil {
		return "", err
	}
	return bin, nil
}

// GoBuild runs `go build -o out pkgs...` in the module root with
// CGO_ENABLED=0; out ending in a separator is a directory for several
// binaries. The error carries the compiler's output.
func GoBuild(out string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", out}, pkgs...)...)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %v\n%s", pkgs, err, b)
	}
	return nil
}

// stopGrace is how long a test's child process has to exit after SIGTERM
// (a node removes its shared-memory arena on a graceful stop) before it is
// killed.
const stopGrace = 15 * time.Second

// Process is a child process a test started; its stdout and stderr go to
// Log.
type Process struct {
	Cmd  *exec.Cmd
	Log  *SyncBuffer
	done chan struct{}
	err  error
}

// StartProcess starts argv[0] with argv[1:] and env appended to this
// process's environment, failing t if it cannot start. When the test ends
// the process gets SIGTERM, then SIGKILL after 15 s.
func StartProcess(t testing.TB, argv, env []string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(argv[0], argv[1:]...), Log: &SyncBuffer{}, done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Log, p.Log
	p.Cmd.Env = append(os.Environ(), env...)
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.Stop)
	return p
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait returns the process's exit status once it has exited.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM, kills the process if it has not exited 15 s later,
// and returns once it has exited.
func (p *Process) Stop() {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}
