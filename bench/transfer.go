package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nodeup/nodeup/worker"
)

// pullSize is the object one pull moves; pullMaxOps bounds a run so its
// pinned copies fit the second node's 1 GiB store.
const (
	pullSize   = 64 << 20
	pullMaxOps = 6
)

// makeBytes returns a fresh buffer of size bytes, stored in the object store
// of the node that ran it.
var makeBytes = worker.Register1(func(ctx context.Context, size int) ([]byte, error) {
	b := make([]byte, size)
	for i := 0; i < len(b); i += 4096 {
		b[i] = byte(i >> 12)
	}
	return b, nil
})

func init() {
	register(&Metric{Name: "cross_node_object_pull_gigabytes", Unit: "GB/s", Group: GroupTransfer, Baseline: BaselineLoopback,
		FreshJob: true, TwoNodes: true,
		Desc: "a task on a second node returns a 64 MiB []byte; the driver's Get makes its node pull it " +
			"(4 MiB chunks, 4 in flight); only the Get is timed",
		Setup: setupPull})
}

func setupPull(ctx context.Context, e *Env) (RunFunc, error) {
	second, err := e.SecondNode(ctx)
	if err != nil {
		return nil, err
	}
	there := worker.Must(makeBytes.Options(worker.NodeAffinity(second, false), worker.Name("make_bytes")))
	// Warm-up: starts the job's worker on the second node.
	if _, err := there.Remote(ctx, 1).Get(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context, d time.Duration) ([]float64, error) {
		var timed time.Duration
		var bytes float64
		for n := 0; n < pullMaxOps && (n == 0 || timed < d); n++ {
			ref := there.Remote(ctx, pullSize)
			// The driver owns the ref, so Wait only waits for the task; the
			// value stays on the second node until Get.
			if _, _, err := worker.Wait(ctx, []worker.Ref[[]byte]{ref}, 1, 0); err != nil {
				return nil, err
			}
			t0 := time.Now()
			v, err := worker.View(ctx, ref) // the pull alone: no copy out of the store
			timed += time.Since(t0)
			if err != nil {
				return nil, err
			}
			if len(v) != pullSize || v[4096] != 1 {
				return nil, fmt.Errorf("pulled %d bytes, want %d with the pattern", len(v), pullSize)
			}
			ref.Release()
			bytes += pullSize
		}
		return []float64{bytes / 1e9 / timed.Seconds()}, nil
	}, nil
}
