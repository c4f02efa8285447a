package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

func forwardT(t *testing.T, nd *Node, method string, req, resp any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return nd.forward(ctx, method, req, resp)
}

func raftPeersVia(t *testing.T, nd *Node) []wire.RaftServer {
	t.Helper()
	var resp wire.RaftPeersResponse
	if err := forwardT(t, nd, wire.MethodRaftPeers, &wire.Empty{}, &resp); err != nil {
		t.Fatalf("list peers via %s: %v", nd.Name(), err)
	}
	return resp.Servers
}

// TestOperatorRaftListAndRemovePeer: list-peers through a follower names
// every server with its node name, one leader and three voters; a read
// token may list but not remove; remove-peer by address takes a follower
// out (and reconcile does not put it straight back); the last voter of a
// one-server cluster is refused with ErrLastVoter.
func TestOperatorRaftListAndRemovePeer(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	leader := leaderOf(t, nodes)
	var follower *Node
	for _, nd := range nodes {
		if nd != leader {
			follower = nd
		}
	}
	peers := raftPeersVia(t, follower)
	leaders := 0
	for _, p := range peers {
		if p.Suffrage != "voter" || p.Name == "" || p.Address == "" {
			t.Errorf("peer %+v: want a named voter with an address", p)
		}
		if p.Leader {
			leaders++
			if p.ID != leader.ID() {
				t.Errorf("leader listed as %s, is %s", p.ID, leader.ID())
			}
		}
	}
	if len(peers) != 3 || leaders != 1 {
		t.Fatalf("peers %+v: want 3 with one leader", peers)
	}

	read := createToken(t, leader, "read", time.Hour)
	cl := dialTLS(t, follower, read.Token)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var listed wire.RaftPeersResponse
	if err := cl.Call(ctx, wire.MethodRaftPeers, &wire.Empty{}, &listed); err != nil || len(listed.Servers) != 3 {
		t.Fatalf("list with a read token: %v %+v", err, listed)
	}
	wantDenied(t, cl.Call(ctx, wire.MethodRaftRemovePeer, &wire.RaftRemovePeerRequest{Peer: follower.ID()}, &wire.RaftServer{}), "admin")

	var none wire.RaftServer
	err := forwardT(t, leader, wire.MethodRaftRemovePeer, &wire.RaftRemovePeerRequest{Peer: "127.0.0.1:1"}, &none)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeNotFound || !strings.Contains(re.Message, "127.0.0.1:1") {
		t.Fatalf("remove an unknown peer: %v, want not_found naming it", err)
	}
	var removed wire.RaftServer
	if err := forwardT(t, leader, wire.MethodRaftRemovePeer, &wire.RaftRemovePeerRequest{Peer: follower.RPCAddr()}, &removed); err != nil {
		t.Fatal(err)
	}
	if removed.ID != follower.ID() {
		t.Fatalf("removed %+v, want %s", removed, follower.ID())
	}
	// Two reconciles later (ReconcileInterval is short in tests) it is
	// still out although it is alive.
	before := leader.raft.Stats()["last_log_index"]
	testutil.Until(t, 10*time.Second, "the log moves on", func() error {
		if err := forwardT(t, leader, wire.MethodKVSet, &wire.KVRequest{Key: "tick", Value: []byte("x")}, &wire.KVResponse{}); err != nil {
			return err
		}
		if leader.raft.Stats()["last_log_index"] == before {
			return fmt.Errorf("index still %s", before)
		}
		return nil
	})
	leader.reconcile()
	for _, p := range raftPeersVia(t, leader) {
		if p.ID == follower.ID() {
			t.Fatalf("removed peer is back: %+v", p)
		}
	}

	solo := testCluster(t, 1, nil)[0]
	waitFormed(t, []*Node{solo}, 1, 1)
	err = forwardT(t, solo, wire.MethodRaftRemovePeer, &wire.RaftRemovePeerRequest{Peer: solo.ID()}, &none)
	if !errors.As(err, &re) || re.Code != wire.CodeBadInput || !strings.Contains(re.Message, ErrLastVoter.Error()) || !strings.Contains(re.Message, solo.ID()) {
		t.Fatalf("remove the last voter: %v, want ErrLastVoter", err)
	}
	if got := raftPeersVia(t, solo); len(got) != 1 {
		t.Fatalf("after the refusal: %+v", got)
	}
}

func kvValue(t *testing.T, nd *Node, key string) (string, bool) {
	t.Helper()
	var r wire.KVResponse
	err := forwardT(t, nd, wire.MethodKVGet, &wire.KVRequest{Key: key}, &r)
	var re *rpc.Error
	if errors.As(err, &re) && re.Code == wire.CodeNotFound {
		return "", false
	}
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(r.Entries[0].Value), true
}

func kvPut(t *testing.T, nd *Node, key, value string) {
	t.Helper()
	if err := forwardT(t, nd, wire.MethodKVSet, &wire.KVRequest{Key: key, Value: []byte(value)}, &wire.KVResponse{}); err != nil {
		t.Fatalf("set %s: %v", key, err)
	}
}

// TestOperatorSnapshotSaveRestore saves the state to a file, changes it,
// restores the file (the change is gone on every node), and refuses a
// damaged file and a bad stream without replacing anything.
func TestOperatorSnapshotSaveRestore(t *testing.T) {
	nodes := testCluster(t, 2, func(i int, c *Config) { c.RaftVoters = 2 })
	waitFormed(t, nodes, 2, 2)
	kvPut(t, nodes[1], "a", "1")
	var snap wire.Snapshot
	if err := forwardT(t, nodes[1], wire.MethodSnapshotSave, &wire.Empty{}, &snap); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "backup.snap")
	if err := WriteSnapshotFile(path, &snap); err != nil {
		t.Fatal(err)
	}
	kvPut(t, nodes[1], "a", "2")
	kvPut(t, nodes[1], "b", "later")

	// A damaged file: refused, naming the file.
	raw, _ := os.ReadFile(path)
	bad := filepath.Join(t.TempDir(), "damaged.snap")
	damaged := append([]byte(nil), raw...)
	damaged[len(damaged)-3] ^= 0xff
	os.WriteFile(bad, damaged, 0o600)
	var fe *SnapshotFileError
	if _, err := ReadSnapshotFile(bad); !errors.As(err, &fe) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("damaged file: %v, want a checksum error naming %s", err, bad)
	}
	// A well-formed file around a stream that is not a snapshot.
	junk := filepath.Join(t.TempDir(), "junk.snap")
	WriteSnapshotFile(junk, &wire.Snapshot{Data: []byte("not a snapshot")})
	if _, err := ReadSnapshotFile(junk); !errors.As(err, &fe) || !strings.Contains(err.Error(), junk) {
		t.Fatalf("junk stream: %v, want an error naming %s", err, junk)
	}
	// The leader checks too: a truncated stream is refused, nothing replaced.
	err := forwardT(t, nodes[0], wire.MethodSnapshotRestore, &wire.Snapshot{Data: snap.Data[:len(snap.Data)-1]}, &wire.Empty{})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeBadInput {
		t.Fatalf("restore a truncated stream: %v, want bad_input", err)
	}
	if v, _ := kvValue(t, nodes[0], "a"); v != "2" {
		t.Fatalf("after a refused restore a=%q, want 2", v)
	}

	s, err := ReadSnapshotFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := forwardT(t, nodes[0], wire.MethodSnapshotRestore, s, &wire.Empty{}); err != nil {
		t.Fatal(err)
	}
	if v, _ := kvValue(t, nodes[0], "a"); v != "1" {
		t.Fatalf("after restore a=%q, want 1", v)
	}
	if _, ok := kvValue(t, nodes[0], "b"); ok {
		t.Fatal("after restore b exists; it was written after the save")
	}
	// The follower's FSM has the restored state too.
	follower := nodes[0]
	if follower.IsLeader() {
		follower = nodes[1]
	}
	testutil.Until(t, 10*time.Second, "the follower has the restored state", func() error {
		e, err := follower.State().KVGet("a")
		if err != nil || e == nil || string(e.Value) != "1" {
			return fmt.Errorf("follower a=%+v err=%v", e, err)
		}
		return nil
	})
}

// TestRaftPeersJSONRecovery: two of three servers die, so the survivor has
// no quorum; stopped, given <data-dir>/raft/peers.json naming only itself,
// and started again, it leads alone with the state it had, and the file is
// gone.
func TestRaftPeersJSONRecovery(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	kvPut(t, nodes[0], "kept", "yes")
	survivor := nodes[2]
	testutil.Until(t, 10*time.Second, "the survivor has the write", func() error {
		if e, _ := survivor.State().KVGet("kept"); e == nil {
			return errors.New("not yet")
		}
		return nil
	})
	nodes[0].Kill()
	nodes[1].Kill()
	survivor.Kill()

	cfg := survivor.cfg
	cfg.Head, cfg.Join = false, nil
	peersJSON := filepath.Join(cfg.DataDir, raftDir, RaftPeersFile)
	body := fmt.Sprintf(`[{"id": %q, "address": %q, "non_voter": false}]`, survivor.ID(), survivor.RPCAddr())
	if err := os.WriteFile(peersJSON, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Port = portOf(t, survivor.RPCAddr())
	again, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("restart with peers.json: %v", err)
	}
	t.Cleanup(again.Kill)
	testutil.Until(t, 60*time.Second, "the survivor leads alone", func() error {
		if !again.IsLeader() {
			return fmt.Errorf("raft state %s", again.raft.State())
		}
		return nil
	})
	if v, _ := kvValue(t, again, "kept"); v != "yes" {
		t.Fatalf("kept=%q after recovery, want yes", v)
	}
	kvPut(t, again, "after", "recovery")
	if _, err := os.Stat(peersJSON); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("peers.json still there after recovery: %v", err)
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p := splitHostPortInt(addr)
	return p
}
