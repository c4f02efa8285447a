package store

import (
	"errors"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/nodeup/nodeup/sched"
)

func TestApplyClusterInit(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	if m, err := f.State().ClusterMeta(); err != nil || m != nil {
		t.Fatalf("ClusterMeta before init = %v, %v", m, err)
	}
	if res := mustApply(t, f, 3, ClusterInitType, ClusterInitRequest{Meta: ClusterMeta{ID: "c1", Name: "prod", CreatedAt: 7, CreateIndex: 99}}); res != nil {
		t.Fatalf("result = %#v, want nil", res)
	}
	want := &ClusterMeta{ID: "c1", Name: "prod", CreatedAt: 7, CreateIndex: 3}
	if m, _ := f.State().ClusterMeta(); !reflect.DeepEqual(m, want) {
		t.Fatalf("ClusterMeta = %+v, want %+v", m, want)
	}

	// Same ID: no-op, index unchanged.
	mustApply(t, f, 4, ClusterInitType, ClusterInitRequest{Meta: ClusterMeta{ID: "c1", Name: "other"}})
	if m, _ := f.State().ClusterMeta(); !reflect.DeepEqual(m, want) {
		t.Fatalf("ClusterMeta after same-ID init = %+v", m)
	}
	if got := f.State().LatestIndex(); got != 3 {
		t.Fatalf("LatestIndex = %d, want 3", got)
	}

	// Different ID: error.
	if err := applyErr(t, f, 5, ClusterInitType, ClusterInitRequest{Meta: ClusterMeta{ID: "c2"}}); !errors.Is(err, ErrClusterIDMismatch) {
		t.Fatalf("err = %v", err)
	}
	// Empty ID: error.
	if err := applyErr(t, NewFSM(nil), 1, ClusterInitType, ClusterInitRequest{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("err = %v", err)
	}
}

func TestApplyNodeRegister(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	n := testNode("n1")
	if res := mustApply(t, f, 10, NodeRegisterType, NodeRegisterRequest{Node: n}); res != nil {
		t.Fatalf("result = %#v", res)
	}
	got, err := f.State().NodeByID("n1")
	if err != nil {
		t.Fatal(err)
	}
	want := n
	want.Status = NodeAlive
	want.StatusChangedAt = n.RegisteredAt
	want.CreateIndex, want.ModifyIndex = 10, 10
	if !reflect.DeepEqual(got, &want) {
		t.Fatalf("node = %+v\nwant   %+v", got, &want)
	}

	// Re-register after a restart: CreateIndex kept, Incarnation and the
	// rest updated, StatusChangedAt kept since the status did not change.
	n2 := testNode("n1")
	n2.Incarnation = 2
	n2.Address = "10.0.0.2:7000"
	n2.RegisteredAt = 2000
	n2.Resources = sched.ResourceSet{"CPU": 8 * sched.Unit}
	mustApply(t, f, 11, NodeRegisterType, NodeRegisterRequest{Node: n2})
	got, _ = f.State().NodeByID("n1")
	if got.CreateIndex != 10 || got.ModifyIndex != 11 || got.Incarnation != 2 ||
		got.Address != "10.0.0.2:7000" || got.RegisteredAt != 2000 ||
		got.StatusChangedAt != 1000 || got.Resources["CPU"] != 8*sched.Unit || len(got.Resources) != 1 {
		t.Fatalf("re-registered node = %+v", got)
	}

	// Re-register of a dead node: status back to alive, StatusChangedAt moves.
	mustApply(t, f, 12, NodeStatusType, NodeStatusRequest{NodeID: "n1", Status: NodeDead, At: 2500})
	n2.Incarnation, n2.RegisteredAt = 3, 3000
	mustApply(t, f, 13, NodeRegisterType, NodeRegisterRequest{Node: n2})
	got, _ = f.State().NodeByID("n1")
	if got.Status != NodeAlive || got.StatusChangedAt != 3000 || got.CreateIndex != 10 {
		t.Fatalf("revived node = %+v", got)
	}

	// Stale incarnation is rejected, state unchanged.
	n2.Incarnation = 1
	if err := applyErr(t, f, 14, NodeRegisterType, NodeRegisterRequest{Node: n2}); !errors.Is(err, ErrStaleIncarnation) {
		t.Fatalf("err = %v", err)
	}
	if after, _ := f.State().NodeByID("n1"); !reflect.DeepEqual(after, got) {
		t.Fatalf("stale register changed the node: %+v", after)
	}

	// Explicit status and nil maps are accepted.
	mustApply(t, f, 15, NodeRegisterType, NodeRegisterRequest{Node: Node{ID: "n2", Status: NodeLeft}})
	if got, _ := f.State().NodeByID("n2"); got == nil || got.Status != NodeLeft || got.Resources != nil {
		t.Fatalf("n2 = %+v", got)
	}
}

func TestApplyNodeRegisterInvalid(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	for name, n := range map[string]Node{
		"empty ID":       {},
		"NUL in ID":      {ID: "a\x00b"},
		"invalid status": {ID: "n1", Status: "zombie"},
	} {
		if err := applyErr(t, f, 1, NodeRegisterType, NodeRegisterRequest{Node: n}); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if nodes, _ := f.State().Nodes(); len(nodes) != 0 {
		t.Fatalf("nodes = %v", nodes)
	}
	if f.State().LatestIndex() != 0 {
		t.Fatal("rejected commands moved the index")
	}
}

func TestApplyNodeStatus(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	mustApply(t, f, 1, NodeRegisterType, NodeRegisterRequest{Node: testNode("n1")})
	mustApply(t, f, 2, NodeStatusType, NodeStatusRequest{NodeID: "n1", Status: NodeSuspect, At: 5000})
	got, _ := f.State().NodeByID("n1")
	if got.Status != NodeSuspect || got.StatusChangedAt != 5000 || got.ModifyIndex != 2 || got.CreateIndex != 1 {
		t.Fatalf("node = %+v", got)
	}

	// Same status: no-op.
	mustApply(t, f, 3, NodeStatusType, NodeStatusRequest{NodeID: "n1", Status: NodeSuspect, At: 6000})
	if again, _ := f.State().NodeByID("n1"); !reflect.DeepEqual(again, got) || f.State().LatestIndex() != 2 {
		t.Fatalf("same-status update changed state: %+v", again)
	}

	if err := applyErr(t, f, 4, NodeStatusType, NodeStatusRequest{NodeID: "nope", Status: NodeDead}); !errors.Is(err, ErrNodeNotFound) {
		t.Fatalf("unknown node: err = %v", err)
	}
	if err := applyErr(t, f, 5, NodeStatusType, NodeStatusRequest{NodeID: "n1", Status: "bogus"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("invalid status: err = %v", err)
	}
	if err := applyErr(t, f, 6, NodeStatusType, NodeStatusRequest{NodeID: "n1"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("empty status: err = %v", err)
	}
	if got.Status != NodeSuspect || f.State().LatestIndex() != 2 {
		t.Fatal("rejected status updates changed state")
	}
}

func TestApplyNodeDeregister(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	mustApply(t, f, 1, NodeRegisterType, NodeRegisterRequest{Node: testNode("n1")})
	mustApply(t, f, 2, NodeRegisterType, NodeRegisterRequest{Node: testNode("n2")})
	mustApply(t, f, 3, NodeDeregisterType, NodeDeregisterRequest{NodeID: "n1"})
	if n, _ := f.State().NodeByID("n1"); n != nil {
		t.Fatalf("n1 still present: %+v", n)
	}
	nodes, _ := f.State().Nodes()
	if len(nodes) != 1 || nodes[0].ID != "n2" {
		t.Fatalf("nodes = %+v", nodes)
	}
	// Idempotent.
	mustApply(t, f, 4, NodeDeregisterType, NodeDeregisterRequest{NodeID: "n1"})
	if f.State().LatestIndex() != 3 {
		t.Fatalf("LatestIndex = %d, want 3", f.State().LatestIndex())
	}
}

func TestApplyKV(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	res := mustApply(t, f, 5, KVSetType, KVSetRequest{Key: "k", Value: []byte("v1")})
	if r, ok := res.(*KVSetResult); !ok || *r != (KVSetResult{OK: true, Index: 5}) {
		t.Fatalf("result = %#v", res)
	}
	mustApply(t, f, 6, KVSetType, KVSetRequest{Key: "k", Value: []byte("v2")})
	e, _ := f.State().KVGet("k")
	want := &KVEntry{Key: "k", Value: []byte("v2"), CreateIndex: 5, ModifyIndex: 6}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("entry = %+v, want %+v", e, want)
	}

	mustApply(t, f, 7, KVDeleteType, KVDeleteRequest{Key: "k"})
	if e, err := f.State().KVGet("k"); e != nil || err != nil {
		t.Fatalf("after delete: %+v, %v", e, err)
	}
	mustApply(t, f, 8, KVDeleteType, KVDeleteRequest{Key: "k"}) // idempotent
	if f.State().LatestIndex() != 7 {
		t.Fatalf("LatestIndex = %d", f.State().LatestIndex())
	}

	if err := applyErr(t, f, 9, KVSetType, KVSetRequest{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("empty key set: %v", err)
	}
	if err := applyErr(t, f, 9, KVDeleteType, KVDeleteRequest{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("empty key delete: %v", err)
	}
}

func TestApplyKVCAS(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	kvSet := func(index uint64, req KVSetRequest) KVSetResult {
		t.Helper()
		return *mustApply(t, f, index, KVSetType, req).(*KVSetResult)
	}

	// Index 0: create only if absent.
	if r := kvSet(10, KVSetRequest{Key: "k", Value: []byte("a"), CAS: true}); r != (KVSetResult{OK: true, Index: 10}) {
		t.Fatalf("create = %+v", r)
	}
	if r := kvSet(11, KVSetRequest{Key: "k", Value: []byte("b"), CAS: true}); r != (KVSetResult{OK: false, Index: 10}) {
		t.Fatalf("create existing = %+v", r)
	}
	// Wrong index fails and reports the current one.
	if r := kvSet(12, KVSetRequest{Key: "k", Value: []byte("b"), CAS: true, Index: 9}); r != (KVSetResult{OK: false, Index: 10}) {
		t.Fatalf("stale CAS = %+v", r)
	}
	if e, _ := f.State().KVGet("k"); string(e.Value) != "a" || e.ModifyIndex != 10 {
		t.Fatalf("failed CAS changed the entry: %+v", e)
	}
	if f.State().LatestIndex() != 10 {
		t.Fatal("failed CAS moved the index")
	}
	// Right index succeeds.
	if r := kvSet(13, KVSetRequest{Key: "k", Value: []byte("c"), CAS: true, Index: 10}); r != (KVSetResult{OK: true, Index: 13}) {
		t.Fatalf("CAS = %+v", r)
	}
	if e, _ := f.State().KVGet("k"); string(e.Value) != "c" || e.CreateIndex != 10 || e.ModifyIndex != 13 {
		t.Fatalf("entry = %+v", e)
	}
	// Non-zero index on a missing key fails with Index 0.
	if r := kvSet(14, KVSetRequest{Key: "missing", CAS: true, Index: 3}); r != (KVSetResult{}) {
		t.Fatalf("CAS on missing = %+v", r)
	}
}

func TestApplyRejectsBadEntries(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	populate(t, f)
	before := dumpState(t, f.State())
	good, _ := Encode(KVSetType, KVSetRequest{Key: "new", Value: []byte("x")})

	for name, data := range map[string][]byte{
		"nil":          nil,
		"empty":        {},
		"unknown type": {0xee, 0x80},
		"type only":    {byte(NodeRegisterType)},
		"truncated":    good[:len(good)/2],
		"trailing":     append(append([]byte{}, good...), 0xc0),
		"garbage":      {byte(NodeRegisterType), 0xde, 0xad, 0xbe, 0xef},
		"wrong types":  {byte(KVSetType), 0x81, 0xa3, 'K', 'e', 'y', 0x01},
	} {
		res := f.Apply(&raft.Log{Index: 100, Type: raft.LogCommand, Data: data})
		if _, ok := res.(error); !ok {
			t.Errorf("%s: result = %#v, want error", name, res)
		}
	}
	if after := dumpState(t, f.State()); !reflect.DeepEqual(before, after) {
		t.Fatalf("bad entries changed state:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestApplyIgnoresNonCommandLogs(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	good, _ := Encode(KVSetType, KVSetRequest{Key: "k"})
	for _, lt := range []raft.LogType{raft.LogNoop, raft.LogBarrier, raft.LogConfiguration} {
		if res := f.Apply(&raft.Log{Index: 1, Type: lt, Data: good}); res != nil {
			t.Errorf("%v: result = %#v", lt, res)
		}
	}
	if res := f.Apply(nil); res != nil {
		t.Errorf("nil log: result = %#v", res)
	}
	if e, _ := f.State().KVGet("k"); e != nil {
		t.Fatal("non-command log was applied")
	}
}

// FuzzApply feeds arbitrary bytes to Apply: it must never panic, and a
// rejected entry must not change the state.
func FuzzApply(f *testing.F) {
	seeds := []struct {
		mt  MessageType
		req any
	}{
		{ClusterInitType, ClusterInitRequest{Meta: ClusterMeta{ID: "c"}}},
		{NodeRegisterType, NodeRegisterRequest{Node: testNode("n1")}},
		{NodeStatusType, NodeStatusRequest{NodeID: "n1", Status: NodeDead}},
		{NodeDeregisterType, NodeDeregisterRequest{NodeID: "n1"}},
		{KVSetType, KVSetRequest{Key: "k", Value: []byte("v"), CAS: true}},
		{KVDeleteType, KVDeleteRequest{Key: "k"}},
		{TokenCreateType, TokenCreateRequest{Token: testToken("0000000a")}},
		{TokenRevokeType, TokenRevokeRequest{ID: "0000000a"}},
		{JobDeleteType, JobDeleteRequest{ID: "j1"}},
	}
	for _, s := range seeds {
		data, err := Encode(s.mt, s.req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM(nil)
		mustApply(t, fsm, 1, NodeRegisterType, NodeRegisterRequest{Node: testNode("n1")})
		mustApply(t, fsm, 2, KVSetType, KVSetRequest{Key: "k", Value: []byte("v")})
		before := dumpState(t, fsm.State())
		res := fsm.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: data})
		if err, ok := res.(error); ok {
			if errors.Is(err, errApplyPanic) {
				t.Fatalf("Apply panicked: %v", err)
			}
			if after := dumpState(t, fsm.State()); !reflect.DeepEqual(before, after) {
				t.Fatalf("rejected entry changed state: %v", res)
			}
		}
	})
}
