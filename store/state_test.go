package store

import (
	"bytes"
	"io"
	"testing"

	memdb "github.com/hashicorp/go-memdb"
)

// stateDump is every record of a state store, for comparisons.
type stateDump struct {
	Meta  *ClusterMeta
	Nodes []*Node
	KV    []*KVEntry
	Index uint64
}

// dumpState reads the whole state through the public read API.
func dumpState(t testing.TB, s *StateStore) stateDump {
	t.Helper()
	meta, err := s.ClusterMeta()
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := s.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := s.KVList("")
	if err != nil {
		t.Fatal(err)
	}
	return stateDump{Meta: meta, Nodes: nodes, KV: kv, Index: s.LatestIndex()}
}

func TestStateReadsSortedAndFiltered(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	for i, id := range []string{"c", "a", "b"} {
		n := testNode(id)
		n.Name = "same"
		if id == "c" {
			n.Name = "other"
		}
		mustApply(t, f, uint64(i+1), NodeRegisterType, NodeRegisterRequest{Node: n})
	}
	for i, k := range []string{"x/2", "x/1", "y", "x", "x/1/z"} {
		mustApply(t, f, uint64(10+i), KVSetType, KVSetRequest{Key: k, Value: []byte(k)})
	}
	s := f.State()

	nodes, _ := s.Nodes()
	if ids := nodeIDs(nodes); ids != "a,b,c" {
		t.Fatalf("Nodes = %s", ids)
	}
	byName, _ := s.NodesByName("same")
	if ids := nodeIDs(byName); ids != "a,b" {
		t.Fatalf("NodesByName = %s", ids)
	}
	if none, _ := s.NodesByName("nobody"); none == nil || len(none) != 0 {
		t.Fatalf("NodesByName(nobody) = %#v", none)
	}
	if n, err := s.NodeByID("zz"); n != nil || err != nil {
		t.Fatalf("NodeByID(missing) = %v, %v", n, err)
	}

	for prefix, want := range map[string]string{
		"":     "x,x/1,x/1/z,x/2,y",
		"x/":   "x/1,x/1/z,x/2",
		"x/1":  "x/1,x/1/z",
		"y":    "y",
		"nope": "",
	} {
		list, err := s.KVList(prefix)
		if err != nil {
			t.Fatal(err)
		}
		if list == nil {
			t.Fatalf("KVList(%q) = nil", prefix)
		}
		if got := keys(list); got != want {
			t.Errorf("KVList(%q) = %s, want %s", prefix, got, want)
		}
	}
	if got := s.LatestIndex(); got != 14 {
		t.Fatalf("LatestIndex = %d, want 14", got)
	}
}

func TestStateReturnsCopies(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	req := NodeRegisterRequest{Node: testNode("n1")}
	mustApply(t, f, 1, NodeRegisterType, &req)
	mustApply(t, f, 2, KVSetType, KVSetRequest{Key: "k", Value: []byte("v")})
	mustApply(t, f, 3, ClusterInitType, ClusterInitRequest{Meta: ClusterMeta{ID: "c"}})
	s := f.State()

	// Mutating the request after apply does not reach the store.
	req.Node.Labels["zone"] = "mutated"

	n, _ := s.NodeByID("n1")
	n.Labels["zone"] = "x"
	n.Resources["CPU"] = 0
	n.Status = NodeDead
	nodes, _ := s.Nodes()
	nodes[0].Labels["zone"] = "y"
	e, _ := s.KVGet("k")
	e.Value[0] = 'X'
	list, _ := s.KVList("")
	list[0].Value[0] = 'Y'
	m, _ := s.ClusterMeta()
	m.ID = "changed"

	n, _ = s.NodeByID("n1")
	if n.Labels["zone"] != "a" || n.Resources["CPU"] == 0 || n.Status != NodeAlive {
		t.Fatalf("stored node was mutated: %+v", n)
	}
	if e, _ := s.KVGet("k"); string(e.Value) != "v" {
		t.Fatalf("stored value was mutated: %q", e.Value)
	}
	if m, _ := s.ClusterMeta(); m.ID != "c" {
		t.Fatal("stored meta was mutated")
	}
}

func nodeIDs(nodes []*Node) string {
	var s string
	for i, n := range nodes {
		if i > 0 {
			s += ","
		}
		s += n.ID
	}
	return s
}

func keys(list []*KVEntry) string {
	var s string
	for i, e := range list {
		if i > 0 {
			s += ","
		}
		s += e.Key
	}
	return s
}

// TestStateConcurrentReads runs readers against applies and restores; run
// with -race.
func TestStateConcurrentReads(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	populate(t, f)
	snap := persist(t, f)
	s := f.State()

	stop := make(chan struct{})
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				nodes, err := s.Nodes()
				if err != nil {
					t.Error(err)
					return
				}
				for _, n := range nodes {
					n.Labels["seen"] = "yes" // callers may mutate copies
				}
				_, _ = s.KVList("")
				_ = s.LatestIndex()
				_, _ = s.ActorByIDWatch(memdb.NewWatchSet(), "a")
			}
		}()
	}
	for i := uint64(7); i < 300; i++ {
		switch i % 50 {
		case 0:
			if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatal(err)
			}
		default:
			n := testNode("n1")
			n.Incarnation = i
			mustApply(t, f, i, NodeRegisterType, NodeRegisterRequest{Node: n})
		}
	}
	close(stop)
	for range 4 {
		<-done
	}
}

func TestNodeStatusLive(t *testing.T) {
	t.Parallel()
	for s, want := range map[NodeStatus]bool{NodeAlive: true, NodeSuspect: true, NodeDead: false, NodeLeft: false} {
		if s.Live() != want {
			t.Errorf("%s.Live() = %v, want %v", s, s.Live(), want)
		}
	}
}
