package bench

import (
	"context"
	"fmt"
	"sync"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/worker"
)

// pgRound is how many groups one operation creates, waits for and removes
// (Ray's ray_perf.py placement_group_create/removal uses 100).
const pgRound = 100

func init() {
	register(&Metric{Name: "placement_group_create/removal", Unit: "groups/s", Group: GroupPlacement,
		Desc:  "create 100 placement groups of one bundle {custom: 0.001} one after another, Wait for each, then remove all 100 (concurrently: each Remove waits for its durable write)",
		Setup: setupPlacement})
}

// setupPlacement measures Ray's placement-group metric: per operation 100
// one-bundle groups are created in a loop (each create returns at once, as
// Ray's does; the leader batches their durable writes), waited for, and
// removed. Ray's loop removes them one after another with a synchronous
// call to an in-memory store; nodeup's Remove returns after the removal is
// durable in Raft and the bundle is back on its node, so the 100 removals
// are issued concurrently, which lets the leader batch them into a few
// Raft entries. The bundle asks for 0.001 of "custom" (the embedded node
// offers 100 of it, as Ray's benchmark cluster does), or of CPU on a
// cluster without it.
func setupPlacement(ctx context.Context, e *Env) (RunFunc, error) {
	nodes, err := worker.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	res := sched.CPU
	for _, nd := range nodes {
		if nd.NodeID == worker.NodeID() && nd.Total["custom"] > 0 {
			res = "custom"
		}
	}
	bundles := []map[string]float64{{res: 0.001}}
	return throughput(func(ctx context.Context) (float64, error) {
		pgs := make([]*worker.PlacementGroup, pgRound)
		for i := range pgs {
			pg, err := worker.CreatePlacementGroup(ctx, bundles, "PACK")
			if err != nil {
				return 0, err
			}
			pgs[i] = pg
		}
		for _, pg := range pgs {
			if err := pg.Ready(ctx); err != nil {
				return 0, fmt.Errorf("wait for %s: %w", pg, err)
			}
		}
		errs := make([]error, len(pgs))
		var wg sync.WaitGroup
		for i, pg := range pgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = pg.Remove(ctx)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return 0, err
			}
		}
		return pgRound, nil
	}), nil
}
