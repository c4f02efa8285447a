package bench

import (
	"context"
	"fmt"

	"github.com/nodeup/nodeup/worker"
)

// Batch sizes, as Ray's ray_perf.py: 1,000 tasks per async operation; the
// multi-client metric uses 4 clients of 1,000 tasks (Ray: 10,000 each,
// reduced so one operation fits a short run on 2 cores).
const (
	asyncBatch       = 1000
	multiClients     = 4
	multiClientTasks = 1000
)

var okValue = []byte("ok")

// Remote functions of the bench. They are package-level, so every copy of a
// binary linking this package registers them in the same order, and a
// worker process of a bench job knows them.
var (
	// smallValue is Ray's small_value: a no-op task returning b"ok".
	smallValue = worker.Register0(func(ctx context.Context) ([]byte, error) { return okValue, nil })
	// smallValueBatch is a client: it submits n small_value tasks from inside
	// the cluster and waits for them (Ray's Actor.small_value_batch).
	smallValueBatch = worker.Register1(func(ctx context.Context, n int) (int, error) {
		return n, submitAndGet(ctx, n)
	})
)

func init() {
	register(
		&Metric{Name: "single_client_tasks_sync", Unit: "tasks/s", Group: GroupTasks, Baseline: BaselineUnixRTT,
			Desc:  "submit one no-op task and Get its result, one at a time",
			Setup: setupTasksSync},
		&Metric{Name: "single_client_tasks_async", Unit: "tasks/s", Group: GroupTasks,
			Desc:  "submit 1,000 no-op tasks, then GetAll of their refs",
			Setup: setupTasksAsync},
		&Metric{Name: "multi_client_tasks_async", Unit: "tasks/s", Group: GroupTasks,
			Desc: "4 client tasks (CPUs(0), Ray: 4 actors) each submit 1,000 no-op tasks from inside the cluster and Get them; " +
				"the clients run as goroutines of the job's one worker process per node",
			Setup: setupMultiClientTasks},
		&Metric{Name: "single_client_tasks_and_get_batch", Unit: "batches/s", Group: GroupTasks,
			Desc:  "one batch: submit 1,000 no-op tasks and Get them all",
			Setup: setupTasksAndGetBatch},
	)
}

func checkOK(b []byte) error {
	if string(b) != "ok" {
		return fmt.Errorf("task returned %q, want \"ok\"", b)
	}
	return nil
}

func setupTasksSync(ctx context.Context, e *Env) (RunFunc, error) {
	return throughput(func(ctx context.Context) (float64, error) {
		v, err := smallValue.Remote(ctx).Get(ctx)
		if err != nil {
			return 0, err
		}
		return 1, checkOK(v)
	}), nil
}

// submitAndGet submits n no-op tasks and gets them all.
func submitAndGet(ctx context.Context, n int) error {
	refs := make([]worker.Ref[[]byte], n)
	for i := range refs {
		refs[i] = smallValue.Remote(ctx)
	}
	vals, err := worker.GetAll(ctx, refs)
	if err != nil {
		return err
	}
	return checkOK(vals[len(vals)-1])
}

func setupTasksAsync(ctx context.Context, e *Env) (RunFunc, error) {
	return throughput(func(ctx context.Context) (float64, error) {
		return asyncBatch, submitAndGet(ctx, asyncBatch)
	}), nil
}

func setupTasksAndGetBatch(ctx context.Context, e *Env) (RunFunc, error) {
	return throughput(func(ctx context.Context) (float64, error) {
		return 1, submitAndGet(ctx, asyncBatch)
	}), nil
}

func setupMultiClientTasks(ctx context.Context, e *Env) (RunFunc, error) {
	clients := worker.Must(smallValueBatch.Options(worker.CPUs(0), worker.Name("small_value_batch")))
	return throughput(func(ctx context.Context) (float64, error) {
		refs := make([]worker.Ref[int], multiClients)
		for i := range refs {
			refs[i] = clients.Remote(ctx, multiClientTasks)
		}
		if _, err := worker.GetAll(ctx, refs); err != nil {
			return 0, err
		}
		return multiClients * multiClientTasks, nil
	}), nil
}
