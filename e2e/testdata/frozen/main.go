// Command frozen is the driver of e2e's TestFrozenNodeTasksRetried: it runs
// one task on node n1 (soft node affinity) whose first attempt writes its
// worker's PID to the marker file given as the argument and then hangs, so
// the test can freeze n1; it prints where the task finally ran.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/nodeup/nodeup/worker"
)

var frozenOnce = worker.Register1(func(ctx context.Context, marker string) (string, error) {
	if _, err := os.Stat(marker); err != nil {
		_ = os.WriteFile(marker, []byte(strconv.Itoa(os.Getpid())), 0o644)
		select {} // the test freezes this process
	}
	return worker.NodeName(), nil
})

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// First: in a worker process, Init serves tasks and never returns.
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	if len(os.Args) != 2 {
		log.Fatal("usage: frozen MARKER")
	}
	nodes, err := worker.Nodes(ctx)
	if err != nil {
		log.Fatal(err)
	}
	target := ""
	for _, n := range nodes {
		if n.NodeName == "n1" {
			target = n.NodeID
		}
	}
	if target == "" {
		log.Fatalf("no node n1 in %v", nodes)
	}
	got, err := worker.Must(frozenOnce.Options(worker.NodeAffinity(target, true))).Remote(ctx, os.Args[1]).Get(ctx)
	if err != nil {
		fmt.Println("error:", err)
		worker.Shutdown()
		os.Exit(1)
	}
	fmt.Println("ran on", got)
}
