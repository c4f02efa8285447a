// Command clusterstate is seed 002's global state API in Go: the nodes of
// the cluster (ray.nodes()), its total resources (ray.cluster_resources())
// and what is free now (ray.available_resources()). It checks that the
// totals are the sum over alive nodes and that nothing is more free than exists.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"strconv"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	nodes, err := worker.Nodes(ctx)
	if err != nil {
		fail("%v", err)
	}
	total, err := worker.ClusterResources(ctx)
	if err != nil {
		fail("%v", err)
	}
	avail, err := worker.AvailableResources(ctx)
	if err != nil {
		fail("%v", err)
	}
	sum := map[string]float64{}
	for _, n := range nodes {
		fmt.Printf("node %s (%s) alive=%v state=%s resources=%v\n", n.NodeName, n.NodeID[:8], n.Alive, n.State, n.Total)
		if n.Alive {
			for k, v := range n.Total {
				sum[k] += v
			}
		}
	}
	names := make([]string, 0, len(total))
	for k := range total {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Println("cluster resources (available/total):")
	for _, k := range names {
		fmt.Printf("  %s: %s/%s\n", k, strconv.FormatFloat(avail[k], 'f', -1, 64), strconv.FormatFloat(total[k], 'f', -1, 64))
		if total[k] != sum[k] {
			fail("total %s is %v, but alive nodes sum to %v", k, total[k], sum[k])
		}
		if avail[k] > total[k] {
			fail("available %s %v exceeds the total %v", k, avail[k], total[k])
		}
	}
	fmt.Println("check: totals are the sum over alive nodes; nothing is more available than exists")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "clusterstate: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
