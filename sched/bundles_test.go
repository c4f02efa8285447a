package sched

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// rs parses "CPU=2,GPU=1" for tests.
func rs(t testing.TB, s string) ResourceSet {
	t.Helper()
	r, err := ParseResources(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// nd is an alive node with total and available given as text; avail ""
// means all of total is free.
func nd(t testing.TB, id, total, avail string) Node {
	t.Helper()
	tot := rs(t, total)
	av := tot.Clone()
	if avail != "" {
		av = rs(t, avail)
	}
	return Node{ID: id, Total: tot, Available: av, Alive: true}
}

func bundles(t testing.TB, specs ...string) []ResourceSet {
	t.Helper()
	out := make([]ResourceSet, len(specs))
	for i, s := range specs {
		out[i] = rs(t, s)
	}
	return out
}

func wantErrContains(t *testing.T, err error, target error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one matching %v containing %q", target, parts)
	}
	if target != nil && !errors.Is(err, target) {
		t.Fatalf("error %q (%T) does not match %v", err, err, target)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q lacks %q", err, p)
		}
	}
}

func TestParsePlacementStrategy(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]PlacementStrategy{
		"PACK": Pack, "SPREAD": Spread, " strict_pack ": StrictPack, "Strict_Spread": StrictSpread,
	} {
		got, err := ParsePlacementStrategy(in)
		if err != nil || got != want {
			t.Errorf("ParsePlacementStrategy(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "PAK", "STRICT-PACK", "pack,spread"} {
		_, err := ParsePlacementStrategy(bad)
		wantErrContains(t, err, ErrInvalidStrategy, `"`+bad+`"`, "accepted are PACK, SPREAD, STRICT_PACK, STRICT_SPREAD")
	}
	if PlacementStrategy("pack").Valid() {
		t.Error(`"pack" (lower case) should not be Valid without parsing`)
	}
	_, err := PlaceBundles([]Node{nd(t, "a", "CPU=1", "")}, bundles(t, "CPU=1"), "BEST", nil)
	wantErrContains(t, err, ErrInvalidStrategy, `"BEST"`)
}

func TestValidateBundles(t *testing.T) {
	t.Parallel()
	cases := []struct {
		b     []ResourceSet
		parts []string
	}{
		{nil, []string{"at least one bundle"}},
		{[]ResourceSet{{}}, []string{"bundle 0 is empty"}},
		{[]ResourceSet{{CPU: Unit}, {CPU: 0}}, []string{`bundle 1: resource "CPU" has amount 0`}},
		{[]ResourceSet{{GPU: -5000}}, []string{`bundle 0: resource "GPU" has negative amount -0.5`}},
	}
	for _, c := range cases {
		wantErrContains(t, ValidateBundles(c.b), ErrInvalidBundle, c.parts...)
		_, err := PlaceBundles([]Node{nd(t, "a", "CPU=1", "")}, c.b, Pack, nil)
		wantErrContains(t, err, ErrInvalidBundle, c.parts...)
	}
	err := ValidateBundles([]ResourceSet{{"bad name": Unit}})
	wantErrContains(t, err, ErrInvalidResourceName, "bundle 0", `"bad name"`)
	if err := ValidateBundles(bundles(t, "CPU=1", "GPU=0.5,memory=100")); err != nil {
		t.Fatal(err)
	}
}

func TestPackOneNodeWhenPossible(t *testing.T) {
	t.Parallel()
	nodes := []Node{
		nd(t, "big", "CPU=16", ""),
		nd(t, "mid", "CPU=8", ""),
		nd(t, "small", "CPU=2", ""),
	}
	got, err := PlaceBundles(nodes, bundles(t, "CPU=2", "CPU=2", "CPU=2"), Pack, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Tightest node that takes all: mid.
	if want := []string{"mid", "mid", "mid"}; !slices.Equal(got, want) {
		t.Fatalf("PACK = %v, want %v", got, want)
	}
	// 18 CPUs is too much for one node: big takes five bundles, one more
	// node the sixth.
	got, err = PlaceBundles(nodes, bundles(t, "CPU=3", "CPU=3", "CPU=3", "CPU=3", "CPU=3", "CPU=3"), Pack, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := distinct(got); n != 2 {
		t.Fatalf("PACK of 6x3 CPU on 16/8/2 = %v: %d nodes, want 2", got, n)
	}
}

func distinct(ids []string) int {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return len(m)
}

func TestSpreadDistinctThenReuse(t *testing.T) {
	t.Parallel()
	nodes := []Node{nd(t, "a", "CPU=4", ""), nd(t, "b", "CPU=4", ""), nd(t, "c", "CPU=4", "CPU=1")}
	got, err := PlaceBundles(nodes, bundles(t, "CPU=1", "CPU=1", "CPU=1"), Spread, nil)
	if err != nil {
		t.Fatal(err)
	}
	if distinct(got) != 3 {
		t.Fatalf("SPREAD = %v, want 3 distinct nodes", got)
	}
	// Four bundles on three nodes: best effort, one node reused, never c
	// twice (it has 1 CPU free).
	got, err = PlaceBundles(nodes, bundles(t, "CPU=1", "CPU=1", "CPU=1", "CPU=1"), Spread, nil)
	if err != nil {
		t.Fatal(err)
	}
	if distinct(got) != 3 {
		t.Fatalf("SPREAD of 4 on 3 = %v, want all 3 nodes used", got)
	}
	// STRICT_SPREAD refuses the same request for ever.
	_, err = PlaceBundles(nodes, bundles(t, "CPU=1", "CPU=1", "CPU=1", "CPU=1"), StrictSpread, nil)
	wantErrContains(t, err, ErrInfeasible, "STRICT_SPREAD needs 4 distinct nodes for 4 bundles, but only 3 alive nodes are eligible")
	var ie *InfeasibleError
	if !errors.As(err, &ie) || ie.Bundle != -1 {
		t.Fatalf("want *InfeasibleError with Bundle -1, got %#v", err)
	}
}

func TestStrictPack(t *testing.T) {
	t.Parallel()
	nodes := []Node{nd(t, "a", "CPU=8,GPU=2", "CPU=2,GPU=2"), nd(t, "b", "CPU=4", "")}
	got, err := PlaceBundles(nodes, bundles(t, "CPU=1", "CPU=1,GPU=1"), StrictPack, nil)
	if err != nil || !slices.Equal(got, []string{"a", "a"}) {
		t.Fatalf("STRICT_PACK = %v, %v; want [a a]", got, err)
	}
	// Fits a's total, not what is free now.
	_, err = PlaceBundles(nodes, bundles(t, "CPU=4", "CPU=1,GPU=1"), StrictPack, nil)
	wantErrContains(t, err, ErrPending, "STRICT_PACK: no eligible node has room for all bundles, {CPU=5, GPU=1} together, now",
		"needs CPU=5 but the most free on any eligible node is 4 (node b)")
	var pe *PendingError
	if !errors.As(err, &pe) || pe.Resource != CPU || pe.Need != QuantityOf(5) || pe.Free != QuantityOf(4) {
		t.Fatalf("pending details = %#v", err)
	}
	// Larger than the largest node: never.
	_, err = PlaceBundles(nodes, bundles(t, "CPU=5", "CPU=5"), StrictPack, nil)
	wantErrContains(t, err, ErrInfeasible, "STRICT_PACK needs all bundles, {CPU=10} together, on one node",
		"needs CPU=10 but the most in total on any eligible node is 8 (node a)")
	// Each resource somewhere, never together.
	_, err = PlaceBundles([]Node{nd(t, "a", "CPU=8", ""), nd(t, "b", "GPU=1", "")}, bundles(t, "CPU=1", "GPU=1"), StrictPack, nil)
	wantErrContains(t, err, ErrInfeasible, "no single eligible node has all of it in total at once")
}

func TestStrictSpreadMatching(t *testing.T) {
	t.Parallel()
	// Bundle 0 (custom Y, placed first) prefers a; bundle 1 fits only a:
	// the matching must move bundle 0 to b.
	nodes := []Node{nd(t, "a", "CPU=4,Y=1", ""), nd(t, "b", "CPU=1,Y=2", "")}
	got, err := PlaceBundles(nodes, bundles(t, "Y=1", "CPU=2"), StrictSpread, nil)
	if err != nil || !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("STRICT_SPREAD = %v, %v; want [b a]", got, err)
	}
	// Not now: a is busy.
	nodes[0].Available = rs(t, "CPU=1,Y=1")
	_, err = PlaceBundles(nodes, bundles(t, "Y=1", "CPU=2"), StrictSpread, nil)
	wantErrContains(t, err, ErrPending, "STRICT_SPREAD: only 1 of 2 bundles fit on distinct nodes now; bundle 1 {CPU=2}",
		"needs CPU=2 but the most free on any eligible node is 1")
	// Never: both bundles need the only Y node.
	_, err = PlaceBundles([]Node{nd(t, "a", "CPU=4,Y=1", ""), nd(t, "b", "CPU=4", "")}, bundles(t, "Y=1", "Y=1"), StrictSpread, nil)
	wantErrContains(t, err, ErrInfeasible, "STRICT_SPREAD: only 1 of 2 bundles fit on distinct alive nodes even with every node empty")
}

func TestInfeasibleMessages(t *testing.T) {
	t.Parallel()
	nodes := []Node{nd(t, "a", "CPU=4", ""), nd(t, "b", "CPU=4", ""), {ID: "dead", Total: rs(t, "CPU=64,GPU=8"), Alive: false}}
	_, err := PlaceBundles(nodes, bundles(t, "CPU=1", "GPU=1"), Pack, nil)
	wantErrContains(t, err, ErrInfeasible, "bundle 1 {GPU=1} can never be placed: no eligible alive node has any GPU in total (needs 1)")
	var ie *InfeasibleError
	if !errors.As(err, &ie) || ie.Bundle != 1 || ie.Resource != GPU || ie.Need != Unit || ie.Most != 0 {
		t.Fatalf("details = %#v", ie)
	}
	_, err = PlaceBundles(nodes, bundles(t, "accelerator_type:H100=0.001"), Spread, nil)
	wantErrContains(t, err, ErrInfeasible, `no eligible alive node has accelerator type "H100" in total`)
	_, err = PlaceBundles(nodes, bundles(t, "CPU=6"), Pack, nil)
	wantErrContains(t, err, ErrInfeasible, "needs CPU=6 but the most in total on any eligible node is 4 (node a)")
	_, err = PlaceBundles(nodes, bundles(t, "CPU=3", "CPU=3", "CPU=3"), Pack, nil)
	wantErrContains(t, err, ErrInfeasible, "the bundles need CPU=9 together but the alive nodes have 8 in total")
	_, err = PlaceBundles([]Node{nd(t, "a", "CPU=5", ""), nd(t, "b", "CPU=5", "")}, bundles(t, "CPU=3", "CPU=3", "CPU=3"), Spread, nil)
	wantErrContains(t, err, ErrInfeasible, "the 3 bundles {CPU=9 in all} do not fit the alive nodes' total capacity in any arrangement")
	_, err = PlaceBundles(nodes[2:], bundles(t, "CPU=1"), Pack, nil)
	wantErrContains(t, err, ErrInfeasible, "no alive nodes to place the placement group on")
	if !strings.HasPrefix(err.Error(), "infeasible: ") {
		t.Errorf("error %q lacks the infeasible: prefix", err)
	}
}

func TestPendingMessages(t *testing.T) {
	t.Parallel()
	nodes := []Node{nd(t, "a", "CPU=4", "CPU=2"), nd(t, "b", "CPU=4", "CPU=2")}
	_, err := PlaceBundles(nodes, bundles(t, "CPU=2", "CPU=2", "CPU=2"), Pack, nil)
	wantErrContains(t, err, ErrPending, "every bundle fits somewhere alone, but not all 3 together in what is free now")
	if !strings.HasPrefix(err.Error(), "pending: ") {
		t.Errorf("error %q lacks the pending: prefix", err)
	}
	_, err = PlaceBundles(nodes, bundles(t, "CPU=1", "CPU=3"), Spread, nil)
	wantErrContains(t, err, ErrPending, "bundle 1 {CPU=3} does not fit in what is free now: needs CPU=3 but the most free on any eligible node is 2 (node a)")
	var pe *PendingError
	if !errors.As(err, &pe) || pe.Bundle != 1 {
		t.Fatalf("details = %#v", err)
	}
	// Stale reports above Total are capped.
	nodes = []Node{nd(t, "a", "CPU=1", "CPU=9")}
	_, err = PlaceBundles(nodes, bundles(t, "CPU=1", "CPU=1"), Pack, nil)
	wantErrContains(t, err, ErrInfeasible)
}

func TestPlaceBundlesDoesNotModifyInputs(t *testing.T) {
	t.Parallel()
	nodes := []Node{nd(t, "a", "CPU=4", "CPU=3"), nd(t, "b", "CPU=4", "")}
	bs := bundles(t, "CPU=2", "CPU=2", "CPU=2")
	snapN := cloneNodes(nodes)
	snapB := cloneSets(bs)
	for _, s := range PlacementStrategies {
		_, _ = PlaceBundles(nodes, bs, s, nil)
	}
	if !nodesEqual(nodes, snapN) || !setsEqual(bs, snapB) {
		t.Fatal("PlaceBundles modified its inputs")
	}
}

func cloneNodes(ns []Node) []Node {
	out := make([]Node, len(ns))
	for i, n := range ns {
		out[i] = n
		out[i].Total, out[i].Available = n.Total.Clone(), n.Available.Clone()
	}
	return out
}

func nodesEqual(a, b []Node) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Alive != b[i].Alive || !a[i].Total.Equal(b[i].Total) || !a[i].Available.Equal(b[i].Available) {
			return false
		}
	}
	return true
}

func setsEqual(a, b []ResourceSet) bool {
	return slices.EqualFunc(a, b, func(x, y ResourceSet) bool { return x.Equal(y) })
}

func TestPlaceBundlesKeepsCurrent(t *testing.T) {
	t.Parallel()
	// STRICT_SPREAD over a, b, c; c died. d is free: the moved bundle must
	// go there, not to a (which has more room) since a holds a bundle.
	nodes := []Node{nd(t, "a", "CPU=8", ""), nd(t, "b", "CPU=8", ""), {ID: "c", Total: rs(t, "CPU=8"), Alive: false}, nd(t, "d", "CPU=2", "")}
	bs := bundles(t, "CPU=1", "CPU=1", "CPU=1")
	got, err := PlaceBundles(nodes, bs, StrictSpread, []string{"a", "b", "c"})
	if err != nil || !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("re-place = %v, %v; want [a b d]", got, err)
	}
	// Without d: nowhere to go, ever (until a node joins).
	_, err = PlaceBundles(nodes[:3], bs, StrictSpread, []string{"a", "b", "c"})
	wantErrContains(t, err, ErrInfeasible, "only 0 alive nodes are eligible (2 more hold other bundles of the group)")
	// STRICT_PACK keeps the group on the kept bundles' node.
	got, err = PlaceBundles(nodes, bs, StrictPack, []string{"b", "", "b"})
	if err != nil || !slices.Equal(got, []string{"b", "b", "b"}) {
		t.Fatalf("strict pack re-place = %v, %v", got, err)
	}
	nodes[1].Available = ResourceSet{CPU: 0}
	_, err = PlaceBundles(nodes, bs, StrictPack, []string{"b", "", "b"})
	wantErrContains(t, err, ErrPending, "STRICT_PACK")
	// Whole group lost: placed afresh on one node.
	got, err = PlaceBundles(nodes, bs, StrictPack, []string{"c", "c", "c"})
	if err != nil || distinct(got) != 1 || got[0] == "c" {
		t.Fatalf("strict pack whole re-place = %v, %v", got, err)
	}
	// PACK prefers the node holding kept bundles.
	nodes[1].Available = rs(t, "CPU=6")
	got, err = PlaceBundles(nodes, bs, Pack, []string{"b", "c", "c"})
	if err != nil || !slices.Equal(got, []string{"b", "b", "b"}) {
		t.Fatalf("pack re-place = %v, %v", got, err)
	}
	// SPREAD prefers the others.
	got, err = PlaceBundles(nodes, bs[:2], Spread, []string{"b", "c"})
	if err != nil || got[1] == "b" || got[1] == "c" {
		t.Fatalf("spread re-place = %v, %v", got, err)
	}
	// Nothing to move.
	got, err = PlaceBundles(nodes, bs, Spread, []string{"a", "b", "d"})
	if err != nil || !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("no-op re-place = %v, %v", got, err)
	}
	_, err = PlaceBundles(nodes, bs, Spread, []string{"a"})
	wantErrContains(t, err, ErrInvalidBundle, "1 current assignments for 3 bundles")
}

func TestCheckStrategy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s     PlacementStrategy
		nodes []string
		want  string // "" for no error
	}{
		{StrictPack, []string{"a", "", "a"}, ""},
		{StrictPack, []string{"a", "b"}, "STRICT_PACK puts bundle 0 on a and bundle 1 on b"},
		// An unplaced first bundle (its node died) does not hide the others.
		{StrictPack, []string{"", "a", "b"}, "STRICT_PACK puts bundle 1 on a and bundle 2 on b"},
		{StrictSpread, []string{"a", "", "", "b"}, ""},
		{StrictSpread, []string{"a", "b", "a"}, "STRICT_SPREAD puts bundles 0 and 2 both on a"},
		{Pack, []string{"a", "a", "b"}, ""},
		{Spread, []string{"a", "a"}, ""},
	} {
		err := CheckStrategy(c.s, c.nodes)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s %v: %v", c.s, c.nodes, err)
			}
			continue
		}
		if !errors.Is(err, ErrReservation) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want ErrReservation saying %q", c.s, c.nodes, err, c.want)
		}
	}
}
