// Command longtasks is the program from issue 12 that a new user writes
// from the docs: eight 1-CPU tasks that each take 1.5 s, submitted at
// once, then twelve short SPREAD tasks. It prints how long the eight took
// and where they ran, and checks what Ray promises: they run as many at
// once as the cluster has CPUs (on 2 CPUs, two at a time: no task runs
// alone), and the SPREAD tasks put no node more than one task ahead of
// another.
//
//	go run ./examples/longtasks                          # embedded node with 2 CPUs
//	NODEUP_ADDRESS=host:7370 NODEUP_TOKEN=<submit token> bin/longtasks              # any cluster
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

// Span is where and when a task ran.
type Span struct {
	Node       string
	Start, End time.Time
}

var long = worker.Register1(func(ctx context.Context, d time.Duration) (Span, error) {
	s := Span{Node: worker.NodeName(), Start: time.Now()}
	time.Sleep(d)
	s.End = time.Now()
	return s, nil
})

var where = worker.Register0(func(ctx context.Context) (string, error) {
	time.Sleep(10 * time.Millisecond)
	return worker.NodeName(), nil
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx, worker.EmbeddedResources(map[string]float64{"CPU": 2})); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	d := 1500 * time.Millisecond
	if v := os.Getenv("LONGTASKS_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			fail("LONGTASKS_DURATION=%q: %v", v, err)
		}
	}
	start := time.Now()
	var refs []worker.Ref[Span]
	for range 8 {
		refs = append(refs, long.Remote(ctx, d))
	}
	spans, err := worker.GetAll(ctx, refs)
	if err != nil {
		fail("%v", err)
	}
	elapsed := time.Since(start)
	perNode := map[string]int{}
	for _, s := range spans {
		perNode[s.Node]++
	}
	alone := ranAlone(spans)
	fmt.Printf("eight %s tasks: %.2f s, %d of them ran alone, per node %s\n", d, elapsed.Seconds(), alone, format(perNode))
	if alone > 0 {
		fail("%d of the eight tasks ran while no other did: they queued behind each other", alone)
	}

	// SPREAD is round robin over idle nodes; a task placed on a node whose
	// CPUs the long tasks' workers still hold moves to one with room. Wait
	// until every CPU is back (leases return just after their tasks).
	idle := time.Now().Add(20 * time.Second)
	for {
		total, err1 := worker.ClusterResources(ctx)
		avail, err2 := worker.AvailableResources(ctx)
		if err1 == nil && err2 == nil && avail["CPU"] >= total["CPU"] {
			break
		}
		if time.Now().After(idle) {
			fail("the cluster's CPUs were not all free 20 s after the long tasks: %v of %v", avail["CPU"], total["CPU"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	var spread []worker.Ref[string]
	for range 12 {
		spread = append(spread, worker.Must(where.Options(worker.Spread())).Remote(ctx))
	}
	nodes, err := worker.GetAll(ctx, spread)
	if err != nil {
		fail("%v", err)
	}
	count := map[string]int{}
	for _, n := range nodes {
		count[n]++
	}
	fmt.Printf("twelve SPREAD tasks: %s\n", format(count))
	alive, err := worker.Nodes(ctx)
	if err != nil {
		fail("%v", err)
	}
	var counts []int
	for _, n := range alive {
		if n.Alive {
			counts = append(counts, count[n.NodeName])
		}
	}
	if slices.Max(counts)-slices.Min(counts) > 1 {
		fail("SPREAD put one node more than one task ahead of another: %s", format(count))
	}
	fmt.Println("check: ok")
}

// ranAlone counts the spans that overlap no other span.
func ranAlone(spans []Span) int {
	alone := 0
	for i, a := range spans {
		overlaps := false
		for j, b := range spans {
			overlaps = overlaps || i != j && b.Start.Before(a.End) && a.Start.Before(b.End)
		}
		if !overlaps {
			alone++
		}
	}
	return alone
}

func format(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "check failed: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
