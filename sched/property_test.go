package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
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
			got, err := PlaceBundles(nodes, bs, s)
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

// snapshot captures everything observable about a ledger.
func snapshot(l *Ledger) string {
	s := fmt.Sprint(l.Nodes())
	for _, g := range l.Groups() {
		r, _ := l.Get(g)
		s += fmt.Sprint(r)
	}
	return s
}

func TestPropertyLedgerSequences(t *testing.T) {
	r := rand.New(rand.NewPCG(propSeed, 2))
	for c := range 300 {
		nodes := randomNodes(r, 2+r.IntN(5))
		l := NewLedger()
		for _, n := range nodes {
			l.SetNode(n.ID, n.Total, nil, true)
		}
		alive := map[string]bool{}
		for _, n := range nodes {
			alive[n.ID] = true
		}
		next := 0
		for step := range 60 {
			fail := func(format string, a ...any) {
				t.Helper()
				t.Fatalf("seed %d case %d step %d: %s", propSeed, c, step, fmt.Sprintf(format, a...))
			}
			switch op := r.IntN(10); {
			case op < 5: // create
				bs := randomBundles(r, 1+r.IntN(4))
				s := PlacementStrategies[r.IntN(4)]
				view := l.Nodes()
				before := snapshot(l)
				g := fmt.Sprintf("g%d", next)
				next++
				got, err := l.Place(g, bs, s)
				if err != nil {
					if !errors.Is(err, ErrPending) && !errors.Is(err, ErrInfeasible) {
						fail("place: unexpected %v", err)
					}
					if snapshot(l) != before {
						fail("failed placement (%v) changed the ledger", err)
					}
					continue
				}
				if err := checkAssignment(view, bs, s, got); err != nil {
					fail("placement %v: %v", got, err)
				}
			case op < 8: // remove
				if gs := l.Groups(); len(gs) > 0 {
					l.Release(gs[r.IntN(len(gs))])
				}
			case op == 8: // a node dies; repair what it held
				n := nodes[r.IntN(len(nodes))]
				l.SetNode(n.ID, n.Total, nil, false)
				alive[n.ID] = false
				for _, g := range l.NeedsRepair() {
					old, _ := l.Get(g)
					before := snapshot(l)
					got, err := l.Repair(g)
					if err != nil {
						if snapshot(l) != before {
							fail("failed repair changed the ledger")
						}
						continue
					}
					for i, id := range old.Nodes {
						if alive[id] && got[i] != id {
							fail("repair moved bundle %d from live node %s to %s", i, id, got[i])
						}
						if !alive[got[i]] {
							fail("repair left bundle %d on dead %s", i, got[i])
						}
					}
				}
			default: // a node comes back as a new incarnation
				n := nodes[r.IntN(len(nodes))]
				l.NodeLost(n.ID)
				l.SetNode(n.ID, n.Total, nil, true)
				alive[n.ID] = true
			}
			if err := l.Verify(); err != nil {
				fail("%v", err)
			}
		}
	}
}

func TestPropertyConcurrentLedger(t *testing.T) {
	r := rand.New(rand.NewPCG(propSeed, 3))
	for c := range 20 {
		nodes := randomNodes(r, 3+r.IntN(6))
		l := NewLedger()
		for _, n := range nodes {
			l.SetNode(n.ID, n.Total, nil, true)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for w := range 8 {
			seed := r.Uint64()
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(w)))
				var mine []string
				for i := range 200 {
					if len(mine) > 0 && r.IntN(3) == 0 {
						k := r.IntN(len(mine))
						if !l.Release(mine[k]) {
							errs <- fmt.Errorf("release of own group %s failed", mine[k])
							return
						}
						mine = slices.Delete(mine, k, k+1)
						continue
					}
					g := fmt.Sprintf("w%d-%d", w, i)
					s := PlacementStrategies[r.IntN(4)]
					bs := randomBundles(r, 1+r.IntN(3))
					got, err := l.Place(g, bs, s)
					if err == nil {
						mine = append(mine, g)
						if e := CheckStrategy(s, got); e != nil {
							errs <- e
							return
						}
					} else if !errors.Is(err, ErrPending) && !errors.Is(err, ErrInfeasible) {
						errs <- err
						return
					}
					if i%20 == 0 {
						if err := l.Verify(); err != nil {
							errs <- err
							return
						}
					}
				}
			})
		}
		// One goroutine plays the leader's node-failure handling.
		wg.Go(func() {
			for i := range 50 {
				n := nodes[i%len(nodes)]
				l.SetNode(n.ID, n.Total, nil, i%2 == 0)
				for _, g := range l.NeedsRepair() {
					_, _ = l.Repair(g) // may race a Release: ErrNoGroup is fine
				}
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("seed %d case %d: %v", propSeed, c, err)
		}
		if err := l.Verify(); err != nil {
			t.Fatalf("seed %d case %d: %v", propSeed, c, err)
		}
	}
}

// TestPropertyRaceForLastResources: two identical groups race for the same
// free resources through the ledger; the number of winners is exactly what
// placing them one after the other gives (1 when only one fits).
func TestPropertyRaceForLastResources(t *testing.T) {
	r := rand.New(rand.NewPCG(propSeed, 4))
	contested := 0
	for c := range 500 {
		nodes := randomNodes(r, 1+r.IntN(5))
		s := PlacementStrategies[r.IntN(4)]
		bs := randomBundles(r, 1+r.IntN(3))
		build := func() *Ledger {
			l := NewLedger()
			for _, n := range nodes {
				l.SetNode(n.ID, n.Total, nil, true)
			}
			return l
		}
		seq := build()
		want := 0
		for _, g := range []string{"a", "b"} {
			if _, err := seq.Place(g, bs, s); err == nil {
				want++
			}
		}
		if want == 0 {
			continue
		}
		if want == 1 {
			contested++
		}
		l := build()
		var wg sync.WaitGroup
		start := make(chan struct{})
		res := make([]error, 2)
		for i, g := range []string{"a", "b"} {
			wg.Go(func() {
				<-start
				_, res[i] = l.Place(g, bs, s)
			})
		}
		close(start)
		wg.Wait()
		wins := 0
		for _, err := range res {
			if err == nil {
				wins++
			} else if !errors.Is(err, ErrPending) {
				t.Fatalf("seed %d case %d: loser error %v, want pending", propSeed, c, err)
			}
		}
		if wins != want {
			t.Fatalf("seed %d case %d %s %v: %d winners, want %d", propSeed, c, s, bs, wins, want)
		}
		if err := l.Verify(); err != nil {
			t.Fatal(err)
		}
	}
	if contested < 50 {
		t.Fatalf("only %d contested races", contested)
	}
}
