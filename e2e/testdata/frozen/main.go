// Command frozen is the driver of e2e's frozen-node tests: it runs one task
// (mode "task") or one actor call (mode "actor") on node n1 (soft node
// affinity) whose first attempt writes its worker's PID to the marker file
// given as the argument and then hangs, so the test can freeze n1; it
// prints where the task or call finally ran.
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

// hangFirst writes the process's PID to marker and hangs, the first time;
// later it returns the node it runs on.
func hangFirst(marker string) string {
	if _, err := os.Stat(marker); err != nil {
		_ = os.WriteFile(marker, []byte(strconv.Itoa(os.Getpid())), 0o644)
		select {} // the test freezes this process
	}
	return worker.NodeName()
}

var frozenOnce = worker.Register1(func(ctx context.Context, marker string) (string, error) {
	return hangFirst(marker), nil
})

// Hanger is an actor whose first call hangs.
type Hanger struct{}

func newHanger(ctx context.Context) (*Hanger, error) { return &Hanger{}, nil }

func (h *Hanger) call(ctx context.Context, marker string) (string, error) {
	return hangFirst(marker), nil
}

var (
	hanger     = worker.RegisterActor0(newHanger)
	hangerCall = worker.RegisterMethod1((*Hanger).call)
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// First: in a worker process, Init serves tasks and never returns.
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	if len(os.Args) != 3 || (os.Args[1] != "task" && os.Args[1] != "actor") {
		log.Fatal("usage: frozen task|actor MARKER")
	}
	mode, marker := os.Args[1], os.Args[2]
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
	var got string
	if mode == "task" {
		got, err = frozenOnce.Options(worker.NodeAffinity(target, true)).Remote(ctx, marker).Get(ctx)
	} else {
		got, err = callActor(ctx, target, marker)
	}
	if err != nil {
		fmt.Println("error:", err)
		worker.Shutdown()
		os.Exit(1)
	}
	fmt.Println("ran on", got)
}

// callActor creates a Hanger on node (one restart, one call retry, as a
// program that rides out a node's loss sets them) and calls it once.
func callActor(ctx context.Context, node, marker string) (string, error) {
	h, err := hanger.Options(worker.NodeAffinity(node, true), worker.MaxRestarts(1), worker.MaxTaskRetries(1)).Remote(ctx)
	if err != nil {
		return "", err
	}
	return hangerCall.Remote(ctx, h, marker).Get(ctx)
}
