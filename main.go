// Command nodeup is Ray's programming model as one static binary: run it on
// every machine to form a cluster (nodeup start --head, nodeup join <peer>).
package main

import (
	"os"

	"github.com/nodeup/nodeup/cli"
)

func main() { os.Exit(cli.Run(os.Args)) }
