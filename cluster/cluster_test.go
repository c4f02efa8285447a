package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

func testConfig(t testing.TB, dir, name string) Config {
	t.Helper()
	return Config{
		NodeName: name, DataDir: filepath.Join(dir, name), BindAddr: "127.0.0.1", Port: 0, GossipPort: 0, HTTPPort: 0,
		Server: true, RaftVoters: 3, Version: "test", Logger: testutil.Logger(),
		Resources:         sched.ResourceSet{sched.CPU: sched.QuantityOf(2), sched.Memory: sched.QuantityOf(1 << 30)},
		HeartbeatInterval: 200 * time.Millisecond, ReconcileInterval: 200 * time.Millisecond,
		ReconnectInterval: 200 * time.Millisecond,
	}
}

// testCluster starts n nodes on 127.0.0.1 (random ports): the first is the
// head, the others join through it. Nodes are shut down at test end.
func testCluster(t testing.TB, n int, mutate func(i int, c *Config)) []*Node {
	t.Helper()
	dir := t.TempDir()
	var nodes []*Node
	for i := 0; i < n; i++ {
		cfg := testConfig(t, dir, fmt.Sprintf("n%d", i))
		if i == 0 {
			cfg.Head = true
		} else {
			cfg.Join = []string{nodes[0].RPCAddr()}
		}
		if mutate != nil {
			mutate(i, &cfg)
		}
		if i > 0 && !cfg.Insecure && cfg.Token == "" {
			cfg.Token = headToken(t, nodes[0])
		}
		nd, err := Start(context.Background(), cfg)
		if err != nil {
			t.Fatalf("start node %d: %v", i, err)
		}
		nodes = append(nodes, nd)
		t.Cleanup(nd.Kill)
	}
	return nodes
}

// insecure is a testCluster mutate that starts every node --insecure.
func insecure(_ int, c *Config) { c.Insecure = true }

// headToken is the first join token of the head nd.
func headToken(t testing.TB, nd *Node) string {
	t.Helper()
	tok, err := ReadInitialToken(nd.DataDir())
	if err != nil {
		t.Fatalf("head %s: %v", nd.Name(), err)
	}
	return tok
}

// statusVia asks node nd for the cluster status (forwarded to the leader).
func statusVia(nd *Node) (*wire.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var st wire.StatusResponse
	err := nd.forward(ctx, wire.MethodStatus, &wire.Empty{}, &st)
	return &st, err
}

func aliveCount(st *wire.StatusResponse) int {
	c := 0
	for _, nv := range st.Nodes {
		if nv.Status == store.NodeAlive {
			c++
		}
	}
	return c
}

func voterCount(st *wire.StatusResponse) int {
	c := 0
	for _, s := range st.Servers {
		if s.Suffrage == "voter" {
			c++
		}
	}
	return c
}

// waitFormed waits until every node sees n alive nodes, the same leader and
// the expected number of voters.
func waitFormed(t testing.TB, nodes []*Node, alive, voters int) {
	t.Helper()
	testutil.Until(t, 30*time.Second, "cluster formation", func() error {
		leader := ""
		for _, nd := range nodes {
			st, err := statusVia(nd)
			if err != nil {
				return fmt.Errorf("status via %s: %w", nd.Name(), err)
			}
			if a := aliveCount(st); a != alive {
				return fmt.Errorf("%s sees %d alive nodes, want %d", nd.Name(), a, alive)
			}
			if v := voterCount(st); v != voters {
				return fmt.Errorf("%s sees %d voters, want %d", nd.Name(), v, voters)
			}
			if leader != "" && st.LeaderID != leader {
				return fmt.Errorf("leaders disagree: %s vs %s", leader, st.LeaderID)
			}
			leader = st.LeaderID
		}
		return nil
	})
}

func TestClusterForms(t *testing.T) {
	for _, tc := range []struct{ nodes, voters int }{{1, 1}, {3, 3}, {5, 3}} {
		t.Run(fmt.Sprintf("%d_nodes", tc.nodes), func(t *testing.T) {
			nodes := testCluster(t, tc.nodes, nil)
			waitFormed(t, nodes, tc.nodes, tc.voters)
			st, err := statusVia(nodes[len(nodes)-1])
			if err != nil {
				t.Fatal(err)
			}
			// Every node's FSM holds the same node table.
			for _, nd := range nodes {
				if !nd.cfg.Server {
					continue
				}
				testutil.Until(t, 10*time.Second, "node table replicated to "+nd.Name(), func() error {
					if nd.raft == nil {
						return nil
					}
					inRaft := false
					for _, s := range st.Servers {
						inRaft = inRaft || s.ID == nd.ID()
					}
					if !inRaft {
						return nil // plain members hold no Raft state
					}
					got, err := nd.State().Nodes()
					if err != nil {
						return err
					}
					if len(got) != tc.nodes {
						return fmt.Errorf("%d nodes in local table", len(got))
					}
					return nil
				})
			}
			want := sched.QuantityOf(int64(2 * tc.nodes))
			if st.Total[sched.CPU] != want {
				t.Fatalf("total CPU %v, want %v", st.Total[sched.CPU], want)
			}
			for _, nv := range st.Nodes {
				if nv.Resources[sched.NodeResource(nv.ID)] != sched.Unit {
					t.Fatalf("node %s lacks its node:<id> resource: %v", nv.Name, nv.Resources)
				}
			}
		})
	}
}

func leaderOf(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	var l *Node
	testutil.Until(t, 15*time.Second, "a leader", func() error {
		for _, nd := range nodes {
			if nd.IsLeader() {
				l = nd
				return nil
			}
		}
		return fmt.Errorf("no leader among %d nodes", len(nodes))
	})
	return l
}

func TestLeaderFailoverAndRestart(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	leader := leaderOf(t, nodes)
	var rest []*Node
	for _, nd := range nodes {
		if nd != leader {
			rest = append(rest, nd)
		}
	}
	killed := time.Now()
	leader.Kill()
	var newLeader *Node
	testutil.Until(t, 10*time.Second, "new leader after kill", func() error {
		for _, nd := range rest {
			if nd.IsLeader() {
				newLeader = nd
				return nil
			}
		}
		return fmt.Errorf("no leader yet")
	})
	t.Logf("new leader %s after %s", newLeader.Name(), time.Since(killed).Round(time.Millisecond))
	testutil.Until(t, 20*time.Second, "killed leader marked dead, table intact", func() error {
		st, err := statusVia(rest[0])
		if err != nil {
			return err
		}
		if len(st.Nodes) != 3 {
			return fmt.Errorf("%d nodes in table, want 3", len(st.Nodes))
		}
		for _, nv := range st.Nodes {
			want := store.NodeAlive
			if nv.ID == leader.ID() {
				want = store.NodeDead
			}
			if nv.Status != want {
				return fmt.Errorf("node %s is %s, want %s", nv.Name, nv.Status, want)
			}
		}
		return nil
	})

	// Restart on the same data dir: same ID, next incarnation, alive again.
	cfg := leader.cfg
	cfg.Head, cfg.Join = false, []string{newLeader.RPCAddr()}
	cfg.Port, cfg.GossipPort = 0, 0
	again, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(again.Kill)
	if again.ID() != leader.ID() || again.Incarnation() != leader.Incarnation()+1 {
		t.Fatalf("restarted as %s inc %d, want %s inc %d", again.ID(), again.Incarnation(), leader.ID(), leader.Incarnation()+1)
	}
	waitRestartedAlive(t, again)
}

func TestGracefulLeaveMarksLeft(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	leader := leaderOf(t, nodes)
	var leaving *Node
	for _, nd := range nodes {
		if nd != leader {
			leaving = nd
			break
		}
	}
	if err := leaving.Shutdown(); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 5*time.Second, "left status", func() error {
		st, err := statusVia(leader)
		if err != nil {
			return err
		}
		for _, nv := range st.Nodes {
			if nv.ID == leaving.ID() && nv.Status != store.NodeLeft {
				return fmt.Errorf("leaving node is %s", nv.Status)
			}
		}
		return nil
	})
}

func TestLeaderShutdownHandsOver(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	leader := leaderOf(t, nodes)
	if err := leader.Shutdown(); err != nil {
		t.Fatal(err)
	}
	var rest []*Node
	for _, nd := range nodes {
		if nd != leader {
			rest = append(rest, nd)
		}
	}
	leaderOf(t, rest)
	testutil.Until(t, 10*time.Second, "old leader left", func() error {
		st, err := statusVia(rest[0])
		if err != nil {
			return err
		}
		for _, nv := range st.Nodes {
			if nv.ID == leader.ID() && nv.Status != store.NodeLeft {
				return fmt.Errorf("old leader is %s", nv.Status)
			}
		}
		return nil
	})
}

func TestNonServerWorksThroughLeader(t *testing.T) {
	nodes := testCluster(t, 2, func(i int, c *Config) { c.Server = i == 0 })
	waitFormed(t, nodes, 2, 1)
	client := nodes[1]
	if client.raft != nil {
		t.Fatal("a --server=false node started Raft")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var set wire.KVResponse
	if err := client.forward(ctx, wire.MethodKVSet, &wire.KVRequest{Key: "a/b", Value: []byte("v1")}, &set); err != nil || !set.OK {
		t.Fatalf("kv set through non-server: %v %+v", err, set)
	}
	// CAS with a stale index fails and keeps the value.
	var cas wire.KVResponse
	if err := client.forward(ctx, wire.MethodKVSet, &wire.KVRequest{Key: "a/b", Value: []byte("v2"), CAS: true, Index: set.Index + 100}, &cas); err != nil || cas.OK {
		t.Fatalf("stale CAS: %v %+v", err, cas)
	}
	var got wire.KVResponse
	if err := client.forward(ctx, wire.MethodKVGet, &wire.KVRequest{Key: "a/b"}, &got); err != nil || string(got.Entries[0].Value) != "v1" {
		t.Fatalf("kv get: %v %+v", err, got)
	}
}

func TestDataDirOfAnotherCluster(t *testing.T) {
	a := testCluster(t, 1, nil)
	b := testCluster(t, 1, nil)
	waitFormed(t, a, 1, 1)
	dir := a[0].cfg.DataDir
	before, err := os.ReadFile(filepath.Join(dir, identityFile))
	if err != nil {
		t.Fatal(err)
	}
	a[0].Kill()
	cfg := a[0].cfg
	cfg.Head, cfg.Join, cfg.Port, cfg.GossipPort = false, []string{b[0].RPCAddr()}, 0, 0
	_, err = Start(context.Background(), cfg)
	if err == nil {
		t.Fatal("joining another cluster with this data dir succeeded")
	}
	// The peer's certificate is of another CA: the TLS handshake already
	// refuses it (before the cluster IDs are compared).
	if want := "belongs to another cluster"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	after, _ := os.ReadFile(filepath.Join(dir, identityFile))
	if string(before) != string(after) {
		t.Fatalf("identity changed by a refused start:\n%s\n%s", before, after)
	}
}

func TestPortInUseAndUnreachablePeer(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	cfg := testConfig(t, t.TempDir(), "x")
	cfg.Head = true
	_, port := splitHostPortInt(nodes[0].RPCAddr())
	cfg.Port = port
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port %d", port)) {
		t.Fatalf("port in use: got %v", err)
	}
	cfg = testConfig(t, t.TempDir(), "y")
	cfg.Join, cfg.Token = []string{"127.0.0.1:1"}, headToken(t, nodes[0])
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "cannot reach any peer") {
		t.Fatalf("unreachable peer: got %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, identityFile)); err == nil {
		t.Fatal("a refused start wrote an identity")
	}
}

func TestSecondDaemonOnDataDir(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	cfg := nodes[0].cfg
	cfg.Port, cfg.GossipPort = 0, 0
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "in use by another nodeup process") {
		t.Fatalf("second daemon on one data dir: got %v", err)
	}
}

func TestDeadVoterReplacedByPlainMember(t *testing.T) {
	nodes := testCluster(t, 4, nil)
	waitFormed(t, nodes, 4, 3)
	leader := leaderOf(t, nodes)
	st, err := statusVia(leader)
	if err != nil {
		t.Fatal(err)
	}
	var victim, spare *Node
	for _, nd := range nodes {
		suffrage := ""
		for _, s := range st.Servers {
			if s.ID == nd.ID() {
				suffrage = s.Suffrage
			}
		}
		switch {
		case suffrage == "voter" && nd != leader && victim == nil:
			victim = nd
		case suffrage == "":
			spare = nd
		}
	}
	if victim == nil || spare == nil {
		t.Fatalf("want a follower voter and a plain member, got %+v", st.Servers)
	}
	victim.Kill()
	testutil.Until(t, 40*time.Second, "dead voter replaced", func() error {
		st, err := statusVia(leader)
		if err != nil {
			return err
		}
		voters := map[string]bool{}
		for _, s := range st.Servers {
			if s.Suffrage == "voter" {
				voters[s.ID] = true
			}
		}
		if voters[victim.ID()] || !voters[spare.ID()] || len(voters) != 3 {
			return fmt.Errorf("voters %v (victim %s, spare %s)", voters, short(victim.ID()), short(spare.ID()))
		}
		return nil
	})
}

// waitRestartedAlive polls until the cluster's status shows node again
// alive, in its current incarnation, at its current RPC address.
func waitRestartedAlive(t *testing.T, again *Node) {
	t.Helper()
	testutil.Until(t, 20*time.Second, "restarted node alive with new incarnation", func() error {
		st, err := statusVia(again)
		if err != nil {
			return err
		}
		for _, nv := range st.Nodes {
			if nv.ID == again.ID() {
				if nv.Status != store.NodeAlive || nv.Incarnation != again.Incarnation() || nv.Address != again.RPCAddr() {
					return fmt.Errorf("restarted node is %s inc %d at %s", nv.Status, nv.Incarnation, nv.Address)
				}
				return nil
			}
		}
		return fmt.Errorf("restarted node missing")
	})
}
