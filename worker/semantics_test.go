package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
)

// Regression tests for issue 12: programs written from the docs, with tasks
// that last, block and crash, on the semantics Ray promises.

// running counts tasks of waitForPeer running at once in this worker
// process; overlaps counts the starts that found another one running.
var running, overlaps atomic.Int64

// waitForPeer runs for hold and reports whether another waitForPeer task
// ran at the same time in the same worker process (it was running when
// this one started, or started while this one ran).
var waitForPeer = Register1(func(ctx context.Context, hold time.Duration) (bool, error) {
	met := running.Add(1) >= 2
	if met {
		overlaps.Add(1)
	}
	defer running.Add(-1)
	seen := overlaps.Load()
	for end := time.Now().Add(hold); time.Now().Before(end); {
		time.Sleep(2 * time.Millisecond)
		met = met || overlaps.Load() != seen
	}
	return met, nil
})

// TestLongTasksRunInParallel: eight 1-CPU tasks on an idle 2-CPU node run
// two at a time, not one after another on one lease; also after many short
// tasks of the same shape made the submitter pipeline them.
func TestLongTasksRunInParallel(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	check := func(phase string) {
		var refs []Ref[bool]
		for range 8 {
			refs = append(refs, waitForPeer.Remote(ctx, 400*time.Millisecond))
		}
		for i, r := range refs {
			met, err := r.Get(ctx)
			if err != nil {
				t.Fatalf("%s: task %d: %v", phase, i, err)
			}
			if !met {
				t.Fatalf("%s: task %d of 8 ran alone on an idle 2-CPU node: the tasks ran one after another", phase, i)
			}
		}
	}
	check("first burst")
	// Many no-op tasks of the same shape: the submitter may now pipeline.
	var warm []Ref[int]
	for range 500 {
		warm = append(warm, noop.Remote(ctx, 1))
	}
	if _, err := GetAll(ctx, warm); err != nil {
		t.Fatal(err)
	}
	check("after 500 short tasks")
}

// holders counts, per resource name, the tasks holding it in this worker
// process; mostHeld is the most seen at once.
var (
	holdersMu sync.Mutex
	holders   = map[string]int{}
	mostHeld  = map[string]int{}
)

// holdUntil holds res (its demand, given by the caller's options) until s
// is sent, blocked in Wait meanwhile, and returns the most tasks holding
// res at once in this process.
var holdUntil = Register2(func(ctx context.Context, res string, s Signal) (int, error) {
	holdersMu.Lock()
	holders[res]++
	mostHeld[res] = max(mostHeld[res], holders[res])
	holdersMu.Unlock()
	defer func() {
		holdersMu.Lock()
		holders[res]--
		holdersMu.Unlock()
	}()
	if err := s.Wait(ctx); err != nil {
		return 0, err
	}
	holdersMu.Lock()
	defer holdersMu.Unlock()
	return mostHeld[res], nil
})

// TestBlockedTasksNeverOvercommitCustomResources: tasks blocked in a Wait
// keep their custom resources; only CPU is lent. Eight FPGA:1 tasks on a
// node with FPGA=4 hold at most four at once, and four TPU-v3:0.5 tasks on
// TPU-v3=1 at most two.
func TestBlockedTasksNeverOvercommitCustomResources(t *testing.T) {
	startCluster(t, 1, func(int) sched.ResourceSet {
		return sched.ResourceSet{"FPGA": sched.QuantityOf(4), "TPU-v3": sched.QuantityOf(1)}
	})
	ctx := ctxT(t)
	for _, c := range []struct {
		res      string
		amount   float64
		tasks    int
		capacity int
	}{{"FPGA", 1, 8, 4}, {"TPU-v3", 0.5, 4, 2}} {
		sig, err := NewSignal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f := Must(holdUntil.Options(Resources(map[string]float64{c.res: c.amount})))
		var refs []Ref[int]
		for range c.tasks {
			refs = append(refs, f.Remote(ctx, c.res, sig))
		}
		waitAvailable(t, c.res, 0)
		if err := sig.Send(ctx, false); err != nil {
			t.Fatal(err)
		}
		for i, r := range refs {
			most, err := r.Get(ctx)
			if err != nil {
				t.Fatalf("%s task %d: %v", c.res, i, err)
			}
			if most > c.capacity {
				t.Fatalf("%d tasks held %s at once (each asks %v); the node has %v: blocked tasks lent more than CPU",
					most, c.res, c.amount, float64(c.capacity)*c.amount)
			}
		}
		waitAvailable(t, c.res, float64(c.capacity)*c.amount)
	}
}

// waitAvailable polls until the cluster's available amount of res is want.
func waitAvailable(t *testing.T, res string, want float64) {
	t.Helper()
	testutil.Until(t, 20*time.Second, fmt.Sprintf("available %s = %v", res, want), func() error {
		avail, err := AvailableResources(context.Background())
		if err == nil && avail[res] != want {
			err = fmt.Errorf("available %s = %v", res, avail[res])
		}
		return err
	})
}

// TestSpreadIsRoundRobin: twelve short SPREAD tasks on three idle nodes with
// room for all of them land four on each (Ray's round robin over feasible
// nodes, preferring available ones). A round that is one off is run again
// once: under the race detector on a loaded 2-core machine a node's
// liveness in the view can flap for a moment (CI saw 5/3/4 once), and a
// placement made then is right to skip it; a policy that does not spread
// (12/0/0 before the fix, 6/3/3 for "least loaded") fails both runs.
func TestSpreadIsRoundRobin(t *testing.T) {
	startClusterInit(t, 3, func(i int, cfg *cluster.Config) { cfg.Resources[sched.CPU] = sched.QuantityOf(4) })
	even := func(got map[string]int) bool {
		return len(got) == 3 && got["n0"] == 4 && got["n1"] == 4 && got["n2"] == 4
	}
	for round := range 3 {
		got := whereAll(t, 12, Spread())
		if !even(got) {
			t.Logf("round %d: 12 SPREAD tasks landed %v; running it again", round, got)
			waitAvailable(t, sched.CPU, 12)
			got = whereAll(t, 12, Spread())
		}
		if !even(got) {
			t.Fatalf("round %d: 12 SPREAD tasks on 3 idle nodes landed %v, want 4 on each", round, got)
		}
	}
}

// crashWithPID exits its worker process on its first attempt, after writing
// the process's PID to marker; a later attempt returns its own PID.
var crashWithPID = Register1(func(ctx context.Context, marker string) (int, error) {
	if _, err := os.Stat(marker); err != nil {
		_ = os.WriteFile(marker, []byte(strconv.Itoa(os.Getpid())), 0o644)
		os.Exit(3)
	}
	return os.Getpid(), nil
})

// sleepPID sleeps for d and returns its worker process's PID.
var sleepPID = Register1(func(ctx context.Context, d time.Duration) (int, error) {
	time.Sleep(d)
	return os.Getpid(), nil
})

// TestRetryRunsInAFreshWorker: a task whose worker process crashes is
// retried in another process, even when the submitter holds other leases
// on the dead process; the tasks that died with it are retried too.
func TestRetryRunsInAFreshWorker(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	opts := []Option{CPUs(0), MaxRetries(1)}
	var sleepers []Ref[int]
	for range 4 {
		sleepers = append(sleepers, Must(sleepPID.Options(opts...)).Remote(ctx, 300*time.Millisecond))
	}
	marker := filepath.Join(t.TempDir(), "crashed")
	pid, err := Must(crashWithPID.Options(opts...)).Remote(ctx, marker).Get(ctx)
	if err != nil {
		t.Fatalf("crashing task with MaxRetries(1): %v", err)
	}
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	crashed, _ := strconv.Atoi(string(b))
	if pid == crashed || crashed == 0 {
		t.Fatalf("retry ran in process %d; the first attempt crashed process %d", pid, crashed)
	}
	for i, r := range sleepers {
		if _, err := r.Get(ctx); err != nil {
			t.Fatalf("sleeper %d, whose process crashed under it once (MaxRetries(1)): %v", i, err)
		}
	}
}

// TestDriverFailsWhenItsNodeDies (issue 13, item 3): a driver whose own
// node (here the leader) dies gets NodeDiedError for its tasks within a
// bound instead of retrying the dead node forever; tasks already running
// on other nodes still finish.
func TestDriverFailsWhenItsNodeDies(t *testing.T) {
	old := localNodeTimeout
	localNodeTimeout = 2 * time.Second
	t.Cleanup(func() { localNodeTimeout = old })
	nodes := startCluster(t, 3, nil)
	ctx := ctxT(t)
	marker := filepath.Join(t.TempDir(), "started")
	running := Must(slowWhere.Options(NodeAffinity(nodes[1].ID(), false))).Remote(ctx, marker)
	waitStarted(t, marker, "n1")
	nodes[0].Kill()
	start := time.Now()
	_, err := noop.Remote(ctx, 1).Get(ctx)
	var nd *NodeDiedError
	if !errors.As(err, &nd) {
		t.Fatalf("task submitted after the driver's node died: %v, want NodeDiedError", err)
	}
	t.Logf("NodeDiedError after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if got, err := running.Get(ctx); err != nil || got != "n1" {
		t.Fatalf("task running on n1 when n0 died: %q, %v", got, err)
	}
	if _, err := noop.Remote(ctx, 2).Get(ctx); !errors.As(err, &nd) {
		t.Fatalf("a later task: %v, want NodeDiedError at once", err)
	}
}
