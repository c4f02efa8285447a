// Command roundrobin is seed 001's round-robin example in Go: 1,000 tasks
// spread over however many nodes offer a "node<i>" custom resource, without
// knowing the topology in advance. It checks every result and that each
// node<i> task ran on the node that offers node<i>. Then the same 1,000
// tasks with the SPREAD strategy instead of custom resources: the scheduler
// spreads them over the alive nodes by itself.
//
//	go run ./examples/roundrobin                          # embedded node with node0=2
//	NODEUP_ADDRESS=host:7370 NODEUP_TOKEN=<submit token> bin/roundrobin              # nodes started with --resources node<i>=2
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

// Result is a task's input and where it ran.
type Result struct {
	I    int
	Node string
}

var f = worker.Register1(func(ctx context.Context, i int) (Result, error) {
	return Result{I: i, Node: worker.NodeName()}, nil
})

// g is f with a millisecond of work, so SPREAD has load to spread.
var g = worker.Register1(func(ctx context.Context, i int) (Result, error) {
	time.Sleep(time.Millisecond)
	return Result{I: i, Node: worker.NodeName()}, nil
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx, worker.EmbeddedResources(map[string]float64{"node0": 2})); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	nodes, err := worker.Nodes(ctx)
	if err != nil {
		fail("%v", err)
	}
	owner := map[string]string{} // node<i> → node name
	for i := 0; ; i++ {
		name := fmt.Sprintf("node%d", i)
		for _, n := range nodes {
			if n.Alive && n.Total[name] > 0 {
				owner[name] = n.NodeName
			}
		}
		if owner[name] == "" {
			break
		}
	}
	numNodes := len(owner)
	if numNodes == 0 {
		fail("no node offers a node0 resource: start nodes with --resources node<i>=2")
	}
	refs := make([]worker.Ref[Result], 1000)
	for i := range refs {
		refs[i] = worker.Must(f.Options(worker.Resources(map[string]float64{fmt.Sprintf("node%d", i%numNodes): 1}))).Remote(ctx, i)
	}
	out, err := worker.GetAll(ctx, refs)
	if err != nil {
		fail("%v", err)
	}
	perNode := map[string]int{}
	for i, r := range out {
		want := owner[fmt.Sprintf("node%d", i%numNodes)]
		if r.I != i || r.Node != want {
			fail("task %d returned %d from %s, want %d from %s", i, r.I, r.Node, i, want)
		}
		perNode[r.Node]++
	}
	fmt.Printf("1000 tasks round-robin over %d nodes: %v\n", numNodes, perNode)

	// The same with SPREAD: no custom resources, the scheduler spreads.
	// It spreads by the driver's node's view of the others' free resources,
	// which lags by a heartbeat: wait until that view shows every CPU free
	// again after the work above (or work of earlier jobs).
	waitIdle(ctx)
	spread := worker.Must(g.Options(worker.Spread()))
	for i := range refs {
		refs[i] = spread.Remote(ctx, i)
	}
	if out, err = worker.GetAll(ctx, refs); err != nil {
		fail("%v", err)
	}
	spreadPerNode := map[string]int{}
	for i, r := range out {
		if r.I != i {
			fail("SPREAD task %d returned %d", i, r.I)
		}
		spreadPerNode[r.Node]++
	}
	alive := 0
	for _, n := range nodes {
		if n.Alive {
			alive++
		}
	}
	if alive > 1 && len(spreadPerNode) < 2 {
		fail("SPREAD ran all 1000 tasks on one node of %d: %v", alive, spreadPerNode)
	}
	fmt.Printf("1000 tasks with SPREAD over %d alive nodes: %v\n", alive, spreadPerNode)
	fmt.Println("check: results are [0, 1, ..., 999] both times, each node<i> task ran where node<i> lives, and SPREAD used more than one node when there is more than one")
}

// waitIdle polls the local node's view of the cluster (at most 10 s) until
// all of its CPUs are free.
func waitIdle(ctx context.Context) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		total, err1 := worker.ClusterResources(ctx)
		free, err2 := worker.AvailableResources(ctx)
		if err1 == nil && err2 == nil && free["CPU"] == total["CPU"] {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "roundrobin: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
