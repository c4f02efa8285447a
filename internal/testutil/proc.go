package testutil

import (
	"bytes"
	"fmt"
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
// right now (a node's gossip port needs both); it fails t after 50 tries.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no port free for both TCP and UDP on 127.0.0.1 in 50 tries")
	return 0
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
