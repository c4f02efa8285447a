// Command customresources is seed 000 in Go: a task that needs one "TPU-v3",
// then a stream of 1- and 2-unit TPU requests that a node with TPU-v3 units
// serves until its count drops to zero, never beyond. It checks both.
//
//	go run ./examples/customresources                     # embedded node with TPU-v3=4
//	NODEUP_ADDRESS=host:7370 NODEUP_TOKEN=<submit token> bin/customresources         # a cluster with TPU-v3 somewhere
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"time"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

var trainOnTPU = worker.Register0(func(ctx context.Context) (string, error) {
	return "Training complete", nil
})

// Span is when a task held its TPU units, on which node.
type Span struct {
	Node       string
	Units      int
	Start, End int64 // unix nanoseconds
}

var holdTPU = worker.Register1(func(ctx context.Context, units int) (Span, error) {
	s := Span{Node: worker.NodeName(), Units: units, Start: time.Now().UnixNano()}
	time.Sleep(100 * time.Millisecond)
	s.End = time.Now().UnixNano()
	return s, nil
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx, worker.EmbeddedResources(map[string]float64{"CPU": 4, "TPU-v3": 4})); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	msg, err := worker.Must(trainOnTPU.Options(worker.Resources(map[string]float64{"TPU-v3": 1}))).Remote(ctx).Get(ctx)
	if err != nil || msg != "Training complete" {
		fail("train_on_tpu: %q, %v", msg, err)
	}
	fmt.Println("train_on_tpu:", msg)

	nodes, err := worker.Nodes(ctx)
	if err != nil {
		fail("%v", err)
	}
	capacity := map[string]int{}
	for _, n := range nodes {
		if q := n.Total["TPU-v3"]; n.Alive && q > 0 {
			capacity[n.NodeName] = int(q)
		}
	}
	var refs []worker.Ref[Span]
	for i := 0; i < 12; i++ {
		units := 1 + i%2
		refs = append(refs, worker.Must(holdTPU.Options(worker.CPUs(0), worker.Resources(map[string]float64{"TPU-v3": float64(units)}))).Remote(ctx, units))
	}
	spans, err := worker.GetAll(ctx, refs)
	if err != nil {
		fail("%v", err)
	}
	for node, peak := range peakUnits(spans) {
		fmt.Printf("node %s: %d TPU-v3 units, at most %d in use at once\n", node, capacity[node], peak)
		if peak > capacity[node] {
			fail("node %s had %d TPU-v3 units in use, more than its %d", node, peak, capacity[node])
		}
	}
	fmt.Println("check: no node ever used more TPU-v3 units than it has")
}

// peakUnits is the most units in use at one instant, per node.
func peakUnits(spans []Span) map[string]int {
	type ev struct {
		at    int64
		delta int
	}
	byNode := map[string][]ev{}
	for _, s := range spans {
		byNode[s.Node] = append(byNode[s.Node], ev{s.Start, s.Units}, ev{s.End, -s.Units})
	}
	out := map[string]int{}
	for node, evs := range byNode {
		sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at || evs[i].at == evs[j].at && evs[i].delta < 0 })
		cur := 0
		for _, e := range evs {
			cur += e.delta
			out[node] = max(out[node], cur)
		}
	}
	return out
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "customresources: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
