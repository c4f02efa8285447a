package e2e

import (
	"os"
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
	// Three voters: the two that are not frozen keep a leader, whose view
	// declares n1 dead.
	nodes := startThreeNodes(t)
	head, n1 := nodes[0], nodes[1]
	marker := filepath.Join(t.TempDir(), "pid")
	d := startDriver(t, []string{buildTestdata(t, "frozen"), mode, marker}, []string{"NODEUP_ADDRESS=" + head.sock()})
	b := waitFile(t, d, marker, "driver ready to freeze n1", 30*time.Second)
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("marker %q: %v", b, err)
	}
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
	case <-d.Done():
		out := d.Log.String()
		if err := d.Wait(); err != nil || !strings.Contains(out, "ran on n0") && !strings.Contains(out, "ran on n2") {
			t.Fatalf("driver: %v\n%s", err, out)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the %s on frozen n1 was not retried within 60 s:\n%s", mode, d.Log.String())
	}
	t.Logf("%s %s after n1 froze", strings.TrimSpace(d.Log.String()), time.Since(frozen).Round(100*time.Millisecond))
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
