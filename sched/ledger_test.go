package sched

import (
	"errors"
	"slices"
	"testing"
)

func testLedger(t testing.TB, nodes ...Node) *Ledger {
	l := NewLedger()
	for _, n := range nodes {
		l.SetNode(n.ID, n.Total, n.Labels, n.Alive)
	}
	return l
}

func TestLedgerPlaceReleaseRepair(t *testing.T) {
	l := testLedger(t, nd(t, "a", "CPU=4", ""), nd(t, "b", "CPU=4", ""), nd(t, "c", "CPU=4", ""))
	got, err := l.Place("g1", bundles(t, "CPU=2", "CPU=2", "CPU=2"), StrictSpread)
	if err != nil || distinct(got) != 3 {
		t.Fatalf("place: %v %v", got, err)
	}
	if _, err := l.Place("g1", bundles(t, "CPU=1"), Pack); !errors.Is(err, ErrGroupExists) {
		t.Fatalf("duplicate group: %v", err)
	}
	if r := l.Reserved("a"); !r.Equal(rs(t, "CPU=2")) {
		t.Fatalf("reserved on a: %s", r)
	}
	for _, n := range l.Nodes() {
		if !n.Available.Equal(rs(t, "CPU=2")) {
			t.Fatalf("node %s available %s, want CPU=2", n.ID, n.Available)
		}
	}
	// Usage outside groups is subtracted for decisions.
	l.SetUsage("a", rs(t, "CPU=1"))
	l.SetUsage("zzz", rs(t, "CPU=1")) // unknown: ignored
	if _, err := l.Place("g2", bundles(t, "CPU=2", "CPU=2", "CPU=2"), StrictSpread); !errors.Is(err, ErrPending) {
		t.Fatalf("with usage on a: %v, want pending", err)
	}
	l.SetUsage("a", nil)

	// b dies: g1 needs repair; with a fourth node it moves there.
	l.SetNode("b", rs(t, "CPU=4"), nil, false)
	if g := l.NeedsRepair(); !slices.Equal(g, []string{"g1"}) {
		t.Fatalf("needs repair: %v", g)
	}
	if _, err := l.Repair("g1"); !errors.Is(err, ErrInfeasible) {
		t.Fatalf("repair with no spare node: %v, want infeasible", err)
	}
	l.SetNode("d", rs(t, "CPU=4"), nil, true)
	got, err = l.Repair("g1")
	if err != nil || slices.Contains(got, "b") || distinct(got) != 3 {
		t.Fatalf("repair: %v %v", got, err)
	}
	if err := l.Verify(); err != nil {
		t.Fatal(err)
	}
	if !l.Reserved("b").IsZero() {
		t.Fatalf("dead b still holds %s", l.Reserved("b"))
	}
	if _, err := l.Repair("nope"); !errors.Is(err, ErrNoGroup) {
		t.Fatal(err)
	}
	// b comes back as a new incarnation: nothing of g1 is there; NodeLost
	// on d (say it restarted) unplaces its bundle.
	l.SetNode("b", rs(t, "CPU=4"), nil, true)
	if g := l.NodeLost("d"); !slices.Equal(g, []string{"g1"}) {
		t.Fatalf("NodeLost(d) = %v", g)
	}
	r, _ := l.Get("g1")
	if !slices.Contains(r.Nodes, "") {
		t.Fatalf("after NodeLost: %v", r.Nodes)
	}
	if got, err = l.Repair("g1"); err != nil || distinct(got) != 3 {
		t.Fatalf("repair after NodeLost: %v %v", got, err)
	}
	if !l.Release("g1") || l.Release("g1") {
		t.Fatal("Release should succeed once")
	}
	if len(l.Groups()) != 0 {
		t.Fatal(l.Groups())
	}
	if err := l.Verify(); err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Nodes() {
		if !n.Available.Equal(n.Total) {
			t.Fatalf("after release %s has %s of %s", n.ID, n.Available, n.Total)
		}
	}
}

// TestLedgerCommitConflict is the Raft pattern: two placements decided on
// the same view are applied in log order; the second no longer fits and is
// rejected, leaving the ledger as the first left it.
func TestLedgerCommitConflict(t *testing.T) {
	l := testLedger(t, nd(t, "a", "CPU=4", ""), nd(t, "b", "CPU=2", ""))
	view := l.Nodes()
	bs := bundles(t, "CPU=3")
	a1, err1 := PlaceBundles(view, bs, Pack)
	a2, err2 := PlaceBundles(view, bs, Pack)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if err := l.Commit(Reservation{Group: "g1", Strategy: Pack, Bundles: bs, Nodes: a1}); err != nil {
		t.Fatal(err)
	}
	before := l.Nodes()
	err := l.Commit(Reservation{Group: "g2", Strategy: Pack, Bundles: bs, Nodes: a2})
	wantErrContains(t, err, ErrReservation, "node a would have CPU=6 reserved, over its total 4")
	if !nodesEqual(before, l.Nodes()) {
		t.Fatal("failed Commit changed the ledger")
	}
	cases := []struct {
		r      Reservation
		target error
		part   string
	}{
		{Reservation{Group: "g1", Strategy: Pack, Bundles: bs, Nodes: []string{"b"}}, ErrGroupExists, `"g1"`},
		{Reservation{Group: "x", Strategy: "FOO", Bundles: bs, Nodes: []string{"b"}}, ErrInvalidStrategy, `"FOO"`},
		{Reservation{Group: "x", Strategy: Pack, Bundles: []ResourceSet{{}}, Nodes: []string{"b"}}, ErrInvalidBundle, "bundle 0 is empty"},
		{Reservation{Group: "x", Strategy: Pack, Bundles: bs, Nodes: nil}, ErrReservation, "0 nodes for 1 bundles"},
		{Reservation{Group: "x", Strategy: Pack, Bundles: bs, Nodes: []string{""}}, ErrReservation, "bundle 0 has no node"},
		{Reservation{Group: "x", Strategy: Pack, Bundles: bs, Nodes: []string{"q"}}, ErrReservation, "node q is unknown or not alive"},
		{Reservation{Group: "x", Strategy: StrictPack, Bundles: bundles(t, "CPU=0.5", "CPU=0.5"), Nodes: []string{"a", "b"}}, ErrReservation, "STRICT_PACK puts bundle 0 on a and bundle 1 on b"},
		{Reservation{Group: "x", Strategy: StrictSpread, Bundles: bundles(t, "CPU=0.5", "CPU=0.5"), Nodes: []string{"b", "b"}}, ErrReservation, "STRICT_SPREAD puts bundles 0 and 1 both on b"},
	}
	for _, c := range cases {
		wantErrContains(t, l.Commit(c.r), c.target, c.part)
	}
	// Reassign: move g1 to b (too small), then a valid no-op.
	wantErrContains(t, l.Reassign("g1", []string{"b"}), ErrReservation, "node b would have CPU=3 reserved, over its total 2")
	wantErrContains(t, l.Reassign("g1", []string{"a", "b"}), ErrReservation, "2 nodes for 1 bundles")
	wantErrContains(t, l.Reassign("zz", []string{"a"}), ErrNoGroup, `"zz"`)
	if err := l.Reassign("g1", []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Verify(); err != nil {
		t.Fatal(err)
	}
}
