package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/worker"
)

// Env is what metrics run against: the node the driver connects to (an
// embedded one this run started, or the cluster at Options.Address), an
// optional second node, and the run's settings.
type Env struct {
	opts     Options
	quiet    *slog.Logger // for in-process nodes: errors only
	dir      string       // temporary data dirs of nodes this run started
	addr     string       // RPC address the driver connects to
	head     *cluster.Node
	second   *cluster.Node // started by this run for two-node metrics
	store    *cluster.Node // a StoreBytes metric's own node
	noSpill  bool          // StoreNode turns spilling off (tests of a full store)
	storeCap int64         // its object store capacity in bytes
	cleanups []func()
}

func newEnv(ctx context.Context, opts Options) (*Env, error) {
	e := &Env{opts: opts,
		quiet: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	dir, err := os.MkdirTemp("", "nodeup-bench-")
	if err != nil {
		return nil, err
	}
	e.dir = dir
	if opts.Address != "" {
		e.addr = opts.Address
		return e, nil
	}
	// "custom": 100 is what Ray's microbenchmark cluster offers for its
	// placement-group metric.
	res := sched.ResourceSet{sched.CPU: sched.QuantityOf(int64(runtime.NumCPU())), "custom": sched.QuantityOf(100)}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		res[sched.Memory] = sched.QuantityOf(int64(float64(si.Totalram) * float64(si.Unit) * 0.7))
	}
	n, err := cluster.Start(ctx, cluster.Config{Head: true, DataDir: filepath.Join(dir, "head"), BindAddr: "127.0.0.1",
		HTTPPort: -1, NodeName: "bench-head", Resources: res, RaftVoters: 1, Server: true, Logger: e.quiet, Version: opts.Version})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the embedded node: %w", err)
	}
	// The driver reaches the node over its Unix socket, as a driver on a
	// node's machine does (worker.Init prefers the current node's socket).
	e.head, e.addr = n, n.RPCAddr()
	if sock := n.SocketAddr(); sock != "" {
		e.addr = sock
	}
	return e, nil
}

// close stops the nodes this run started and removes their data.
func (e *Env) close() {
	e.stopSecond()
	if e.head != nil {
		_ = e.head.Shutdown()
	}
	os.RemoveAll(e.dir)
}

// Scale returns n scaled by Options.Scale, at least 1: the size of a
// scalability metric's run.
func (e *Env) Scale(n int) int { return max(1, int(float64(n)*e.opts.Scale)) }

// cleanup registers f to run after the current metric.
func (e *Env) cleanup(f func()) { e.cleanups = append(e.cleanups, f) }

func (e *Env) runCleanups() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
}

// job runs f as one nodeup job: Init against the node at addr, f, Shutdown
// (which stops the job's workers and frees its objects).
func (e *Env) job(ctx context.Context, addr string, f func(ctx context.Context) error) error {
	if err := worker.Init(ctx, worker.Address(addr), worker.Logger(e.opts.Logger)); err != nil {
		return err
	}
	defer worker.Shutdown()
	return f(ctx)
}

// SecondNode returns the ID of a node other than the driver's, inside a job.
// With an embedded cluster it starts one in this process (once per metric,
// joined to the embedded head on 127.0.0.1); with Options.Address it picks
// another alive node of that cluster, and skips the metric if there is none.
func (e *Env) SecondNode(ctx context.Context) (string, error) {
	if e.head == nil {
		nodes, err := worker.Nodes(ctx)
		if err != nil {
			return "", err
		}
		for _, n := range nodes {
			if n.Alive && n.NodeID != worker.NodeID() {
				return n.NodeID, nil
			}
		}
		return "", skip("the cluster at %s has one alive node; this metric needs two (run without --address to use two local nodes)", e.addr)
	}
	if e.second == nil {
		// It joins as any node does: with the head's first join token,
		// and from then on over mutual TLS.
		tok, err := cluster.ReadInitialToken(e.head.DataDir())
		if err != nil {
			return "", fmt.Errorf("start a second node: %w", err)
		}
		n, err := cluster.Start(ctx, cluster.Config{Join: []string{e.head.RPCAddr()}, DataDir: filepath.Join(e.dir, "second"), Token: tok,
			BindAddr: "127.0.0.1", HTTPPort: -1, NodeName: "bench-second", Server: false, Logger: e.quiet, Version: e.opts.Version,
			Resources:         sched.ResourceSet{sched.CPU: sched.QuantityOf(1), sched.Memory: sched.QuantityOf(2 << 30)},
			ObjectStoreMemory: 1 << 30})
		if err != nil {
			return "", fmt.Errorf("start a second node: %w", err)
		}
		e.second = n
		e.cleanup(e.stopSecond)
	}
	// The driver's node must see the second node alive before a task can be
	// placed there (its view comes with the leader's heartbeat replies).
	id := e.second.ID()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		nodes, err := worker.Nodes(ctx)
		if err != nil {
			return "", err
		}
		for _, n := range nodes {
			if n.NodeID == id && n.Alive {
				return id, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("second node never showed up alive: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// StoreNode starts a single-node cluster of its own in this process with an
// object store of capacity bytes, for the current metric (stopped after
// it), and returns its address for a driver: its Unix socket (a secure
// node refuses plaintext TCP), else its RPC address. Its CPUs are this machine's. With
// Options.Address it skips the metric: a remote cluster's store size is not
// the bench's to choose.
func (e *Env) StoreNode(ctx context.Context, capacity int64) (string, error) {
	if e.head == nil {
		return "", skip("it needs a node with a %d-byte object store of its own; run without --address", capacity)
	}
	res := sched.ResourceSet{sched.CPU: sched.QuantityOf(int64(runtime.NumCPU())), sched.Memory: sched.QuantityOf(2 << 30)}
	n, err := cluster.Start(ctx, cluster.Config{Head: true, DataDir: filepath.Join(e.dir, "store"), BindAddr: "127.0.0.1",
		HTTPPort: -1, NodeName: "bench-store", Resources: res, RaftVoters: 1, Server: true, Logger: e.quiet,
		Version: e.opts.Version, ObjectStoreMemory: capacity, NoObjectSpilling: e.noSpill})
	if err != nil {
		return "", fmt.Errorf("start a node with a %d-byte object store: %w", capacity, err)
	}
	e.store, e.storeCap = n, capacity
	e.cleanup(func() {
		_ = n.Shutdown()
		os.RemoveAll(n.DataDir())
		e.store = nil
	})
	if sock := n.SocketAddr(); sock != "" {
		return sock, nil
	}
	return n.RPCAddr(), nil
}

func (e *Env) stopSecond() {
	if e.second != nil {
		_ = e.second.Shutdown()
		os.RemoveAll(e.second.DataDir())
		e.second = nil
	}
}
