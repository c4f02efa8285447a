// Command wdjob is the driver of e2e's working dir test: run by `nodeup job
// submit --working-dir`, it runs one task pinned (node affinity) to each
// live node; each reads data/in.txt by relative path from its worker
// process's current dir and returns it with its node's name. It prints
// "<node>: <content>" per node and exits 1 if any task failed.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"

	"github.com/nodeup/nodeup/worker"
)

var readData = worker.Register0(func(ctx context.Context) (string, error) {
	b, err := os.ReadFile(filepath.Join("data", "in.txt"))
	if err != nil {
		return "", err
	}
	return os.Getenv("NODEUP_NODE_NAME") + ": " + string(b), nil
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	nodes, err := worker.Nodes(ctx)
	if err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, n := range nodes {
		if !n.Alive {
			continue
		}
		s, err := worker.Must(readData.Options(worker.NodeAffinity(n.NodeID, false))).Remote(ctx).Get(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "task on %s: %v\n", n.NodeName, err)
			worker.Shutdown()
			os.Exit(1)
		}
		lines = append(lines, s)
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}
