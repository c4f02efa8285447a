package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// TestFrozenNodeTasksRetried (issue 13, item 4): a node frozen mid-task
// (SIGSTOP of the daemon and of the worker running the task) keeps its
// connections open, so nothing ever breaks; once gossip declares it dead,
// the task's owner retries it on another node.
func TestFrozenNodeTasksRetried(t *testing.T) { runFrozen(t, "task") }

// TestFrozenNodeActorCallRetried (issue 13, item 4, actors): the same with
// an actor call in flight on the frozen node. Once the node is declared
// dead the actor restarts elsewhere and the caller resends the call there
// (MaxTaskRetries 1) instead of waiting on the silent connection.
func TestFrozenNodeActorCallRetried(t *testing.T) { runFrozen(t, "actor") }

// TestFrozenNodeLeaseRequestRetried: n1 is frozen just before a task with
// soft affinity to it is submitted, so the head, whose view still has n1
// alive, spills the lease request back to n1. The frozen node's kernel
// accepts and acknowledges the request, so no timeout fires; once n1 is
// declared dead the request is cancelled and the task runs elsewhere.
func TestFrozenNodeLeaseRequestRetried(t *testing.T) { runFrozen(t, "lease") }

// runFrozen runs the frozen driver in mode on three nodes, freezes n1 and
// the worker process running the hanging task or call (none in mode lease),
// tells the driver (marker.go), and waits for it to print where the retry
// ran.
func runFrozen(t *testing.T, mode string) {
	root := t.TempDir()
	head := startNode(t, root, "n0", []string{"start", "--head"})
	testutil.Until(t, 20*time.Second, "head answers", func() error { _, err := status(t, head.addr()); return err })
	n1 := startNode(t, root, "n1", []string{"join", head.addr()})
	startNode(t, root, "n2", []string{"join", head.addr()})
	// Three voters: the two that are not frozen keep a leader, whose view
	// declares n1 dead.
	waitFormed(t, head.addr(), 3)
	driver := buildTestdata(t, "frozen")
	marker := filepath.Join(root, "pid")
	cmd := exec.Command(driver, mode, marker)
	cmd.Env = append(os.Environ(), "NODEUP_ADDRESS="+head.addr())
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("--- driver output ---\n%s", out.String())
		}
	})
	var pid int
	testutil.Until(t, 30*time.Second, "driver ready to freeze n1", func() error {
		select {
		case err := <-done:
			t.Fatalf("driver ended before its task started: %v\n%s", err, out.String())
		default:
		}
		b, err := os.ReadFile(marker)
		if err == nil {
			pid, err = strconv.Atoi(string(b))
		}
		return err
	})
	for _, p := range []int{n1.cmd.Process.Pid, pid} {
		if p == 0 {
			continue
		}
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(marker+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pid != 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = syscall.Kill(n1.cmd.Process.Pid, syscall.SIGCONT)
	})
	frozen := time.Now()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "ran on n0") && !strings.Contains(out.String(), "ran on n2") {
			t.Fatalf("driver: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the %s on frozen n1 was not retried within 60 s:\n%s", mode, out.String())
	}
	t.Logf("%s %s after n1 froze", strings.TrimSpace(out.String()), time.Since(frozen).Round(100*time.Millisecond))
}

// buildTestdata builds ./e2e/testdata/<name> into a temporary directory and
// returns the binary's path.
func buildTestdata(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if err := testutil.GoBuild(bin, "./e2e/testdata/"+name); err != nil {
		t.Fatal(err)
	}
	return bin
}
