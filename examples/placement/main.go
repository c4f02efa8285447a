// Command placement is seed 003's placement-group example in Go, with CPU
// bundles instead of GPUs so it runs anywhere: reserve two bundles with
// PACK, wait until they are ready, run a task in each; then each strategy
// (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD) with one bundle per alive node,
// printing where each bundle landed and checking the strategy's rule; then
// a STRICT_SPREAD group with more bundles than nodes, which is infeasible.
//
//	go run ./examples/placement                   # embedded single node
//	NODEUP_ADDRESS=host:7370 NODEUP_TOKEN=<submit token> bin/placement        # a cluster (3 nodes show the spread)
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

var whereAmI = worker.Register0(func(ctx context.Context) (string, error) { return worker.NodeName(), nil })

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx, worker.EmbeddedResources(map[string]float64{"CPU": 4})); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "placement:", err)
		worker.Shutdown()
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	// Seed 003: pg = placement_group([{"GPU": 1}, {"GPU": 1}], strategy="PACK")
	pg, err := worker.CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 1}, {"CPU": 1}}, "PACK")
	if err != nil {
		return err
	}
	if err := pg.Ready(ctx); err != nil { // ray.get(pg.ready())
		return err
	}
	for i := 0; i < 2; i++ {
		node, err := worker.Must(whereAmI.Options(worker.CPUs(1), worker.InPlacementGroup(pg, i))).Remote(ctx).Get(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("PACK group %s: a task in bundle %d ran on %s\n", pg.ID(), i, node)
	}
	if err := pg.Remove(ctx); err != nil {
		return err
	}

	nodes, err := worker.Nodes(ctx)
	if err != nil {
		return err
	}
	alive := 0
	for _, n := range nodes {
		if n.Alive {
			alive++
		}
	}
	for _, strategy := range []string{"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"} {
		bundles := make([]map[string]float64, alive)
		for i := range bundles {
			bundles[i] = map[string]float64{"CPU": 0.1}
		}
		g, err := worker.CreatePlacementGroup(ctx, bundles, strategy)
		if err != nil {
			return err
		}
		if ok, err := g.Wait(ctx, 30*time.Second); !ok {
			return fmt.Errorf("%s group not ready: %v", strategy, err)
		}
		info, err := g.Info(ctx)
		if err != nil {
			return err
		}
		distinct := map[string]bool{}
		fmt.Printf("%-13s", strategy)
		for _, b := range info.Bundles {
			distinct[b.NodeID] = true
			fmt.Printf("  bundle %d -> %s", b.Index, b.NodeName)
		}
		fmt.Println()
		switch {
		case strategy == "STRICT_PACK" && len(distinct) != 1:
			return fmt.Errorf("STRICT_PACK used %d nodes", len(distinct))
		case strategy == "STRICT_SPREAD" && len(distinct) != len(info.Bundles):
			return fmt.Errorf("STRICT_SPREAD put %d bundles on %d nodes", len(info.Bundles), len(distinct))
		}
		if err := g.Remove(ctx); err != nil {
			return err
		}
	}

	// One bundle more than there are nodes: STRICT_SPREAD can never hold it.
	bundles := make([]map[string]float64, alive+1)
	for i := range bundles {
		bundles[i] = map[string]float64{"CPU": 0.1}
	}
	g, err := worker.CreatePlacementGroup(ctx, bundles, "STRICT_SPREAD")
	if err != nil {
		return err
	}
	ok, err := g.Wait(ctx, 2*time.Second)
	if ok || !errors.Is(err, worker.ErrInfeasible) {
		return fmt.Errorf("STRICT_SPREAD of %d on %d nodes: ready %v, %v; want infeasible", alive+1, alive, ok, err)
	}
	var inf *worker.InfeasibleError
	errors.As(err, &inf)
	fmt.Printf("STRICT_SPREAD of %d bundles on %d nodes is infeasible: %s\n", alive+1, alive, inf.Reason)
	if err := g.Remove(ctx); err != nil {
		return err
	}
	fmt.Printf("check: tasks ran in their bundles, each strategy's rule held on %d nodes, STRICT_SPREAD of %d was infeasible\n", alive, alive+1)
	return nil
}
