// Package clustertest starts in-process nodeup clusters for the tests of
// packages outside cluster (worker, check, bench, ...): one harness instead
// of one per package. cluster's own internal tests cannot import it (it
// imports cluster) and keep their own start loop, sharing the wait helper
// and logger of internal/testutil.
package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// formTimeout bounds how long Start waits for the nodes to see each other.
const formTimeout = 20 * time.Second

// Config is node i's configuration before Start's configure hook: named
// n<i> with its data dir under dir, on 127.0.0.1 with random RPC and gossip
// ports and no HTTP, a Raft server (3 voters), 2 CPUs and 1 GiB of memory,
// a heartbeat every 100 ms and a reconcile every 200 ms, the quiet test
// logger, version "test".
func Config(dir string, i int) cluster.Config {
	name := fmt.Sprintf("n%d", i)
	return cluster.Config{
		NodeName: name, DataDir: filepath.Join(dir, name), BindAddr: "127.0.0.1", HTTPPort: -1,
		Server: true, RaftVoters: 3, Version: "test", Logger: testutil.Logger(),
		Resources:         sched.ResourceSet{sched.CPU: sched.QuantityOf(2), sched.Memory: sched.QuantityOf(1 << 30)},
		HeartbeatInterval: 100 * time.Millisecond, ReconcileInterval: 200 * time.Millisecond,
	}
}

// Start starts n nodes in this process: node 0 is the head, the others join
// it. configure, if not nil, edits node i's Config (see Config) before it
// starts; Head and Join (and, unless it sets Insecure, the head's join
// token) are set after it. Start fails t if a node does not
// start or if node 0 does not see all n nodes alive within 20 s; the nodes
// are killed when the test ends.
func Start(t testing.TB, n int, configure func(i int, c *cluster.Config)) []*cluster.Node {
	t.Helper()
	dir := t.TempDir()
	logger := failureLog(t)
	var nodes []*cluster.Node
	for i := range n {
		cfg := Config(dir, i)
		cfg.Logger = logger
		if configure != nil {
			configure(i, &cfg)
		}
		cfg.Head = i == 0
		if i > 0 {
			cfg.Join = []string{nodes[0].RPCAddr()}
			if !cfg.Insecure && cfg.Token == "" {
				// A secure cluster, as nodeup start makes: the others
				// join with the head's first token.
				tok, err := cluster.ReadInitialToken(nodes[0].DataDir())
				if err != nil {
					t.Fatalf("start node %d: %v", i, err)
				}
				cfg.Token = tok
			}
		}
		nd, err := cluster.Start(context.Background(), cfg)
		if err != nil {
			t.Fatalf("start node %d (%s): %v", i, cfg.NodeName, err)
		}
		nodes = append(nodes, nd)
		t.Cleanup(nd.Kill)
	}
	// Node 0's cluster view, not only the node table: the view (with the
	// other nodes' resources, from their heartbeats) is what spillback
	// and placement decide from, so a test that places work on node 1
	// right after Start must find node 1 in it.
	pool := rpc.NewPool([]byte{wire.PreambleRPC}, wire.ProtocolVersion, time.Second)
	defer pool.Close()
	// Over the node's Unix socket, as a local client: a node enforcing
	// roles (Config.SetTokenAuthority) answers it.
	if sock := nodes[0].SocketAddr(); sock != "" {
		pool.SetRoute(nodes[0].RPCAddr(), sock)
	}
	testutil.Until(t, formTimeout, fmt.Sprintf("%d nodes alive in %s's view", n, nodes[0].Name()), func() error {
		a, err := aliveInView(pool, nodes[0])
		if err != nil {
			return err
		}
		if a != n {
			return fmt.Errorf("%s's view holds %d of %d nodes alive", nodes[0].Name(), a, n)
		}
		return nil
	})
	return nodes
}

// failureLog is the nodes' logger: their info lines kept in memory and
// printed (the last logTail of them) when the test fails, so a failure in CI
// comes with what the nodes did; with NODEUP_TEST_LOG set, the debug logger
// on stderr as before.
func failureLog(t testing.TB) *slog.Logger {
	if os.Getenv("NODEUP_TEST_LOG") != "" {
		return testutil.Logger()
	}
	buf := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
			t.Logf("--- the nodes' logs (last %d of %d lines) ---\n%s", min(logTail, len(lines)), len(lines),
				strings.Join(lines[max(0, len(lines)-logTail):], "\n"))
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// logTail is how many log lines a failed test prints.
const logTail = 300

// WaitVoters waits up to 60 s until nodes[0]'s Raft configuration holds
// want voters, failing t otherwise. Start does not wait for it: autopilot
// promotes a joined server only after it has been stable for a while, so
// right after Start a 3-node cluster may have 2 voters, and killing one of
// them leaves no quorum (nothing is declared dead, nothing committed). A
// test that kills a node and needs the rest to go on calls this first.
func WaitVoters(t testing.TB, nodes []*cluster.Node, want int) {
	t.Helper()
	pool := rpc.NewPool([]byte{wire.PreambleRPC}, wire.ProtocolVersion, time.Second)
	defer pool.Close()
	if sock := nodes[0].SocketAddr(); sock != "" {
		pool.SetRoute(nodes[0].RPCAddr(), sock)
	}
	testutil.Until(t, 60*time.Second, fmt.Sprintf("%d Raft voters", want), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var st wire.StatusResponse
		if err := pool.Call(ctx, nodes[0].RPCAddr(), wire.MethodStatus, &wire.Empty{}, &st); err != nil {
			return fmt.Errorf("status of %s: %w", nodes[0].Name(), err)
		}
		n := 0
		for _, s := range st.Servers {
			if s.Suffrage == "voter" {
				n++
			}
		}
		if n < want {
			return fmt.Errorf("%s's Raft configuration has %d voters", nodes[0].Name(), n)
		}
		return nil
	})
}

// aliveInView counts the nodes alive in nd's cluster view, asked through
// pool within 3 s.
func aliveInView(pool *rpc.Pool, nd *cluster.Node) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var v wire.ClusterView
	if err := pool.Call(ctx, nd.RPCAddr(), wire.MethodClusterView, &wire.Empty{}, &v); err != nil {
		return 0, fmt.Errorf("cluster view of %s: %w", nd.Name(), err)
	}
	c := 0
	for _, info := range v.Nodes {
		if info.Alive {
			c++
		}
	}
	return c, nil
}
