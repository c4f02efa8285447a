package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Property tests of Decide over seeded random clusters (randomNodes, with
// random zone labels) and requests; every failure names the seed and case.

var propSelectors = []LabelSelector{nil, {"zone": In("r1")}, {"zone": NotIn("r2")}, {"zone": Exists()}, {"zone": In("r1", "r3")}}

func randomPolicyCase(r *rand.Rand) (Snapshot, Request) {
	nodes := randomNodes(r, 1+r.IntN(12))
	for i := range nodes {
		if z := r.IntN(4); z > 0 {
			nodes[i].Labels = map[string]string{"zone": fmt.Sprintf("r%d", z)}
		}
	}
	s := Snapshot{Nodes: nodes, SpreadNext: r.IntN(5)}
	if r.IntN(5) != 0 {
		s.Local = nodes[r.IntN(len(nodes))].ID
	}
	demand := ResourceSet{CPU: Quantity(r.IntN(9)) * Unit / 2}
	if r.IntN(3) == 0 {
		demand[propResources[1+r.IntN(len(propResources)-1)]] = Quantity(1+r.IntN(4)) * Unit / 2
	}
	req := Request{Demand: demand, Stay: r.IntN(4) == 0,
		Strategy: Strategy{Kind: []StrategyKind{StrategyHybrid, StrategySpread, StrategyNodeAffinity}[r.IntN(3)],
			Labels: propSelectors[r.IntN(len(propSelectors))]}}
	if req.Strategy.Kind == StrategyNodeAffinity {
		req.Strategy.Node, req.Strategy.Soft = fmt.Sprintf("n%d", r.IntN(len(nodes)+1)), r.IntN(2) == 0
	}
	if r.IntN(6) == 0 {
		req.Veto = "vetoed"
	}
	return s, req
}

// fitsNode is the specification of feasibility: alive, labels, totals,
// and not the vetoed Local.
func fitsNode(s Snapshot, r Request, n *Node) bool {
	ok, _ := r.Strategy.Labels.Matches(n.Labels)
	return n.Alive && ok && n.Total.Covers(r.Demand) && !(n.ID == s.Local && r.Veto != "")
}

func findNode(s Snapshot, id string) *Node {
	for i := range s.Nodes {
		if s.Nodes[i].ID == id {
			return &s.Nodes[i]
		}
	}
	return nil
}

func TestPropertyDecide(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(propSeed, 11))
	for i := range 20000 {
		s, req := randomPolicyCase(r)
		d, err := Decide(s, req, rand.New(rand.NewPCG(uint64(i), 3)))
		fail := func(format string, a ...any) {
			t.Helper()
			t.Fatalf("seed %d case %d: %s\nsnapshot %+v\nrequest %+v\ndecision %+v, %v", propSeed, i, fmt.Sprintf(format, a...), s, req, d, err)
		}
		hard := req.Strategy.Kind == StrategyNodeAffinity && !req.Strategy.Soft
		anyFits, anyFree := false, false
		for j := range s.Nodes {
			if n := &s.Nodes[j]; fitsNode(s, req, n) && (!hard || n.ID == req.Strategy.Node) {
				anyFits = true
				anyFree = anyFree || n.Available.Covers(req.Demand)
			}
		}
		if req.Stay && req.Veto != "" {
			anyFits = false
		}
		if err != nil {
			if !errors.Is(err, ErrInfeasible) {
				fail("error %v is not ErrInfeasible", err)
			}
			if anyFits {
				fail("infeasible although a node fits")
			}
			continue
		}
		if !anyFits {
			fail("a decision although no node fits")
		}
		n := findNode(s, d.Node)
		switch {
		case n == nil || !fitsNode(s, req, n):
			fail("chose %s, which cannot hold the demand", d.Node)
		case hard && d.Node != req.Strategy.Node:
			fail("hard affinity to %s chose %s", req.Strategy.Node, d.Node)
		case (d.Outcome == Run) != n.Available.Covers(req.Demand):
			fail("outcome %s for a node whose free resources %s vs demand %s", d.Outcome, n.Available, req.Demand)
		case req.Strategy.Kind == StrategyHybrid && !req.Stay && d.Outcome == Wait && anyFree:
			fail("hybrid waits although a feasible node has the demand free")
		}
		local := findNode(s, s.Local)
		if req.Stay && local != nil && fitsNode(s, req, local) && (!hard || s.Local == req.Strategy.Node) && d.Node != s.Local {
			fail("a Stay request left a Local that can hold it")
		}
		if req.Strategy.Kind == StrategyHybrid && local != nil && fitsNode(s, req, local) && local.Available.Covers(req.Demand) &&
			criticalLoad(local.Total, local.Available) < SpreadThreshold && d.Node != s.Local {
			fail("hybrid left a Local below the threshold with the demand free")
		}
	}
}

// k consecutive SPREAD decisions over n feasible nodes give each
// ⌊k/n⌋ or ⌈k/n⌉ of them, whatever the starting position.
func TestPropertySpreadIsEven(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(propSeed, 12))
	for i := range 2000 {
		s, req := randomPolicyCase(r)
		req.Strategy.Kind, req.Stay = StrategySpread, false
		var feasible []string
		for j := range s.Nodes {
			if fitsNode(s, req, &s.Nodes[j]) && !slices.Contains(feasible, s.Nodes[j].ID) {
				feasible = append(feasible, s.Nodes[j].ID)
			}
		}
		if len(feasible) == 0 || req.Veto != "" {
			continue
		}
		k := 1 + r.IntN(30)
		count := map[string]int{}
		for range k {
			d, err := Decide(s, req, nil)
			if err != nil {
				t.Fatalf("seed %d case %d: %v", propSeed, i, err)
			}
			count[d.Node]++
			s.SpreadNext = d.SpreadNext
		}
		lo, hi := k/len(feasible), (k+len(feasible)-1)/len(feasible)
		for _, id := range feasible {
			if c := count[id]; c < lo || c > hi {
				t.Fatalf("seed %d case %d: %d picks over %d feasible nodes gave %s %d (want %d to %d): %v", propSeed, i, k, len(feasible), id, c, lo, hi, count)
			}
		}
	}
}

// Once it leaves Local, the hybrid policy picks among the k least-loaded
// nodes of the best tier (below the threshold with the demand free, else
// with it free, else feasible), k = max(1, 20% of the nodes), and on
// large clusters does not always pick the same one.
func TestPropertyHybridTopK(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(propSeed, 13))
	varied := 0
	for i := range 300 {
		s := Snapshot{Nodes: randomNodes(r, 10+r.IntN(40))}
		req := Request{Demand: ResourceSet{CPU: Unit / 2}}
		var tiers [3][]float64
		for j := range s.Nodes {
			n := &s.Nodes[j]
			if !fitsNode(s, req, n) {
				continue
			}
			load := criticalLoad(n.Total, n.Available)
			free := n.Available.Covers(req.Demand)
			if free && load < SpreadThreshold {
				tiers[0] = append(tiers[0], load)
			}
			if free {
				tiers[1] = append(tiers[1], load)
			}
			tiers[2] = append(tiers[2], load)
		}
		tier := slices.IndexFunc(tiers[:], func(l []float64) bool { return len(l) > 0 })
		if tier < 0 {
			continue
		}
		loads := tiers[tier]
		slices.Sort(loads)
		k := min(max(1, len(s.Nodes)/5), len(loads))
		seen := map[string]bool{}
		for seed := range 20 {
			d, err := Decide(s, req, rand.New(rand.NewPCG(uint64(seed), 5)))
			if err != nil {
				t.Fatalf("seed %d case %d: %v", propSeed, i, err)
			}
			n := findNode(s, d.Node)
			if l := criticalLoad(n.Total, n.Available); l > loads[k-1] {
				t.Fatalf("seed %d case %d: chose %s with load %v, beyond the %d best of tier %d %v", propSeed, i, d.Node, l, k, tier, loads)
			}
			seen[d.Node] = true
		}
		if len(seen) > 1 {
			varied++
		}
	}
	if varied == 0 {
		t.Fatal("the hybrid policy never varied its choice among its top k nodes")
	}
}
