package check

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/sched"
)

// nodeSpec is the shape of node i of every test cluster: 2 CPUs, a scarce
// custom resource, a zone label, and declared GPUs on some nodes.
type nodeSpec struct {
	slot int64
	zone string
	gpus int
}

var specs = []nodeSpec{{slot: 1, zone: "a", gpus: 2}, {slot: 1, zone: "b", gpus: 0}, {slot: 2, zone: "b", gpus: 2}}

func testLogger() *slog.Logger {
	if os.Getenv("NODEUP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startInProcess starts n cluster.Node values on 127.0.0.1 in this process
// and returns the head's RPC address.
func startInProcess(t testing.TB, n int) string {
	t.Helper()
	dir := t.TempDir()
	var head string
	for i := 0; i < n; i++ {
		sp := specs[i]
		res := sched.ResourceSet{sched.CPU: sched.QuantityOf(2), sched.Memory: sched.QuantityOf(1 << 30), Slot: sched.QuantityOf(sp.slot)}
		cfg := cluster.Config{NodeName: fmt.Sprintf("n%d", i), DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i)), BindAddr: "127.0.0.1",
			HTTPPort: -1, Server: true, RaftVoters: 3, Resources: res, Logger: testLogger(), Version: "test",
			Labels: map[string]string{"zone": sp.zone}, GPUs: cluster.GPUConfig{Declare: true, Count: sp.gpus},
			HeartbeatInterval: 100 * time.Millisecond, ReconcileInterval: 200 * time.Millisecond}
		if i == 0 {
			cfg.Head = true
		} else {
			cfg.Join = []string{head}
		}
		nd, err := cluster.Start(context.Background(), cfg)
		if err != nil {
			t.Fatalf("start node n%d: %v", i, err)
		}
		t.Cleanup(nd.Kill)
		if i == 0 {
			head = nd.RPCAddr()
		}
	}
	return head
}

var (
	buildOnce sync.Once
	nodeupBin string
	buildErr  error
)

// buildNodeup builds bin/nodeup's equivalent (CGO_ENABLED=0) into a
// temporary directory once per test binary.
func buildNodeup(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodeup-check-bin-")
		if err != nil {
			buildErr = err
			return
		}
		nodeupBin = filepath.Join(dir, "nodeup")
		_, file, _, _ := runtime.Caller(0)
		cmd := exec.Command("go", "build", "-o", nodeupBin, ".")
		cmd.Dir = filepath.Dir(filepath.Dir(file))
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build nodeup: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return nodeupBin
}

// freePort returns a port free for TCP and UDP on 127.0.0.1 right now.
func freePort(t testing.TB) int {
	t.Helper()
	for i := 0; i < 50; i++ {
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
	t.Fatal("no free port")
	return 0
}

// syncBuffer is a bytes.Buffer safe for a process's output copier and the
// test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startProcesses starts n `nodeup` processes on 127.0.0.1 (a head, then
// joiners once it answers) and returns the head's RPC address and a
// function returning the tail of each node's log.
func startProcesses(t testing.TB, n int) (string, func() string) {
	t.Helper()
	bin := buildNodeup(t)
	root := t.TempDir()
	var head string
	var logs []func() string
	for i := 0; i < n; i++ {
		sp := specs[i]
		port := freePort(t)
		verb := []string{"start", "--head"}
		if i > 0 {
			verb = []string{"join", head}
		}
		args := append(verb, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--gossip-port", strconv.Itoa(freePort(t)),
			"--http-port", "-1", "--data-dir", filepath.Join(root, fmt.Sprintf("n%d", i)), "--node-name", fmt.Sprintf("n%d", i),
			"--num-cpus", "2", "--memory", "1GiB", "--resources", fmt.Sprintf("%s=%d", Slot, sp.slot), "--labels", "zone="+sp.zone,
			"--num-gpus", strconv.Itoa(sp.gpus))
		logs = append(logs, startProcess(t, bin, root, fmt.Sprintf("n%d", i), args))
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if i == 0 {
			head = addr
			waitListening(t, addr, 30*time.Second)
		}
	}
	return head, func() string {
		var b bytes.Buffer
		for _, l := range logs {
			b.WriteString(l())
		}
		return b.String()
	}
}

// startProcess runs one node process and stops it at cleanup (SIGTERM,
// then SIGKILL after 15 s); the returned function gives its log's tail.
func startProcess(t testing.TB, bin, root, name string, args []string) func() string {
	t.Helper()
	out := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "TMPDIR="+root)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return func() string { return fmt.Sprintf("--- log of node %s ---\n%s\n", name, tail(out.String(), 4000)) }
}

// waitListening polls addr until it accepts TCP connections.
func waitListening(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node at %s not listening after %s: %v", addr, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
