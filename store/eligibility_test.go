package store

import (
	"errors"
	"testing"
)

// TestNodeEligibility: a drain makes the node ineligible and draining with
// its deadline; a later registration (the node restarting) keeps that, as
// does a snapshot; enabling clears all of it; an unknown node and a request
// both eligible and draining are refused.
func TestNodeEligibility(t *testing.T) {
	f := NewFSM(nil)
	populate(t, f)
	node := func() *Node {
		t.Helper()
		n, err := f.State().NodeByID("n1")
		if err != nil || n == nil {
			t.Fatalf("n1: %v", err)
		}
		return n
	}
	mustApply(t, f, 7, NodeEligibilityType, NodeEligibilityRequest{NodeID: "n1", Drain: true, DrainDeadline: 5000})
	if n := node(); !n.Ineligible || !n.Draining || n.DrainDeadline != 5000 {
		t.Fatalf("after drain: %+v", n)
	}
	again := testNode("n1")
	again.Incarnation = 2
	mustApply(t, f, 8, NodeRegisterType, NodeRegisterRequest{Node: again})
	if n := node(); !n.Ineligible || !n.Draining || n.DrainDeadline != 5000 || n.Incarnation != 2 {
		t.Fatalf("a registration dropped the drain: %+v", n)
	}
	if n, _ := restored(t, f).State().NodeByID("n1"); n == nil || !n.Draining || !n.Ineligible {
		t.Fatalf("after a snapshot round trip: %+v", n)
	}
	mustApply(t, f, 9, NodeEligibilityType, NodeEligibilityRequest{NodeID: "n1", Eligible: true})
	if n := node(); n.Ineligible || n.Draining || n.DrainDeadline != 0 {
		t.Fatalf("after enable: %+v", n)
	}
	mustApply(t, f, 10, NodeEligibilityType, NodeEligibilityRequest{NodeID: "n1"})
	if n := node(); !n.Ineligible || n.Draining {
		t.Fatalf("after disable: %+v", n)
	}
	if err := applyErr(t, f, 11, NodeEligibilityType, NodeEligibilityRequest{NodeID: "nope"}); !errors.Is(err, ErrNodeNotFound) {
		t.Fatalf("unknown node: %v", err)
	}
	if err := applyErr(t, f, 12, NodeEligibilityType, NodeEligibilityRequest{NodeID: "n1", Eligible: true, Drain: true}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("eligible and draining: %v", err)
	}
}
