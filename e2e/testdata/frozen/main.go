// Command frozen is the driver of e2e's frozen-node tests: it runs one task
// (mode "task") or one actor call (mode "actor") on node n1 (soft node
// affinity) whose first attempt writes its worker's PID to the marker file
// given as the argument and then hangs, so the test can freeze n1; it
// prints where the task or call finally ran. In mode "lease" it writes PID 0
// to the marker, waits until the file <marker>.go exists (the test has
// frozen n1) and then submits a task with soft affinity to n1, so that its
// lease request goes to the frozen node.
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
		writeMarker(marker, strconv.Itoa(os.Getpid()))
		select {} // the test freezes this process
	}
	return worker.NodeName()
}

var where = worker.Register0(func(ctx context.Context) (string, error) { return worker.NodeName(), nil })

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
	if len(os.Args) != 3 || (os.Args[1] != "task" && os.Args[1] != "actor" && os.Args[1] != "lease") {
		log.Fatal("usage: frozen task|actor|lease MARKER")
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
	switch mode {
	case "task":
		got, err = worker.Must(frozenOnce.Options(worker.NodeAffinity(target, true))).Remote(ctx, marker).Get(ctx)
	case "actor":
		got, err = callActor(ctx, target, marker)
	default:
		awaitFreeze(marker)
		got, err = worker.Must(where.Options(worker.NodeAffinity(target, true))).Remote(ctx).Get(ctx)
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
	h, err := worker.Must(hanger.Options(worker.NodeAffinity(node, true), worker.MaxRestarts(1), worker.MaxTaskRetries(1))).Remote(ctx)
	if err != nil {
		return "", err
	}
	return hangerCall.Remote(ctx, h, marker).Get(ctx)
}

// awaitFreeze writes PID 0 to marker (nothing of ours to freeze) and waits
// until the test says it froze n1 by creating marker.go.
func awaitFreeze(marker string) {
	writeMarker(marker, "0")
	for {
		if _, err := os.Stat(marker + ".go"); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond) // the test's go-ahead is a file
	}
}

// writeMarker puts pid into marker whole (written aside, then renamed), so
// the test never reads part of it.
func writeMarker(marker, pid string) {
	if err := os.WriteFile(marker+".tmp", []byte(pid), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(marker+".tmp", marker); err != nil {
		log.Fatal(err)
	}
}
