package store

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/nodeup/nodeup/sched"
)

// applyCmd encodes req as type mt and applies it at index, returning the
// Apply result.
func applyCmd(t testing.TB, f *FSM, index uint64, mt MessageType, req any) any {
	t.Helper()
	data, err := Encode(mt, req)
	if err != nil {
		t.Fatalf("Encode(%v): %v", mt, err)
	}
	return f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data})
}

// mustApply is applyCmd that fails the test on an error result.
func mustApply(t testing.TB, f *FSM, index uint64, mt MessageType, req any) any {
	t.Helper()
	res := applyCmd(t, f, index, mt, req)
	if err, ok := res.(error); ok {
		t.Fatalf("Apply(%v) at %d: %v", mt, index, err)
	}
	return res
}

// applyErr is applyCmd that fails the test unless the result is an error.
func applyErr(t testing.TB, f *FSM, index uint64, mt MessageType, req any) error {
	t.Helper()
	res := applyCmd(t, f, index, mt, req)
	err, ok := res.(error)
	if !ok {
		t.Fatalf("Apply(%v) at %d = %#v, want an error", mt, index, res)
	}
	return err
}

// populate fills f with some state of every kind, using indexes 1..6.
func populate(t testing.TB, f *FSM) {
	t.Helper()
	mustApply(t, f, 1, ClusterInitType, ClusterInitRequest{Meta: ClusterMeta{ID: "c1", Name: "prod", CreatedAt: 100}})
	mustApply(t, f, 2, NodeRegisterType, NodeRegisterRequest{Node: testNode("n1")})
	mustApply(t, f, 3, NodeRegisterType, NodeRegisterRequest{Node: testNode("n2")})
	mustApply(t, f, 4, NodeStatusType, NodeStatusRequest{NodeID: "n2", Status: NodeSuspect, At: 400})
	mustApply(t, f, 5, KVSetType, KVSetRequest{Key: "a/b", Value: []byte("v1")})
	mustApply(t, f, 6, KVSetType, KVSetRequest{Key: "z", Value: []byte{}})
}

// testNode returns a fully populated node record with the given ID.
func testNode(id string) Node {
	return Node{
		ID:            id,
		Name:          "name-" + id,
		Address:       "10.0.0.1:7000",
		GossipAddress: "10.0.0.1:7001",
		HTTPAddress:   "10.0.0.1:8080",
		Server:        true,
		Resources:     sched.ResourceSet{"CPU": 4 * sched.Unit, "memory": 1 << 30},
		Labels:        map[string]string{"zone": "a"},
		Incarnation:   1,
		Version:       "0.1.0",
		RegisteredAt:  1000,
	}
}

// restored writes f's snapshot and restores it into a new FSM.
func restored(t testing.TB, f *FSM) *FSM {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.(*fsmSnapshot).write(&buf); err != nil {
		t.Fatal(err)
	}
	r := NewFSM(nil)
	if err := r.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	return r
}
