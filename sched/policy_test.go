package sched

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// render is a decision as "run a", "wait b", or the error's text.
func render(d Decision, err error) string {
	if err != nil {
		return err.Error()
	}
	return d.Outcome.String() + " " + d.Node
}

// labelled returns n with labels k=v pairs.
func labelled(n Node, kv ...string) Node {
	n.Labels = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Labels[kv[i]] = kv[i+1]
	}
	return n
}

func dead(n Node) Node { n.Alive = false; return n }

type policyCase struct {
	name  string
	nodes []Node
	local string
	req   Request
	want  string // render's text, or its prefix for errors
}

func runPolicyCases(t *testing.T, cases []policyCase) {
	t.Helper()
	for _, c := range cases {
		d, err := Decide(Snapshot{Nodes: c.nodes, Local: c.local}, c.req, rand.New(rand.NewPCG(1, 2)))
		if got := render(d, err); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func cpu(t *testing.T, n string) ResourceSet { return rs(t, "CPU="+n) }

func TestHybridPolicy(t *testing.T) {
	t.Parallel()
	idle := nd(t, "b", "CPU=4", "")
	half := nd(t, "c", "CPU=4", "CPU=2")
	runPolicyCases(t, []policyCase{
		{"local below threshold", []Node{nd(t, "a", "CPU=4", "CPU=3"), idle}, "a", Request{Demand: cpu(t, "1")}, "run a"},
		{"local at threshold, another below", []Node{nd(t, "a", "CPU=4", "CPU=2"), half, idle}, "a", Request{Demand: cpu(t, "1")}, "run b"},
		{"every node at threshold: pack local", []Node{nd(t, "a", "CPU=4", "CPU=2"), half}, "a", Request{Demand: cpu(t, "1")}, "run a"},
		{"local full: least loaded with room", []Node{nd(t, "a", "CPU=4", "CPU=0"), half, nd(t, "d", "CPU=4", "CPU=1")}, "a", Request{Demand: cpu(t, "1")}, "run c"},
		{"all full: wait here", []Node{nd(t, "a", "CPU=4", "CPU=0"), nd(t, "b", "CPU=4", "CPU=0")}, "a", Request{Demand: cpu(t, "1")}, "wait a"},
		{"local infeasible, all full: wait on another", []Node{nd(t, "a", "CPU=1", "CPU=0"), nd(t, "b", "CPU=4", "CPU=0")}, "a", Request{Demand: cpu(t, "2")}, "wait b"},
		{"local infeasible: one with room first", []Node{nd(t, "a", "CPU=1", ""), nd(t, "b", "CPU=4", "CPU=0"), nd(t, "c", "CPU=8", "CPU=2")}, "a", Request{Demand: cpu(t, "2")}, "run c"},
		{"dead nodes never chosen", []Node{nd(t, "a", "CPU=4", "CPU=0"), dead(idle)}, "a", Request{Demand: cpu(t, "1")}, "wait a"},
		{"stay: wait here though another has room", []Node{nd(t, "a", "CPU=4", "CPU=0"), idle}, "a", Request{Demand: cpu(t, "1"), Stay: true}, "wait a"},
		{"stay, local infeasible: moves on", []Node{nd(t, "a", "CPU=1", ""), idle}, "a", Request{Demand: cpu(t, "2"), Stay: true}, "run b"},
		{"veto: another node", []Node{nd(t, "a", "CPU=4", ""), idle}, "a", Request{Demand: cpu(t, "1"), Veto: "GPU devices: no"}, "run b"},
		{"veto and stay: infeasible", []Node{nd(t, "a", "CPU=4", ""), idle}, "a", Request{Demand: cpu(t, "1"), Veto: "GPU devices: no", Stay: true}, "infeasible: GPU devices: no"},
		{"veto and alone: infeasible", []Node{nd(t, "a", "CPU=4", "")}, "a", Request{Demand: cpu(t, "1"), Veto: "GPU devices: no"}, "infeasible: GPU devices: no"},
		{"no local (an actor's owner gone)", []Node{half, idle}, "", Request{Demand: cpu(t, "1")}, "run b"},
		{"missing resource named", []Node{nd(t, "a", "CPU=4", ""), idle}, "a", Request{Demand: rs(t, "TPU=1")}, `infeasible: no alive node has resource "TPU" (requested 1)`},
		{"too much of one", []Node{nd(t, "a", "CPU=4", ""), idle}, "a", Request{Demand: cpu(t, "5")}, "infeasible: no single node has CPU 5: the most any alive node has is 4"},
		{"not together", []Node{nd(t, "a", "CPU=4", ""), nd(t, "b", "GPU=1", "")}, "a", Request{Demand: rs(t, "CPU=1,GPU=1")}, "infeasible: no single alive node has all of"},
	})
}

func TestCriticalLoad(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		total, avail string
		want         float64
	}{
		{"CPU=4", "CPU=4", 0},
		{"CPU=4,GPU=2", "CPU=4,GPU=1", 0.5},
		{"CPU=4,memory=100", "CPU=1,memory=100", 0.75},
		{"X=4", "X=0", 0},            // custom resources do not count
		{"CPU=4", "CPU=8", 0},        // a stale report above the total
		{"CPU=4,GPU=1", "", 1},       // nothing reported free
		{"CPU=0.5", "CPU=0.25", 0.5}, // fractions
	} {
		avail := ResourceSet{}
		if c.avail != "" {
			avail = rs(t, c.avail)
		}
		if got := criticalLoad(rs(t, c.total), avail); got != c.want {
			t.Errorf("criticalLoad(%s, %s) = %v, want %v", c.total, c.avail, got, c.want)
		}
	}
}

func TestSpreadPolicy(t *testing.T) {
	t.Parallel()
	nodes := []Node{nd(t, "c", "CPU=4", ""), nd(t, "a", "CPU=4", "CPU=0"), nd(t, "b", "CPU=1", ""), dead(nd(t, "d", "CPU=4", ""))}
	s := Snapshot{Nodes: nodes, Local: "a"}
	var got []string
	for range 5 {
		d, err := Decide(s, Request{Demand: cpu(t, "1"), Strategy: Strategy{Kind: StrategySpread}}, nil)
		got = append(got, render(d, err))
		s.SpreadNext = d.SpreadNext
	}
	// ID order, dead d left out, a busy node waited on rather than skipped.
	if want := "wait a|run b|run c|wait a|run b"; strings.Join(got, "|") != want {
		t.Fatalf("five SPREAD decisions: %v, want %s", got, want)
	}
	runPolicyCases(t, []policyCase{
		{"only feasible nodes", nodes, "a", Request{Demand: cpu(t, "2"), Strategy: Strategy{Kind: StrategySpread}}, "wait a"},
		{"stay keeps it here", nodes, "b", Request{Demand: cpu(t, "1"), Strategy: Strategy{Kind: StrategySpread}, Stay: true}, "run b"},
		{"none feasible", nodes, "a", Request{Demand: cpu(t, "8"), Strategy: Strategy{Kind: StrategySpread}}, "infeasible: no single node has CPU 8"},
	})
}

func TestNodeAffinityPolicy(t *testing.T) {
	t.Parallel()
	nodes := []Node{nd(t, "a", "CPU=4", ""), labelled(nd(t, "b", "CPU=4", "CPU=0"), "zone", "r2"), dead(nd(t, "c", "CPU=4", ""))}
	hard := func(node string) Strategy { return Strategy{Kind: StrategyNodeAffinity, Node: node} }
	soft := func(node string) Strategy { return Strategy{Kind: StrategyNodeAffinity, Node: node, Soft: true} }
	runPolicyCases(t, []policyCase{
		{"hard, busy target: wait there", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: hard("b")}, "wait b"},
		{"hard to local, busy: wait here", nodes, "b", Request{Demand: cpu(t, "1"), Strategy: hard("b")}, "wait b"},
		{"soft to local, busy: wait here", nodes, "b", Request{Demand: cpu(t, "1"), Strategy: soft("b")}, "wait b"},
		{"hard, stay elsewhere: still the target", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: hard("b"), Stay: true}, "wait b"},
		{"soft, stay elsewhere: here", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: soft("b"), Stay: true}, "run a"},
		{"hard, dead target", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: hard("c")}, "infeasible: node affinity: node c is not alive"},
		{"hard, unknown target", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: hard("zz")}, "infeasible: node affinity: node zz is not alive"},
		{"hard, target too small", nodes, "a", Request{Demand: cpu(t, "5"), Strategy: hard("b")}, "infeasible: node affinity: node b has CPU 4 in total, the demand needs 5"},
		{"hard, target's labels", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: Strategy{Kind: StrategyNodeAffinity, Node: "b", Labels: LabelSelector{"zone": In("r1")}}},
			`infeasible: node affinity: node b does not match labels zone in (r1) (label zone="r2" does not satisfy in (r1))`},
		{"hard, local vetoes", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: hard("a"), Veto: "GPU devices: no"}, "infeasible: node affinity: node a: GPU devices: no"},
		{"soft, dead target: hybrid", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: soft("c")}, "run a"},
		{"soft, too small target: hybrid", nodes, "b", Request{Demand: cpu(t, "1"), Strategy: soft("zz")}, "run a"},
	})
}

func TestLabelSelectorsHoldWithEveryStrategy(t *testing.T) {
	t.Parallel()
	nodes := []Node{labelled(nd(t, "a", "CPU=4", ""), "zone", "r1"), labelled(nd(t, "b", "CPU=4", ""), "zone", "r2")}
	r2 := LabelSelector{"zone": In("r2")}
	for _, kind := range []StrategyKind{StrategyHybrid, StrategySpread} {
		runPolicyCases(t, []policyCase{
			{string(kind) + " in r2", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: Strategy{Kind: kind, Labels: r2}}, "run b"},
			{string(kind) + " stay, local unmatched", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: Strategy{Kind: kind, Labels: r2}, Stay: true}, "run b"},
			{string(kind) + " no match", nodes, "a", Request{Demand: cpu(t, "1"), Strategy: Strategy{Kind: kind, Labels: LabelSelector{"zone": In("r9")}}},
				`infeasible: no alive node matches labels zone in (r9) (node a: label zone="r1" does not satisfy in (r9); node b: label zone="r2"`},
			{string(kind) + " matching nodes too small", nodes, "a", Request{Demand: cpu(t, "5"), Strategy: Strategy{Kind: kind, Labels: r2}}, "infeasible: no single node has CPU 5"},
		})
	}
}

// TestNodeLabelPolicy is Ray's NodeLabelSchedulingStrategy: hard labels
// filter, soft labels are preferred, a free node before a matching busy
// one, and a soft label no node has falls back to the hard-label nodes.
func TestNodeLabelPolicy(t *testing.T) {
	t.Parallel()
	gpuA := labelled(nd(t, "a", "CPU=4", ""), "zone", "r1", "gpu", "a100")
	gpuB := labelled(nd(t, "b", "CPU=4", ""), "zone", "r1", "gpu", "h100")
	plain := labelled(nd(t, "c", "CPU=4", ""), "zone", "r2")
	busy := func(n Node) Node { n.Available = cpu(t, "0"); return n }
	st := func(hard, soft LabelSelector) Strategy { return Strategy{Labels: hard, SoftLabels: soft} }
	h100 := LabelSelector{"gpu": In("h100")}
	r1 := LabelSelector{"zone": In("r1")}
	runPolicyCases(t, []policyCase{
		{"soft match chosen over local", []Node{gpuA, gpuB, plain}, "a", Request{Demand: cpu(t, "1"), Strategy: st(nil, h100)}, "run b"},
		{"soft match busy: a free node", []Node{gpuA, busy(gpuB), plain}, "b", Request{Demand: cpu(t, "1"), Strategy: st(nil, h100)}, "run a"},
		{"hard filters before soft", []Node{gpuA, busy(gpuB), plain}, "c", Request{Demand: cpu(t, "1"), Strategy: st(r1, LabelSelector{"zone": In("r2")})}, "run a"},
		{"nothing free: wait on the soft match", []Node{busy(gpuA), busy(gpuB), busy(plain)}, "a", Request{Demand: cpu(t, "1"), Strategy: st(nil, h100)}, "wait b"},
		{"soft label nobody has: any free", []Node{busy(gpuA), gpuB, busy(plain)}, "a", Request{Demand: cpu(t, "1"), Strategy: st(nil, LabelSelector{"gpu": In("tpu")})}, "run b"},
		{"hard label nobody has: infeasible", []Node{gpuA, gpuB}, "a", Request{Demand: cpu(t, "1"), Strategy: st(LabelSelector{"zone": In("r9")}, h100)}, "infeasible: no alive node matches labels zone in (r9)"},
	})
	if err := (Strategy{Kind: StrategySpread, SoftLabels: h100}).Validate(); err == nil || !strings.Contains(err.Error(), "DEFAULT") {
		t.Errorf("soft labels with SPREAD: %v, want refused naming DEFAULT", err)
	}
	if err := (Strategy{SoftLabels: LabelSelector{"gpu": {Op: OpIn}}}).Validate(); err == nil || !strings.Contains(err.Error(), "soft labels") {
		t.Errorf("soft In without values: %v, want refused naming soft labels", err)
	}
}

func TestBundlePolicy(t *testing.T) {
	t.Parallel()
	nodes := []Node{nd(t, "a", "CPU=4", ""), nd(t, "b", "CPU=4", ""), dead(nd(t, "c", "CPU=4", ""))}
	pgDemand := PlacementGroupDemand("pg1", 0, cpu(t, "1"))
	bundle := func(nodes ...string) *BundleNodes {
		return &BundleNodes{Group: "pg1", Nodes: nodes, Reason: "placement group pg1 is PENDING: waiting"}
	}
	runPolicyCases(t, []policyCase{
		{"the bundle's node", nodes, "a", Request{Demand: pgDemand, Bundle: bundle("b")}, "wait b"},
		{"dead bundle nodes skipped", nodes, "a", Request{Demand: pgDemand, Bundle: bundle("c", "b")}, "wait b"},
		{"local too small: the other", nodes, "a", Request{Demand: pgDemand, Bundle: bundle("a", "b"), Veto: "too small"}, "wait b"},
		{"local too small, alone", nodes, "a", Request{Demand: pgDemand, Bundle: bundle("a"), Veto: "too small"}, "infeasible: too small"},
		{"group not placed", nodes, "a", Request{Demand: pgDemand, Bundle: &BundleNodes{Group: "pg1", Reason: "placement group pg1 is PENDING: waiting"}}, "pending: placement group pg1 is PENDING"},
		{"every bundle node dead", nodes, "a", Request{Demand: pgDemand, Bundle: &BundleNodes{Group: "pg1", Nodes: []string{"c"}}}, "pending: placement group pg1: the nodes holding its bundle are not alive"},
		{"an actor's owner holds it", nodes, "b", Request{Demand: pgDemand, Bundle: bundle("a", "b")}, "wait a"},
	})
}

func TestMoveTarget(t *testing.T) {
	t.Parallel()
	nodes := []Node{nd(t, "a", "CPU=4", "CPU=0"), nd(t, "b", "CPU=4", "CPU=1"), nd(t, "c", "CPU=4", "CPU=3"), nd(t, "d", "CPU=2", "CPU=1")}
	s := Snapshot{Nodes: nodes, Local: "a"}
	for _, c := range []struct {
		name string
		req  Request
		want string // "" for no move
	}{
		{"least loaded with room", Request{Demand: cpu(t, "1")}, "c"},
		{"spread moves too", Request{Demand: cpu(t, "2"), Strategy: Strategy{Kind: StrategySpread}}, "c"},
		{"soft affinity moves", Request{Demand: cpu(t, "1"), Strategy: Strategy{Kind: StrategyNodeAffinity, Node: "a", Soft: true}}, "c"},
		{"hard affinity stays", Request{Demand: cpu(t, "1"), Strategy: Strategy{Kind: StrategyNodeAffinity, Node: "a"}}, ""},
		{"placement-group demand stays", Request{Demand: PlacementGroupDemand("pg1", -1, cpu(t, "1"))}, ""},
		{"nowhere with room", Request{Demand: cpu(t, "4")}, ""},
	} {
		got, ok := MoveTarget(s, c.req, nil)
		if ok != (c.want != "") || got != c.want {
			t.Errorf("%s: MoveTarget = %q, %v; want %q", c.name, got, ok, c.want)
		}
	}
}

func TestStrategyValidate(t *testing.T) {
	t.Parallel()
	if err := (Strategy{Kind: "PACK"}).Validate(); err == nil || !strings.Contains(err.Error(), `"PACK"`) {
		t.Fatalf("unknown kind: %v", err)
	}
	if err := (Strategy{Labels: LabelSelector{"zone": {Op: "near"}}}).Validate(); err == nil || !strings.Contains(err.Error(), "near") {
		t.Fatalf("bad labels: %v", err)
	}
	if err := (Strategy{Kind: StrategySpread}).Validate(); err != nil {
		t.Fatal(err)
	}
}
