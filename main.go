// Command nodeup is Ray's programming model as one static binary: run it on
// every machine to form a cluster (nodeup start --head, nodeup join <peer>).
package main

import (
	"os"

	"github.com/nodeup/nodeup/bench"
	"github.com/nodeup/nodeup/cli"
)

func main() {
	bench.RunIfChild() // a worker of a `nodeup bench` job, or its echo peer: never returns
	os.Exit(cli.Run(os.Args))
}
