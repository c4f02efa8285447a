package sched

import (
	"errors"
	"testing"
)

func withLabels(n Node, kv ...string) Node {
	n.Labels = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Labels[kv[i]] = kv[i+1]
	}
	return n
}

func TestHybridPrefersLocalUnderThreshold(t *testing.T) {
	nodes := []Node{
		nd(t, "local", "CPU=8", "CPU=6"), // 25% used: under 0.5
		nd(t, "other", "CPU=8", ""),      // idle
	}
	var s Selector
	if s.SpreadThreshold() != 0.5 {
		t.Fatalf("default threshold %v, want 0.5", s.SpreadThreshold())
	}
	got, err := s.Select(nodes, rs(t, "CPU=1"), TaskStrategy{}, "local")
	if err != nil || got != "local" {
		t.Fatalf("under threshold: %q, %v; want local", got, err)
	}
	// Over the threshold: spill to a node still under it.
	nodes[0].Available = rs(t, "CPU=2") // 75% used
	got, err = s.Select(nodes, rs(t, "CPU=1"), TaskStrategy{}, "local")
	if err != nil || got != "other" {
		t.Fatalf("over threshold: %q, %v; want other", got, err)
	}
	// Everyone over it: the least utilized, local only if no worse.
	nodes = append(nodes, nd(t, "third", "CPU=10", "CPU=4")) // 60%
	nodes[1].Available = rs(t, "CPU=1")                      // 87.5%
	got, _ = s.Select(nodes, rs(t, "CPU=1"), TaskStrategy{}, "local")
	if got != "third" {
		t.Fatalf("all over threshold: %q, want third (least utilized)", got)
	}
	// Under threshold, ties among remote nodes go by ID (packing).
	nodes = []Node{nd(t, "local", "CPU=1", "CPU=0"), nd(t, "b", "CPU=8", ""), nd(t, "a", "CPU=8", "CPU=7")}
	got, _ = s.Select(nodes, rs(t, "CPU=1"), TaskStrategy{}, "local")
	if got != "a" {
		t.Fatalf("local full: %q, want a (first under threshold)", got)
	}
	// Memory and object store memory count too, GPU does not.
	nodes = []Node{
		{ID: "local", Alive: true, Total: rs(t, "CPU=8,memory=100,GPU=1"), Available: rs(t, "CPU=8,memory=10,GPU=0")},
		nd(t, "other", "CPU=8,memory=100", ""),
	}
	got, _ = s.Select(nodes, rs(t, "CPU=1"), TaskStrategy{}, "local")
	if got != "other" {
		t.Fatalf("local memory 90%% used: %q, want other", got)
	}
}

func TestHybridThresholdOne(t *testing.T) {
	s := NewSelector(1)
	nodes := []Node{nd(t, "local", "CPU=8", "CPU=1"), nd(t, "other", "CPU=8", "")}
	got, err := s.Select(nodes, rs(t, "CPU=1"), TaskStrategy{}, "local")
	if err != nil || got != "local" {
		t.Fatalf("threshold 1: %q, %v; want local until full", got, err)
	}
	if NewSelector(-3).SpreadThreshold() != 0 || NewSelector(7).SpreadThreshold() != 1 {
		t.Fatal("threshold not clamped to [0, 1]")
	}
}

func TestHybridPendingQueuesLocally(t *testing.T) {
	nodes := []Node{nd(t, "local", "CPU=4", "CPU=0"), nd(t, "other", "CPU=4", "CPU=0.5")}
	got, err := SelectNode(nodes, rs(t, "CPU=1"), TaskStrategy{}, "local")
	wantErrContains(t, err, ErrPending, "no eligible node has room for {CPU=1} now: needs CPU=1 but the most free on any eligible node is 0.5 (node other); waiting on node other")
	// local is 100% used, other 87.5%: other is better, so queue there.
	var pe *PendingError
	if got != "other" || !errors.As(err, &pe) || pe.Node != "other" || pe.Free != 5000 {
		t.Fatalf("pending at %q, %#v", got, err)
	}
	nodes[1].Available = rs(t, "CPU=0")
	got, _ = SelectNode(nodes, rs(t, "CPU=1"), TaskStrategy{}, "local")
	if got != "local" {
		t.Fatalf("both full: queue at %q, want local", got)
	}
}

func TestSpreadRoundRobin(t *testing.T) {
	nodes := []Node{nd(t, "a", "CPU=4", ""), nd(t, "b", "CPU=4", ""), nd(t, "c", "CPU=4", "")}
	var s Selector
	seen := map[string]int{}
	for range 6 {
		id, err := s.Select(nodes, rs(t, "CPU=1"), TaskStrategy{Kind: StrategySpread}, "a")
		if err != nil {
			t.Fatal(err)
		}
		seen[id]++
	}
	if len(seen) != 3 || seen["a"] != 2 {
		t.Fatalf("SPREAD over idle nodes: %v, want each twice", seen)
	}
	nodes[0].Available = rs(t, "CPU=1")
	nodes[1].Available = rs(t, "CPU=2")
	for range 3 {
		if id, _ := s.Select(nodes, rs(t, "CPU=1"), TaskStrategy{Kind: StrategySpread}, "a"); id != "c" {
			t.Fatalf("SPREAD chose %q, want the least loaded c", id)
		}
	}
}

func TestNodeAffinity(t *testing.T) {
	nodes := []Node{
		nd(t, "a", "CPU=4", ""),
		nd(t, "busy", "CPU=4", "CPU=0"),
		{ID: "dead", Total: rs(t, "CPU=4"), Alive: false},
		nd(t, "small", "CPU=1", ""),
	}
	hard := func(id string) TaskStrategy { return TaskStrategy{Kind: StrategyNodeAffinity, NodeID: id} }
	soft := func(id string) TaskStrategy { return TaskStrategy{Kind: StrategyNodeAffinity, NodeID: id, Soft: true} }
	one := rs(t, "CPU=2")

	if got, err := SelectNode(nodes, one, hard("a"), "small"); err != nil || got != "a" {
		t.Fatalf("hard to a: %q %v", got, err)
	}
	_, err := SelectNode(nodes, one, hard("dead"), "a")
	wantErrContains(t, err, ErrInfeasible, "node affinity: node dead is not alive")
	_, err = SelectNode(nodes, one, hard("nope"), "a")
	wantErrContains(t, err, ErrInfeasible, "node affinity: node nope is not a known node")
	_, err = SelectNode(nodes, one, hard("small"), "a")
	wantErrContains(t, err, ErrInfeasible, "node affinity: node small can never run {CPU=2}: it has CPU=1 in total, needs 2")
	var ie *InfeasibleError
	if !errors.As(err, &ie) || ie.Resource != CPU || ie.Most != Unit {
		t.Fatalf("details %#v", err)
	}
	got, err := SelectNode(nodes, one, hard("busy"), "a")
	wantErrContains(t, err, ErrPending, "node affinity: node busy has CPU=0 free now, needs 2; waiting there")
	if got != "busy" {
		t.Fatalf("hard busy: wait at %q, want busy", got)
	}

	// Soft: fall back when dead or never able; wait when busy unless
	// SpillOnUnavailable.
	if got, err := SelectNode(nodes, one, soft("dead"), "a"); err != nil || got != "a" {
		t.Fatalf("soft dead: %q %v; want fallback to local a", got, err)
	}
	if got, err := SelectNode(nodes, one, soft("small"), "a"); err != nil || got != "a" {
		t.Fatalf("soft small: %q %v", got, err)
	}
	if got, err := SelectNode(nodes, one, soft("busy"), "a"); !errors.Is(err, ErrPending) || got != "busy" {
		t.Fatalf("soft busy: %q %v; want pending at busy", got, err)
	}
	st := soft("busy")
	st.SpillOnUnavailable = true
	if got, err := SelectNode(nodes, one, st, "a"); err != nil || got != "a" {
		t.Fatalf("soft busy spill: %q %v", got, err)
	}
	// Hard affinity with labels that the target fails.
	st = hard("a")
	st.Labels = LabelSelector{"zone": In("z1")}
	_, err = SelectNode(nodes, one, st, "a")
	wantErrContains(t, err, ErrInfeasible, "node affinity: node a does not match the label selector: label zone is missing (wanted in (z1))")
}

func TestLabelSelectors(t *testing.T) {
	nodes := []Node{
		withLabels(nd(t, "r1", "CPU=4", ""), "zone", "rack1"),
		withLabels(nd(t, "r2", "CPU=4", "CPU=1"), "zone", "rack2", "spot", "true"),
		withLabels(nd(t, "r3", "CPU=4", ""), "zone", "rack3"),
		nd(t, "nolabel", "CPU=4", ""),
	}
	cases := []struct {
		sel  LabelSelector
		want string
	}{
		{LabelSelector{"zone": In("rack2", "rack3")}, "r3"}, // r3 less utilized than r2
		{LabelSelector{"zone": In("rack2")}, "r2"},
		{LabelSelector{"zone": NotIn("rack1", "rack3"), "spot": DoesNotExist()}, "nolabel"},
		{LabelSelector{"spot": Exists()}, "r2"},
		{LabelSelector{"zone": Exists(), "spot": DoesNotExist()}, "r1"},
	}
	for _, c := range cases {
		for _, kind := range []TaskStrategyKind{StrategyNodeLabel, StrategyDefault, ""} {
			got, err := SelectNode(nodes, rs(t, "CPU=1"), TaskStrategy{Kind: kind, Labels: c.sel}, "")
			if err != nil || got != c.want {
				t.Errorf("%s %v: %q, %v; want %q", kind, c.sel, got, err, c.want)
			}
		}
	}
	_, err := SelectNode(nodes, rs(t, "CPU=1"), TaskStrategy{Kind: StrategyNodeLabel, Labels: LabelSelector{"zone": In("rack9")}}, "")
	wantErrContains(t, err, ErrInfeasible, "no node can ever run {CPU=1} (4 nodes rejected by labels (e.g. nolabel: label zone is missing (wanted in (rack9))))")
	_, err = SelectNode(nodes, rs(t, "CPU=8"), TaskStrategy{Labels: LabelSelector{"zone": In("rack1")}}, "")
	wantErrContains(t, err, ErrInfeasible, "needs CPU=8 but the most in total on any eligible node is 4 (node r1)", "3 nodes rejected by labels", "1 node rejected by capacity")
	// Soft labels: prefer, never require.
	got, err := SelectNode(nodes, rs(t, "CPU=1"), TaskStrategy{Kind: StrategyNodeLabel, SoftLabels: LabelSelector{"zone": In("rack2")}}, "")
	if err != nil || got != "r2" {
		t.Fatalf("soft labels: %q %v; want r2", got, err)
	}
	got, err = SelectNode(nodes, rs(t, "CPU=2"), TaskStrategy{Kind: StrategyNodeLabel, SoftLabels: LabelSelector{"zone": In("rack2")}}, "")
	if err != nil || got == "r2" {
		t.Fatalf("soft labels, r2 full: %q %v; want another node", got, err)
	}
	var sel LabelSelector
	if ok, _ := sel.Matches(nil); !ok {
		t.Fatal("nil selector should match")
	}
}

func TestAcceleratorType(t *testing.T) {
	nodes := []Node{
		nd(t, "cpu", "CPU=64", ""),
		nd(t, "a100", "CPU=8,GPU=8,accelerator_type:A100=1", ""),
		nd(t, "h100", "CPU=8,GPU=8,accelerator_type:H100=1", "CPU=8,GPU=2,accelerator_type:H100=1"),
	}
	d := WithAcceleratorType(rs(t, "GPU=1"), "H100")
	if d[AcceleratorTypeResource("H100")] != 10 || d.String() != "GPU=1, accelerator_type:H100=0.001" {
		t.Fatalf("demand %s", d)
	}
	if got, err := SelectNode(nodes, d, TaskStrategy{}, "cpu"); err != nil || got != "h100" {
		t.Fatalf("H100 demand: %q %v", got, err)
	}
	_, err := SelectNode(nodes, WithAcceleratorType(rs(t, "GPU=1"), "TPU-v4"), TaskStrategy{}, "cpu")
	wantErrContains(t, err, ErrInfeasible, `no eligible alive node has accelerator type "TPU-v4" in total (resource accelerator_type:TPU-v4)`,
		`3 nodes rejected by capacity (e.g. a100: has no accelerator of type "TPU-v4")`)
	_, err = SelectNode(nodes, WithAcceleratorType(rs(t, "GPU=4"), "H100"), TaskStrategy{}, "cpu")
	wantErrContains(t, err, ErrPending, "needs GPU=4 but the most free on any eligible node is 2 (node h100)")
}

func TestSelectValidation(t *testing.T) {
	nodes := []Node{nd(t, "a", "CPU=1", "")}
	cases := []struct {
		st     TaskStrategy
		target error
		part   string
	}{
		{TaskStrategy{Kind: "RANDOM"}, ErrInvalidTaskStrategy, `"RANDOM": accepted are DEFAULT, SPREAD, NODE_AFFINITY, NODE_LABEL`},
		{TaskStrategy{Kind: StrategyNodeAffinity}, ErrInvalidTaskStrategy, "NODE_AFFINITY needs a node ID"},
		{TaskStrategy{Labels: LabelSelector{"zone": In()}}, ErrInvalidLabelSelector, `label "zone": operator in needs at least one value`},
		{TaskStrategy{SoftLabels: LabelSelector{"zone": {Op: "like"}}}, ErrInvalidLabelSelector, `soft labels: invalid label selector: label "zone": unknown operator "like"`},
		{TaskStrategy{Labels: LabelSelector{"": Exists()}}, ErrInvalidLabelSelector, "empty label key"},
	}
	for _, c := range cases {
		_, err := SelectNode(nodes, nil, c.st, "")
		wantErrContains(t, err, c.target, c.part)
	}
	_, err := SelectNode(nodes, ResourceSet{CPU: -1}, TaskStrategy{}, "")
	wantErrContains(t, err, ErrInvalidQuantity, `resource "CPU": negative amount`)
	_, err = SelectNode(nil, rs(t, "CPU=1"), TaskStrategy{}, "")
	wantErrContains(t, err, ErrInfeasible, "no node can ever run {CPU=1}: there are no nodes")
	_, err = SelectNode([]Node{{ID: "x", Total: rs(t, "CPU=1")}}, rs(t, "CPU=1"), TaskStrategy{}, "")
	wantErrContains(t, err, ErrInfeasible, "(1 node not alive)")
	if got, err := SelectNode(nodes, nil, TaskStrategy{}, ""); err != nil || got != "a" {
		t.Fatalf("empty demand: %q %v", got, err)
	}
	for in, want := range map[string]TaskStrategyKind{"": StrategyDefault, "spread": StrategySpread, " NODE_AFFINITY": StrategyNodeAffinity} {
		if got, err := ParseTaskStrategyKind(in); err != nil || got != want {
			t.Errorf("ParseTaskStrategyKind(%q) = %q %v", in, got, err)
		}
	}
}

func TestCriticalUtilization(t *testing.T) {
	n := Node{Total: rs(t, "CPU=4,memory=100,object_store_memory=10,GPU=4"), Available: rs(t, "CPU=3,memory=50,object_store_memory=10,GPU=0")}
	if u := n.CriticalUtilization(); u != 0.5 {
		t.Fatalf("utilization %v, want 0.5 (memory; GPU ignored as in Ray)", u)
	}
	if u := (&Node{Total: rs(t, "TPU=4")}).CriticalUtilization(); u != 0 {
		t.Fatalf("no critical resources: %v", u)
	}
}
