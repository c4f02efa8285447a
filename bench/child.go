package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/nodeup/nodeup/wire"
	"github.com/nodeup/nodeup/worker"
)

// envEcho names the Unix socket the echo peer of the round-trip baseline
// connects to; set only on that child process.
const envEcho = "NODEUP_BENCH_ECHO"

// RunIfChild serves the role this process was started for when it is a
// helper of a bench run, and then never returns:
//
//   - a worker process of a bench job (NODEUP_WORKER=1: a node re-executed
//     the driver's binary, which for `nodeup bench` is nodeup itself); it
//     serves the remote functions this package registers;
//   - the echo peer of the Unix-socket round-trip baseline.
//
// Otherwise it returns at once. A main that links this package calls it
// first, before parsing its command line (workers start with no arguments).
func RunIfChild() {
	if os.Getenv(wire.EnvWorkerMode) == "1" {
		err := worker.Init(context.Background()) // serves tasks until the node stops it
		fmt.Fprintf(os.Stderr, "nodeup worker: %v\n", err)
		os.Exit(1)
	}
	if path := os.Getenv(envEcho); path != "" {
		if err := echo(path); err != nil {
			fmt.Fprintf(os.Stderr, "nodeup bench echo peer: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// echo connects to the Unix socket at path and sends back every message of
// echoSize bytes until the other side closes.
func echo(path string) error {
	c, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, echoSize)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
}
