package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// The test binary doubles as the worker binary: nodes re-execute it with
// NODEUP_WORKER=1, and then Init serves tasks instead of running tests.
func TestMain(m *testing.M) {
	if os.Getenv(wire.EnvWorkerMode) == "1" {
		_ = Init(context.Background())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var (
	square = Register1(func(ctx context.Context, x int) (int, error) { return x * x, nil })
	add    = Register2(func(ctx context.Context, a, b int) (int, error) { return a + b, nil })
	divmod = Register2x2(func(ctx context.Context, a, b int) (int, int, error) { return a / b, a % b, nil })
	where  = Register0(func(ctx context.Context) (string, error) { return NodeName(), nil })
	fails  = Register1(func(ctx context.Context, msg string) (int, error) { return 0, errors.New(msg) })
	panics = Register0(func(ctx context.Context) (int, error) { panic("boom") })
	// nested sums 0..n-1 by a tree of nested tasks deeper than the CPU count.
	nested Func1[int, int]
	sumRef = Register1(func(ctx context.Context, refs []Ref[int]) (int, error) {
		total := 0
		for _, r := range refs {
			v, err := r.Get(ctx)
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, nil
	})
	crashOnce = Register1(func(ctx context.Context, marker string) (string, error) {
		if _, err := os.Stat(marker); err != nil {
			_ = os.WriteFile(marker, []byte("x"), 0o644)
			os.Exit(3) // the worker process dies mid-task
		}
		return "survived", nil
	})
)

func init() {
	nested = Register1(func(ctx context.Context, depth int) (int, error) {
		if depth == 0 {
			return 1, nil
		}
		v, err := nested.Remote(ctx, depth-1).Get(ctx)
		return v + 1, err
	})
}

// startCluster starts n in-process nodes (2 CPUs each, node i also offers
// "node<i>": 2) and connects this test's driver to node 0.
func startCluster(t testing.TB, n int, extra func(i int) sched.ResourceSet) []*cluster.Node {
	t.Helper()
	return startClusterInit(t, n, func(i int, cfg *cluster.Config) {
		if extra != nil {
			cfg.Resources.Add(extra(i))
		}
	})
}

// startClusterInit is startCluster with each node's config passed to mutate
// (if not nil) before the node starts, and extra options for the driver's
// Init (after Address and Logger).
func startClusterInit(t testing.TB, n int, mutate func(i int, cfg *cluster.Config), initOpts ...InitOption) []*cluster.Node {
	t.Helper()
	nodes := clustertest.Start(t, n, func(i int, cfg *cluster.Config) {
		cfg.Resources[fmt.Sprintf("node%d", i)] = sched.QuantityOf(2)
		if mutate != nil {
			mutate(i, cfg)
		}
	})
	// Start waited until node 0, the driver's, sees every node (spillback
	// needs the view).
	if err := Init(context.Background(), append([]InitOption{Address(nodes[0].SocketAddr()), Logger(testutil.Logger())}, initOpts...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(Shutdown)
	return nodes
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTasksOnOneNode(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	var refs []Ref[int]
	for i := 0; i < 20; i++ {
		refs = append(refs, square.Remote(ctx, i))
	}
	got, err := GetAll(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != i*i {
			t.Fatalf("square(%d) = %d", i, v)
		}
	}
	q, r := divmod.Remote(ctx, 17, 5)
	if qv, _ := q.Get(ctx); qv != 3 {
		t.Fatalf("17/5 = %d", qv)
	}
	if rv, _ := r.Get(ctx); rv != 2 {
		t.Fatalf("17%%5 = %d", rv)
	}
	// A ref as an argument is resolved before the task runs.
	four := square.Remote(ctx, 2)
	sum := add.RemoteArgs(ctx, four, Val(10))
	if v, err := sum.Get(ctx); err != nil || v != 14 {
		t.Fatalf("add(square(2), 10) = %d, %v", v, err)
	}
	// Put, and refs nested in a value are passed as refs.
	p, err := Put(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := sumRef.Remote(ctx, []Ref[int]{p, four, square.Remote(ctx, 3)}).Get(ctx); err != nil || v != 18 {
		t.Fatalf("sumRef = %d, %v", v, err)
	}
}

func TestTaskErrorsAndPanics(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	_, err := Must(fails.Options(Name("bad-task"))).Remote(ctx, "no good").Get(ctx)
	var te *TaskError
	if !errors.As(err, &te) || te.TaskName != "bad-task" || te.Message != "no good" || te.NodeName != "n0" || te.Panic {
		t.Fatalf("want TaskError from bad-task on n0, got %#v", err)
	}
	_, err = panics.Remote(ctx).Get(ctx)
	if !errors.As(err, &te) || !te.Panic || te.Message != "boom" || te.Stack == "" {
		t.Fatalf("want a panic TaskError with a stack, got %#v", err)
	}
	// The worker survived both.
	if v, err := square.Remote(ctx, 7).Get(ctx); err != nil || v != 49 {
		t.Fatalf("after failures: %d, %v", v, err)
	}
}

func TestNestedDeeperThanCPUs(t *testing.T) {
	startCluster(t, 1, nil) // 2 CPUs
	ctx := ctxT(t)
	v, err := nested.Remote(ctx, 8).Get(ctx)
	if err != nil || v != 9 {
		t.Fatalf("nested(8) = %d, %v", v, err)
	}
}

func TestRetryAfterWorkerDies(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	marker := filepath.Join(t.TempDir(), "crashed")
	v, err := crashOnce.Remote(ctx, marker).Get(ctx)
	if err != nil || v != "survived" {
		t.Fatalf("crashOnce = %q, %v", v, err)
	}
	marker2 := filepath.Join(t.TempDir(), "crashed")
	_, err = Must(crashOnce.Options(MaxRetries(0))).Remote(ctx, marker2).Get(ctx)
	var wc *WorkerCrashedError
	if !errors.As(err, &wc) {
		t.Fatalf("with MaxRetries(0): want WorkerCrashedError, got %v", err)
	}
}

func TestCustomResourcesRouteAcrossNodes(t *testing.T) {
	startCluster(t, 3, nil)
	ctx := ctxT(t)
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("node%d", i)
		got, err := Must(where.Options(Resources(map[string]float64{name: 1}))).Remote(ctx).Get(ctx)
		if err != nil || got != fmt.Sprintf("n%d", i) {
			t.Fatalf("task needing %s ran on %q (%v)", name, got, err)
		}
	}
}

func TestInfeasibleFailsWhenAsked(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	_, err := Must(square.Options(Resources(map[string]float64{"TPU-v3": 3}), FailIfInfeasible())).Remote(ctx, 1).Get(ctx)
	var ie *InfeasibleError
	if !errors.As(err, &ie) || !strings.Contains(ie.Reason, "TPU-v3") {
		t.Fatalf("want InfeasibleError naming TPU-v3, got %v", err)
	}
	// Without FailIfInfeasible the task waits: Get honours its deadline.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := Must(square.Options(Resources(map[string]float64{"TPU-v3": 3}))).Remote(ctx, 1).Get(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("infeasible task without FailIfInfeasible: want deadline exceeded, got %v", err)
	}
}

func TestInfeasibleListedAsPendingDemand(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	_ = Must(square.Options(Name("needs-tpus"), Resources(map[string]float64{"TPU-v3": 3}))).Remote(ctx, 1)
	pool := rpc.NewPool([]byte{wire.PreambleRPC}, wire.ProtocolVersion, time.Second)
	defer pool.Close()
	testutil.Until(t, 15*time.Second, "status lists needs-tpus as pending demand for TPU-v3", func() error {
		var st wire.StatusResponse
		err := pool.Call(ctx, nodes[0].SocketAddr(), wire.MethodStatus, &wire.Empty{}, &st)
		if err == nil && !(len(st.Pending) == 1 && st.Pending[0].TaskName == "needs-tpus" && strings.Contains(st.Pending[0].Reason, "TPU-v3")) {
			err = fmt.Errorf("pending demand %+v", st.Pending)
		}
		return err
	})
}

// putOnNode puts a value in the worker process running it (which then owns
// it) and returns the ref nested in a slice, so it travels as a ref.
var putOnNode = Register1(func(ctx context.Context, v int) ([]Ref[int], error) {
	r, err := Put(ctx, v)
	return []Ref[int]{r}, err
})

var getNested = Register1(func(ctx context.Context, refs []Ref[int]) (string, error) {
	v, err := refs[0].Get(ctx)
	return fmt.Sprintf("%d@%s", v, NodeName()), err
})

func TestRefOwnedByWorkerReadOnAnotherNode(t *testing.T) {
	startCluster(t, 3, nil)
	ctx := ctxT(t)
	refs, err := Must(putOnNode.Options(Resources(map[string]float64{"node1": 1}))).Remote(ctx, 42).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if refs[0].Owner() == "" {
		t.Fatal("nested ref lost its owner")
	}
	got, err := Must(getNested.Options(Resources(map[string]float64{"node2": 1}))).Remote(ctx, refs).Get(ctx)
	if err != nil || got != "42@n2" {
		t.Fatalf("borrower on n2 read %q, %v; want 42@n2", got, err)
	}
	// The driver can read it from the owner too.
	if v, err := refs[0].Get(ctx); err != nil || v != 42 {
		t.Fatalf("driver read %d, %v", v, err)
	}
}

// slowWhere marks that it started, then reports its node after a while.
var slowWhere = Register1(func(ctx context.Context, marker string) (string, error) {
	_ = os.WriteFile(marker+"."+NodeName(), nil, 0o644)
	time.Sleep(1500 * time.Millisecond)
	return NodeName(), nil
})

// waitStarted polls until slowWhere, given marker, has started on node.
func waitStarted(t *testing.T, marker, node string) {
	t.Helper()
	testutil.Until(t, 20*time.Second, "task starts on "+node, func() error {
		_, err := os.Stat(marker + "." + node)
		return err
	})
}

func TestTaskRetriedWhenItsNodeDies(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	ctx := ctxT(t)
	marker := filepath.Join(t.TempDir(), "started")
	ref := Must(slowWhere.Options(NodeAffinity(nodes[1].ID(), true))).Remote(ctx, marker)
	waitStarted(t, marker, "n1")
	nodes[1].Kill() // the node and its worker processes die mid-task
	got, err := ref.Get(ctx)
	if err != nil || got != "n0" {
		t.Fatalf("after n1 died the task returned %q, %v; want a retry on n0", got, err)
	}
}
