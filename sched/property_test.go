package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
)

// Property tests: seeded random clusters, bundles and strategies. Each
// failure prints the seed and case number; rerun with the same seed
// (NODEUP_PROP_SEED=<n> go test -run Property ./sched/ tries another one).

var propSeed = func() uint64 {
	if s, err := strconv.ParseUint(os.Getenv("NODEUP_PROP_SEED"), 10, 64); err == nil {
		return s
	}
	return 20240607
}()

var propResources = []string{CPU, GPU, "X", Memory}

func randomNodes(r *rand.Rand, n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		total := ResourceSet{}
		avail := ResourceSet{}
		for _, k := range propResources {
			if r.IntN(3) == 0 && k != CPU {
				continue
			}
			t := Quantity(r.IntN(9)) * Unit / 2 // 0 to 4 units, in halves
			if k == CPU {
				t = Quantity(r.IntN(17)) * Unit / 2
			}
			total[k] = t
			switch r.IntN(3) {
			case 0:
				avail[k] = t
			case 1:
				avail[k] = Quantity(r.Int64N(int64(t) + 1))
			default:
				avail[k] = t / 2
			}
		}
		nodes[i] = Node{ID: fmt.Sprintf("n%d", i), Total: total, Available: avail, Alive: r.IntN(6) != 0}
	}
	return nodes
}

func randomBundles(r *rand.Rand, n int) []ResourceSet {
	bs := make([]ResourceSet, n)
	for i := range bs {
		b := ResourceSet{}
		for len(b) == 0 {
			for _, k := range propResources {
				switch {
				case k == CPU && r.IntN(10) < 7:
					b[k] = Quantity(1+r.IntN(6)) * Unit / 2
				case k != CPU && r.IntN(5) == 0:
					b[k] = Quantity(1+r.IntN(3)) * Unit / 2
				}
			}
		}
		bs[i] = b
	}
	return bs
}

// bruteForce reports whether some assignment of bundles to the rooms
// satisfies the strategy, by trying all of them (small inputs only).
func bruteForce(room []ResourceSet, bs []ResourceSet, s PlacementStrategy) bool {
	if len(room) == 0 {
		return false
	}
	assign := make([]int, len(bs))
	var rec func(k int) bool
	rec = func(k int) bool {
		if k == len(bs) {
			used := make([]ResourceSet, len(room))
			for i, n := range assign {
				if used[n] == nil {
					used[n] = ResourceSet{}
				}
				used[n].Add(bs[i])
			}
			for n, u := range used {
				if u != nil && !room[n].Covers(u) {
					return false
				}
			}
			return true
		}
		for n := range room {
			if s == StrictPack && k > 0 && n != assign[0] {
				continue
			}
			if s == StrictSpread && slices.Contains(assign[:k], n) {
				continue
			}
			assign[k] = n
			if rec(k + 1) {
				return true
			}
		}
		return false
	}
	return rec(0)
}

// addTo adds b to m[k], creating the set.
func addTo(m map[string]ResourceSet, k string, b ResourceSet) {
	if m[k] == nil {
		m[k] = ResourceSet{}
	}
	m[k].Add(b)
}

// checkAssignment verifies a successful placement: every bundle on an alive
// node, per-node sums within free room, the strategy's constraint.
func checkAssignment(nodes []Node, bs []ResourceSet, s PlacementStrategy, got []string) error {
	if len(got) != len(bs) {
		return fmt.Errorf("%d assignments for %d bundles", len(got), len(bs))
	}
	byID := map[string]*Node{}
	for i := range nodes {
		byID[nodes[i].ID] = &nodes[i]
	}
	use := map[string]ResourceSet{}
	for i, id := range got {
		n := byID[id]
		if n == nil || !n.Alive {
			return fmt.Errorf("bundle %d on %q: not an alive node", i, id)
		}
		addTo(use, id, bs[i])
	}
	for id, u := range use {
		n := byID[id]
		if !capped(n.Available, n.Total).Covers(u) {
			return fmt.Errorf("node %s: %s placed, only %s free", id, u, n.Available)
		}
	}
	return CheckStrategy(s, got)
}

func TestPropertyPlaceBundlesMatchesBruteForce(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(propSeed, 1))
	counts := map[string]int{}
	for c := range 4000 {
		nodes := randomNodes(r, 1+r.IntN(5))
		bs := randomBundles(r, 1+r.IntN(4))
		snapN, snapB := cloneNodes(nodes), cloneSets(bs)
		var free, total []ResourceSet
		for _, n := range aliveSorted(nodes) {
			free = append(free, capped(n.Available, n.Total))
			total = append(total, n.Total)
		}
		for _, s := range PlacementStrategies {
			fail := func(format string, a ...any) {
				t.Helper()
				t.Fatalf("seed %d case %d %s: %s\nnodes %+v\nbundles %v", propSeed, c, s, fmt.Sprintf(format, a...), nodes, bs)
			}
			got, err := PlaceBundles(nodes, bs, s, nil)
			nowOK, everOK := bruteForce(free, bs, s), bruteForce(total, bs, s)
			switch {
			case err == nil:
				counts["placed"]++
				if err := checkAssignment(nodes, bs, s, got); err != nil {
					fail("invalid placement %v: %v", got, err)
				}
				sum := ResourceSet{}
				for _, b := range bs {
					sum.Add(b)
				}
				oneFits := slices.ContainsFunc(free, func(f ResourceSet) bool { return f.Covers(sum) })
				if s == Pack && oneFits && distinct(got) != 1 {
					fail("PACK used %d nodes (%v) though one node has room for all", distinct(got), got)
				}
				ample := 0
				for _, f := range free {
					if f.Covers(sum) {
						ample++
					}
				}
				if s == Spread && ample >= len(bs) && distinct(got) != len(bs) {
					fail("SPREAD reused a node (%v) though %d nodes each have room for all", got, ample)
				}
			case errors.Is(err, ErrInfeasible):
				counts["infeasible"]++
				if everOK {
					fail("infeasible (%v) but an arrangement on empty nodes exists", err)
				}
				var ie *InfeasibleError
				if !errors.As(err, &ie) || ie.Reason == "" {
					fail("bad infeasible error %#v", err)
				}
			case errors.Is(err, ErrPending):
				counts["pending"]++
				if !everOK {
					fail("pending (%v) but no arrangement exists even on empty nodes", err)
				}
				var pe *PendingError
				if !errors.As(err, &pe) || pe.Reason == "" {
					fail("bad pending error %#v", err)
				}
			default:
				fail("unexpected error %v", err)
			}
			if nowOK != (err == nil) {
				fail("brute force says placeable now = %v, PlaceBundles said %v (%v)", nowOK, got, err)
			}
			if !nodesEqual(nodes, snapN) || !setsEqual(bs, snapB) {
				fail("inputs modified")
			}
		}
	}
	t.Logf("outcomes over 4000 cases x 4 strategies: %v", counts)
	for _, k := range []string{"placed", "infeasible", "pending"} {
		if counts[k] < 500 {
			t.Errorf("only %d %s outcomes: the generator does not exercise that path enough", counts[k], k)
		}
	}
}

// TestPropertyPlaceBundlesKeepsCurrent: a placed group loses one of its nodes; the
// re-placement keeps every bundle on a live node where it was, puts the
// moved ones on alive nodes within their free room, and the whole group
// still obeys its strategy. A failure leaves nothing to check but its kind.
func TestPropertyPlaceBundlesKeepsCurrent(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(propSeed, 2))
	counts := map[string]int{}
	for c := range 3000 {
		nodes := randomNodes(r, 2+r.IntN(5))
		for i := range nodes {
			nodes[i].Alive = true
		}
		bs := randomBundles(r, 1+r.IntN(4))
		s := PlacementStrategies[r.IntN(4)]
		cur, err := PlaceBundles(nodes, bs, s, nil)
		if err != nil {
			continue
		}
		fail := func(format string, a ...any) {
			t.Helper()
			t.Fatalf("seed %d case %d %s: %s\nnodes %+v\nbundles %v, placed %v", propSeed, c, s, fmt.Sprintf(format, a...), nodes, bs, cur)
		}
		// The group's bundles are committed: their resources are no longer
		// free. Then one node holding a bundle dies.
		byID := map[string]*Node{}
		for i := range nodes {
			nodes[i].Available = capped(nodes[i].Available, nodes[i].Total)
			byID[nodes[i].ID] = &nodes[i]
		}
		for i, id := range cur {
			byID[id].Available.Sub(bs[i])
		}
		dead := cur[r.IntN(len(cur))]
		byID[dead].Alive = false
		snapN := cloneNodes(nodes)
		got, err := PlaceBundles(nodes, bs, s, cur)
		if !nodesEqual(nodes, snapN) {
			fail("inputs modified")
		}
		if err != nil {
			if !errors.Is(err, ErrPending) && !errors.Is(err, ErrInfeasible) {
				fail("unexpected error %v", err)
			}
			counts["failed"]++
			continue
		}
		counts["moved"]++
		var movedBs []ResourceSet
		var movedTo []string
		for i, id := range cur {
			switch {
			case id != dead && got[i] != id:
				fail("bundle %d moved from live node %s to %s", i, id, got[i])
			case id == dead:
				movedBs, movedTo = append(movedBs, bs[i]), append(movedTo, got[i])
			}
		}
		// Spread has no constraint of its own: this checks liveness and room.
		if err := checkAssignment(nodes, movedBs, Spread, movedTo); err != nil {
			fail("moved bundles %v: %v", movedTo, err)
		}
		if err := CheckStrategy(s, got); err != nil {
			fail("re-placed group %v: %v", got, err)
		}
	}
	t.Logf("outcomes over 3000 cases: %v", counts)
	for _, k := range []string{"moved", "failed"} {
		if counts[k] < 200 {
			t.Errorf("only %d %s outcomes: the generator does not exercise that path enough", counts[k], k)
		}
	}
}
