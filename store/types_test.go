package store

import (
	"reflect"
	"testing"
)

func TestNodeStatusValid(t *testing.T) {
	t.Parallel()
	for _, s := range []NodeStatus{NodeAlive, NodeSuspect, NodeDead, NodeLeft} {
		if !s.Valid() {
			t.Errorf("%q.Valid() = false", s)
		}
	}
	for _, s := range []NodeStatus{"", "Alive", "gone"} {
		if s.Valid() {
			t.Errorf("%q.Valid() = true", s)
		}
	}
}

func TestCopiesAreDeep(t *testing.T) {
	t.Parallel()
	n := testNode("n1")
	c := n.Copy()
	if !reflect.DeepEqual(&n, c) {
		t.Fatalf("copy differs: %+v vs %+v", n, c)
	}
	c.Resources["CPU"] = 1
	c.Labels["zone"] = "b"
	if n.Resources["CPU"] == 1 || n.Labels["zone"] == "b" {
		t.Fatal("Node.Copy shares maps")
	}

	e := &KVEntry{Key: "k", Value: []byte("v")}
	ec := e.Copy()
	ec.Value[0] = 'x'
	if string(e.Value) != "v" {
		t.Fatal("KVEntry.Copy shares Value")
	}

	m := &ClusterMeta{ID: "c"}
	if mc := m.Copy(); mc == m || *mc != *m {
		t.Fatal("ClusterMeta.Copy is not a distinct equal value")
	}

	if (*Node)(nil).Copy() != nil || (*KVEntry)(nil).Copy() != nil || (*ClusterMeta)(nil).Copy() != nil {
		t.Fatal("Copy of nil is not nil")
	}
}
