// Command nested is seed 002's nested remote functions in Go: a task that
// submits tasks and waits for them, in a tree deeper than the cluster has
// CPUs. A task blocked in Get lends its CPU back, so the tree completes
// instead of deadlocking (seed 002, "Circular Dependencies").
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

// sumTree returns the number of nodes of a binary tree of the given depth,
// computing each subtree in its own task.
var sumTree worker.Func1[int, int]

func init() {
	sumTree = worker.Register1(func(ctx context.Context, depth int) (int, error) {
		if depth == 0 {
			return 1, nil
		}
		left := sumTree.Remote(ctx, depth-1)
		right := sumTree.Remote(ctx, depth-1)
		l, err := left.Get(ctx)
		if err != nil {
			return 0, err
		}
		r, err := right.Get(ctx)
		return 1 + l + r, err
	})
}

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	total, err := worker.ClusterResources(ctx)
	if err != nil {
		fail("%v", err)
	}
	const depth = 6 // 127 tasks, up to 64 waiting at once
	got, err := sumTree.Remote(ctx, depth).Get(ctx)
	if err != nil {
		fail("%v", err)
	}
	want := 1<<(depth+1) - 1
	fmt.Printf("tree of depth %d: %d tasks on a cluster of %v CPUs\n", depth, got, total["CPU"])
	if got != want {
		fail("counted %d tasks, want %d", got, want)
	}
	fmt.Println("check: nested tasks deeper than the CPU count completed")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nested: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
