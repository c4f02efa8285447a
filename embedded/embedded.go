// Package embedded links a nodeup node into a program that uses the Go SDK,
// so that worker.Init can start a single-node cluster inside the program
// when it finds none to connect to, as ray.init() starts its daemons. Import
// it for its side effect:
//
//	import _ "github.com/nodeup/nodeup/embedded"
//
// It is opt-in because the node (Raft, memberlist, bbolt, Prometheus) is
// most of a binary's size: a driver without it is about 5 MB instead of
// about 19 MB, and that binary is hashed and copied to every node of every
// job. Without it, Init connects to a running node or fails with
// worker.ErrNoNode (docs/architecture.md, "The SDK stands alone").
package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/worker"
)

func init() { worker.RegisterEmbeddedStarter(Start) }

// Start runs a one-node cluster in this process on 127.0.0.1 and a fresh
// temporary data dir, with spec's resources (CPU defaults to every CPU,
// memory to 70% of RAM, in bytes) and GPUs, logging errors only to stderr.
// It returns the node's address (its Unix socket, "unix:///...", else its
// TCP RPC address) and a function that stops the node and
// removes the data dir. Errors name what failed (the temporary dir, the
// node's start).
func Start(ctx context.Context, spec worker.EmbeddedSpec) (string, func(), error) {
	dir, err := os.MkdirTemp("", "nodeup-embedded-")
	if err != nil {
		return "", nil, fmt.Errorf("data dir for the embedded node: %w", err)
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	n, err := cluster.Start(ctx, cluster.Config{Head: true, DataDir: dir, BindAddr: "127.0.0.1", HTTPPort: -1,
		NodeName: "embedded", Resources: resources(spec.Resources), RaftVoters: 1, Server: true, Logger: quiet,
		Version: "embedded", GPUs: cluster.GPUConfig{Declare: spec.DeclareGPUs, Count: spec.NumGPUs, Model: spec.GPUModel}})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() {
		_ = n.Shutdown()
		os.RemoveAll(dir)
	}
	if sock := n.SocketAddr(); sock != "" {
		return sock, stop, nil // the driver reaches its node over the socket
	}
	return n.RPCAddr(), stop, nil
}

// resources is given with CPU and memory filled in where missing.
func resources(given sched.ResourceSet) sched.ResourceSet {
	res := maps.Clone(given)
	if res == nil {
		res = sched.ResourceSet{}
	}
	if _, ok := res[sched.CPU]; !ok {
		res[sched.CPU] = sched.QuantityOf(int64(runtime.NumCPU()))
	}
	if _, ok := res[sched.Memory]; !ok {
		var si unix.Sysinfo_t
		if unix.Sysinfo(&si) == nil {
			res[sched.Memory] = sched.QuantityOf(int64(float64(si.Totalram) * float64(si.Unit) * 0.7))
		}
	}
	return res
}
