package bench

import (
	"context"
	"fmt"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/worker"
)

// Sizes of the object metrics. Ray puts an 800 MB array, and 10 tasks of
// 10 × 80 MB; nodeup uses 100 MiB and 10 tasks of 10 × 8 MiB, so a run fits
// the object store of a small machine (objects are freed at job end only).
const (
	putLargeSize     = 100 << 20
	multiPutTasks    = 10
	multiPutPerTask  = 10
	multiPutSize     = 8 << 20
	multiPutSmallPer = 100 // Ray: 10 tasks of 100 small puts
	refsInObject     = 10000
	waitRefs         = 1000
)

var (
	// putSmall puts n small values (Ray's do_put_small).
	putSmall = worker.Register1(func(ctx context.Context, n int) (int, error) {
		for range n {
			if _, err := worker.Put(ctx, 0); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
	// putLarge puts n buffers of size bytes (Ray's do_put).
	putLarge = worker.Register2(func(ctx context.Context, n, size int) (int, error) {
		buf := make([]byte, size)
		for range n {
			if _, err := worker.Put(ctx, buf); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
	// createObjectContainingRefs puts n small values and returns their refs
	// in one object (Ray's create_object_containing_ref).
	createObjectContainingRefs = worker.Register1(func(ctx context.Context, n int) ([]worker.Ref[int], error) {
		return putRefs(ctx, n, 1)
	})
)

func init() {
	register(
		&Metric{Name: "single_client_put_calls", Unit: "puts/s", Group: GroupObjects,
			Desc:  "Put of a small value (the int 0) by the driver",
			Setup: setupPutCalls},
		&Metric{Name: "multi_client_put_calls", Unit: "puts/s", Group: GroupObjects,
			Desc:  "10 tasks each Put 100 small values, run as goroutines of the job's worker process",
			Setup: setupMultiPutCalls},
		&Metric{Name: "single_client_put_gigabytes", Unit: "GB/s", Group: GroupObjects, Baseline: BaselineMemcpy, FreshJob: true, WarmJob: true,
			Desc:  "Put of a 100 MiB []byte by the driver into the node's shared-memory store",
			Setup: setupPutGigabytes},
		&Metric{Name: "multi_client_put_gigabytes", Unit: "GB/s", Group: GroupObjects, Baseline: BaselineMemcpy, FreshJob: true,
			Desc:  "10 tasks each Put 10 buffers of 8 MiB, run as goroutines of the job's worker process",
			Setup: setupMultiPutGigabytes},
		&Metric{Name: "single_client_get_calls", Unit: "gets/s", Group: GroupObjects,
			Desc:  "Get of a small value the driver Put (Ray: ray.get of a ray.put(0))",
			Setup: setupGetCalls},
		&Metric{Name: "single_client_get_object_containing_10k_refs", Unit: "gets/s", Group: GroupObjects,
			Desc:  "Get of a task's result that holds 10,000 refs (a ~400 KB value in the shared-memory store)",
			Setup: setupGetContaining10kRefs},
		&Metric{Name: "single_client_wait_1k_refs", Unit: "batches/s", Group: GroupObjects,
			Desc:  "one batch: submit 1,000 no-op tasks, then Wait(refs, 1) on the not-ready rest until none is left",
			Setup: setupWait1kRefs},
	)
}

func setupPutCalls(ctx context.Context, e *Env) (RunFunc, error) {
	return throughput(func(ctx context.Context) (float64, error) {
		_, err := worker.Put(ctx, 0)
		return 1, err
	}), nil
}

func setupMultiPutCalls(ctx context.Context, e *Env) (RunFunc, error) {
	return throughput(func(ctx context.Context) (float64, error) {
		refs := make([]worker.Ref[int], multiPutTasks)
		for i := range refs {
			refs[i] = putSmall.Remote(ctx, multiPutSmallPer)
		}
		_, err := worker.GetAll(ctx, refs)
		return multiPutTasks * multiPutSmallPer, err
	}), nil
}

// storeOps is how many operations of size bytes one run may do: a third of
// the driver's node's object store, since nothing is freed before the job
// ends (at least 1).
func storeOps(ctx context.Context, size int64) (int, error) {
	nodes, err := worker.Nodes(ctx)
	if err != nil {
		return 0, err
	}
	for _, n := range nodes {
		if n.NodeID == worker.NodeID() {
			capacity := int64(n.Total[sched.ObjectStoreMemory]) // bytes
			return max(1, int(capacity/3/size)), nil
		}
	}
	return 0, fmt.Errorf("the driver's node %s is not in the node table", worker.NodeID())
}

func setupPutGigabytes(ctx context.Context, e *Env) (RunFunc, error) {
	buf := make([]byte, putLargeSize)
	if _, err := worker.Put(ctx, buf); err != nil { // warm-up: maps the store, faults in buf
		return nil, err
	}
	ops, err := storeOps(ctx, 2*putLargeSize)
	if err != nil {
		return nil, err
	}
	return throughputMax(func(ctx context.Context) (float64, error) {
		_, err := worker.Put(ctx, buf)
		return putLargeSize / 1e9, err
	}, ops), nil
}

func setupMultiPutGigabytes(ctx context.Context, e *Env) (RunFunc, error) {
	if _, err := putLarge.Remote(ctx, 1, multiPutSize).Get(ctx); err != nil { // warm-up: starts the worker
		return nil, err
	}
	const opBytes = multiPutTasks * multiPutPerTask * multiPutSize
	ops, err := storeOps(ctx, opBytes)
	if err != nil {
		return nil, err
	}
	return throughputMax(func(ctx context.Context) (float64, error) {
		refs := make([]worker.Ref[int], multiPutTasks)
		for i := range refs {
			refs[i] = putLarge.Remote(ctx, multiPutPerTask, multiPutSize)
		}
		_, err := worker.GetAll(ctx, refs)
		return opBytes / 1e9, err
	}, ops), nil
}

func setupGetCalls(ctx context.Context, e *Env) (RunFunc, error) {
	ref, err := worker.Put(ctx, 0)
	if err != nil {
		return nil, err
	}
	return throughput(func(ctx context.Context) (float64, error) {
		_, err := ref.Get(ctx)
		return 1, err
	}), nil
}

func setupGetContaining10kRefs(ctx context.Context, e *Env) (RunFunc, error) {
	ref := createObjectContainingRefs.Remote(ctx, refsInObject)
	return throughput(func(ctx context.Context) (float64, error) {
		refs, err := ref.Get(ctx)
		if err == nil && len(refs) != refsInObject {
			err = fmt.Errorf("got %d refs, want %d", len(refs), refsInObject)
		}
		return 1, err
	}), nil
}

func setupWait1kRefs(ctx context.Context, e *Env) (RunFunc, error) {
	return throughput(func(ctx context.Context) (float64, error) {
		notReady := make([]worker.Ref[[]byte], waitRefs)
		for i := range notReady {
			notReady[i] = smallValue.Remote(ctx)
		}
		for len(notReady) > 0 {
			var err error
			if _, notReady, err = worker.Wait(ctx, notReady, 1, 0); err != nil {
				return 0, err
			}
		}
		return 1, nil
	}), nil
}
