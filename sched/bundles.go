package sched

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// PlacementStrategy is how a placement group's bundles are spread over nodes,
// with Ray's four strategies and names (ray.util.placement_group(strategy=)).
type PlacementStrategy string

// The placement strategies, spelled as in Ray.
const (
	// Pack puts the bundles on as few nodes as possible, best effort: when
	// one node has room for all of them they all go there; otherwise they
	// may use several nodes.
	Pack PlacementStrategy = "PACK"
	// Spread puts each bundle on a different node, best effort: when there
	// are fewer nodes with room than bundles, some nodes get several.
	Spread PlacementStrategy = "SPREAD"
	// StrictPack puts all bundles on one node, or places none.
	StrictPack PlacementStrategy = "STRICT_PACK"
	// StrictSpread puts every bundle on a different node, or places none.
	StrictSpread PlacementStrategy = "STRICT_SPREAD"
)

// PlacementStrategies lists the accepted strategies in documentation order.
var PlacementStrategies = []PlacementStrategy{Pack, Spread, StrictPack, StrictSpread}

// ErrInvalidStrategy is wrapped by ParsePlacementStrategy errors and by the
// placement functions when given a strategy outside PlacementStrategies.
var ErrInvalidStrategy = errors.New("invalid placement strategy")

// ErrInvalidBundle is wrapped by every ValidateBundles error and by
// PlaceBundles when its inputs do not match.
var ErrInvalidBundle = errors.New("invalid bundle")

// ParsePlacementStrategy parses a strategy name as Ray spells it ("PACK",
// "SPREAD", "STRICT_PACK", "STRICT_SPREAD"). Surrounding space is ignored
// and letter case is not significant ("strict_pack" is accepted). An empty
// string is an error, not a default: Ray's own default is PACK, and callers
// that want it should say so. The error wraps ErrInvalidStrategy, quotes s
// and lists the accepted names.
func ParsePlacementStrategy(s string) (PlacementStrategy, error) {
	t := PlacementStrategy(strings.ToUpper(strings.TrimSpace(s)))
	if t.Valid() {
		return t, nil
	}
	return "", errInvalidStrategy(s)
}

// errInvalidStrategy is the error for strategy name s, not one of
// PlacementStrategies.
func errInvalidStrategy(s string) error {
	return fmt.Errorf("%w %q: accepted are %s", ErrInvalidStrategy, s, joinNames(PlacementStrategies))
}

// joinNames lists names for messages: "A, B, C".
func joinNames[T ~string](names []T) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(n))
	}
	return b.String()
}

// validGroup checks a group's strategy (one of PlacementStrategies) and its
// bundles (ValidateBundles).
func validGroup(strategy PlacementStrategy, bundles []ResourceSet) error {
	if !strategy.Valid() {
		return errInvalidStrategy(string(strategy))
	}
	return ValidateBundles(bundles)
}

// Valid reports whether s is one of PlacementStrategies, exactly spelled.
func (s PlacementStrategy) Valid() bool { return slices.Contains(PlacementStrategies, s) }

// ValidateBundles checks a placement group's bundles as Ray's
// placement_group() does: at least one bundle; every bundle non-empty;
// every resource name valid (ValidateResourceName); every amount positive
// (zero and negative amounts are rejected, so a bundle never reserves
// nothing). Errors wrap ErrInvalidBundle (or ErrInvalidResourceName) and
// name the bundle index and resource, e.g.
// `invalid bundle: bundle 1: resource "CPU" has amount 0; ask for a positive amount or leave it out`.
func ValidateBundles(bundles []ResourceSet) error {
	if len(bundles) == 0 {
		return fmt.Errorf("%w: a placement group needs at least one bundle", ErrInvalidBundle)
	}
	for i, b := range bundles {
		if len(b) == 0 {
			return fmt.Errorf("%w: bundle %d is empty; a bundle needs at least one resource with a positive amount", ErrInvalidBundle, i)
		}
		for _, k := range b.Names() {
			if err := ValidateResourceName(k); err != nil {
				return fmt.Errorf("bundle %d: %w", i, err)
			}
			switch q := b[k]; {
			case q < 0:
				return fmt.Errorf("%w: bundle %d: resource %q has negative amount %s", ErrInvalidBundle, i, k, q)
			case q == 0:
				return fmt.Errorf("%w: bundle %d: resource %q has amount 0; ask for a positive amount or leave it out", ErrInvalidBundle, i, k)
			}
		}
	}
	return nil
}

// CheckStrategy checks an assignment of bundles to nodes (nodes[i] holds
// bundle i; "" is a bundle not placed, ignored) against the strategy's hard
// constraint: STRICT_PACK one node, STRICT_SPREAD distinct nodes. Errors
// wrap ErrReservation and name the bundles and nodes.
func CheckStrategy(s PlacementStrategy, nodes []string) error {
	switch s {
	case StrictPack:
		first := -1
		for i, nd := range nodes {
			switch {
			case nd == "":
			case first < 0:
				first = i
			case nd != nodes[first]:
				return fmt.Errorf("%w: STRICT_PACK puts bundle %d on %s and bundle %d on %s", ErrReservation, first, nodes[first], i, nd)
			}
		}
	case StrictSpread:
		seen := map[string]int{}
		for i, nd := range nodes {
			if nd == "" {
				continue
			}
			if j, dup := seen[nd]; dup {
				return fmt.Errorf("%w: STRICT_SPREAD puts bundles %d and %d both on %s", ErrReservation, j, i, nd)
			}
			seen[nd] = i
		}
	}
	return nil
}

// PlaceBundles chooses a node for every bundle of a placement group that
// has none, under strategy, as Ray's GCS placement-group scheduler does,
// or places none. current[i] is bundles[i]'s node: nil (or every entry
// "") for a new group; after a node failure the bundles whose node is ""
// or not alive in nodes are placed again and the others stay, as Ray's GCS
// reschedules. It returns assignment[i] = the ID of the node for
// bundles[i] (kept entries unchanged; current's copy when nothing needs to
// move). It only decides: it changes no input, and the caller commits the
// reservation (the leader, through the FSM).
//
// Only alive nodes are considered, in ID order, so the result is
// deterministic. A node's room is Available capped at Total; Available
// must already exclude the kept bundles' reservations (they are
// committed). Bundles are placed in Ray's priority order (more GPU first,
// then more custom resources, object store memory, memory, CPU), and then:
//
//   - PACK: all on the one node with room for all if there is one (the
//     tightest fit among them); else repeatedly the node that takes the
//     most of the remaining bundles. Kept bundles' nodes are preferred.
//   - SPREAD: each bundle on the least-used node (by free fraction of what
//     the bundle asks for) that holds no bundle of the group yet; when none
//     has room, on the least-used node that does.
//   - STRICT_PACK: all on the tightest-fitting node with room for their
//     sum (the kept bundles' node when there are any).
//   - STRICT_SPREAD: a maximum matching of bundles to distinct nodes,
//     preferring the least-used nodes and avoiding the kept bundles'
//     nodes; exact, never misses a solution.
//
// PACK and SPREAD fall back to a bounded exhaustive search when the greedy
// pass fails, so they also find arrangements greedy misses on small inputs.
//
// Errors: bundle or strategy validation errors (ErrInvalidBundle,
// ErrInvalidStrategy; ErrInvalidBundle too when current is not nil and
// its length differs from bundles'); *InfeasibleError when the alive
// nodes could not hold the group even if they were empty (every bundle is
// checked against Total minus the group's kept bundles: a resource no node
// has, STRICT_SPREAD with more bundles than alive nodes, STRICT_PACK larger
// than the largest node); *PendingError when they could but what is free
// now is not enough, naming the bundle and the short resource. For PACK
// and SPREAD, infeasibility is reported only when proven; an arrangement
// too large to search exhaustively is reported as pending.
func PlaceBundles(nodes []Node, bundles []ResourceSet, strategy PlacementStrategy, current []string) ([]string, error) {
	if current == nil {
		current = make([]string, len(bundles))
	}
	if len(current) != len(bundles) {
		return nil, fmt.Errorf("%w: %d current assignments for %d bundles", ErrInvalidBundle, len(current), len(bundles))
	}
	alive := make(map[string]bool, len(nodes))
	for i := range nodes {
		if nodes[i].Alive {
			alive[nodes[i].ID] = true
		}
	}
	cur := make([]string, len(current))
	for i, id := range current {
		if alive[id] {
			cur[i] = id
		}
	}
	return place(nodes, bundles, strategy, cur)
}

// place is PlaceBundles after current is checked: fixed[i] != "" keeps bundle i
// on that (alive) node; the others are placed.
func place(nodes []Node, bundles []ResourceSet, strategy PlacementStrategy, fixed []string) ([]string, error) {
	if err := validGroup(strategy, bundles); err != nil {
		return nil, err
	}
	var todo []int
	for i, id := range fixed {
		if id == "" {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return slices.Clone(fixed), nil
	}
	cands := aliveSorted(nodes)
	if len(cands) == 0 {
		return nil, &InfeasibleError{Bundle: -1, Reason: "no alive nodes to place the placement group on"}
	}
	pk := &packer{strategy: strategy, bundles: bundles, order: sortBundles(bundles, todo)}
	// Only the resources the bundles name matter: project every node onto
	// them, so the inner loops work on maps of a few entries.
	names := map[string]bool{}
	for _, b := range bundles {
		for k := range b {
			names[k] = true
		}
	}
	slot := make(map[string]int, len(cands))
	for i, n := range cands {
		pk.ids = append(pk.ids, n.ID)
		pk.totals = append(pk.totals, project(n.Total, names))
		slot[n.ID] = i
	}
	held := make([]bool, len(cands))
	// Capacity for "never": total minus this group's kept bundles.
	capacity := make([]ResourceSet, len(cands))
	for i := range cands {
		capacity[i] = pk.totals[i].Clone()
	}
	for i, id := range fixed {
		if id != "" {
			s := slot[id]
			held[s] = true
			capacity[s].Sub(bundles[i])
		}
	}
	if err := pk.checkFeasible(capacity, held); err != nil {
		return nil, err
	}
	free := make([]ResourceSet, len(cands))
	for i, n := range cands {
		free[i] = capped(n.Available, pk.totals[i])
	}
	got, err := pk.solve(free, slices.Clone(held))
	if err != nil {
		return nil, err
	}
	out := slices.Clone(fixed)
	for b, s := range got {
		if s >= 0 {
			out[b] = pk.ids[s]
		}
	}
	return out, nil
}

// capped returns avail limited to total, name by name (names absent from
// total count as zero).
func capped(avail, total ResourceSet) ResourceSet {
	out := make(ResourceSet, len(total))
	for k, t := range total {
		out[k] = min(avail[k], t)
	}
	return out
}

// project returns the entries of r named in names.
func project(r ResourceSet, names map[string]bool) ResourceSet {
	out := make(ResourceSet, len(names))
	for k := range names {
		if q, ok := r[k]; ok {
			out[k] = q
		}
	}
	return out
}

// sortBundles returns the bundle indices in todo in placement priority:
// Ray's order (GPU, then custom resources by name, object store memory,
// memory, CPU; larger first), ties by index.
func sortBundles(bundles []ResourceSet, todo []int) []int {
	order := slices.Clone(todo)
	var custom []string
	seen := map[string]bool{}
	for _, i := range todo {
		for k := range bundles[i] {
			switch k {
			case CPU, GPU, Memory, ObjectStoreMemory:
				continue
			}
			if !seen[k] {
				seen[k] = true
				custom = append(custom, k)
			}
		}
	}
	slices.Sort(custom)
	keys := append(append([]string{GPU}, custom...), ObjectStoreMemory, Memory, CPU)
	slices.SortStableFunc(order, func(a, b int) int {
		for _, k := range keys {
			qa, qb := bundles[a][k], bundles[b][k]
			if qa != qb {
				if qa > qb {
					return -1
				}
				return 1
			}
		}
		return a - b
	})
	return order
}

// packer holds one placement decision's fixed inputs.
type packer struct {
	strategy PlacementStrategy
	bundles  []ResourceSet
	order    []int // bundles to place, in priority order
	ids      []string
	totals   []ResourceSet
}

// result of one pass: slot per bundle index (-1 = not placed here), the
// bundle that failed (-1 = group-wide) when ok is false.
type pass struct {
	slot   []int
	ok     bool
	failed int
	placed int // bundles placed before the failure
}

func (p *packer) newPass() pass {
	s := make([]int, len(p.bundles))
	for i := range s {
		s[i] = -1
	}
	return pass{slot: s, failed: -1}
}

// run places p.order on free (mutated) under the strategy; held marks
// slots already holding a bundle of this group (mutated).
func (p *packer) run(free []ResourceSet, held []bool) pass {
	switch p.strategy {
	case StrictPack:
		return p.strictPack(free, held)
	case StrictSpread:
		return p.strictSpread(free, held)
	case Spread:
		return p.spread(free, held)
	}
	return p.pack(free, held)
}

func (p *packer) sum() ResourceSet {
	s := ResourceSet{}
	for _, b := range p.order {
		s.Add(p.bundles[b])
	}
	return s
}

func (p *packer) strictPack(free []ResourceSet, held []bool) pass {
	r := p.newPass()
	sum := p.sum()
	best := -1
	var bestScore float64
	for s := range free {
		if anyHeld(held) && !held[s] {
			continue
		}
		if !free[s].Covers(sum) {
			continue
		}
		after := free[s].Clone()
		after.Sub(sum)
		sc := freeFraction(p.totals[s], after, sum)
		if best < 0 || sc < bestScore {
			best, bestScore = s, sc
		}
	}
	if best < 0 {
		return r
	}
	free[best].Sub(sum)
	held[best] = true
	for _, b := range p.order {
		r.slot[b] = best
	}
	r.ok, r.placed = true, len(p.order)
	return r
}

func anyHeld(held []bool) bool { return slices.Contains(held, true) }

// strictSpread finds a maximum matching of bundles to distinct non-held
// slots (Kuhn's augmenting paths), trying the emptiest slots first.
func (p *packer) strictSpread(free []ResourceSet, held []bool) pass {
	r := p.newPass()
	match := make([]int, len(free)) // slot -> bundle
	for i := range match {
		match[i] = -1
	}
	prefs := make(map[int][]int, len(p.order))
	for _, b := range p.order {
		var ss []int
		for s := range free {
			if !held[s] && free[s].Covers(p.bundles[b]) {
				ss = append(ss, s)
			}
		}
		ff := make(map[int]float64, len(ss))
		for _, s := range ss {
			ff[s] = freeFraction(p.totals[s], free[s], p.bundles[b])
		}
		slices.SortStableFunc(ss, func(x, y int) int {
			switch fx, fy := ff[x], ff[y]; {
			case fx > fy:
				return -1
			case fx < fy:
				return 1
			}
			return 0
		})
		prefs[b] = ss
	}
	var visited []bool
	var try func(b int) bool
	try = func(b int) bool {
		for _, s := range prefs[b] {
			if visited[s] {
				continue
			}
			visited[s] = true
			if match[s] < 0 || try(match[s]) {
				match[s] = b
				return true
			}
		}
		return false
	}
	matched := 0
	for _, b := range p.order {
		visited = make([]bool, len(free))
		if try(b) {
			matched++
		} else if r.failed < 0 {
			r.failed = b
		}
	}
	r.placed = matched
	if matched < len(p.order) {
		return r
	}
	for s, b := range match {
		if b >= 0 {
			r.slot[b] = s
			free[s].Sub(p.bundles[b])
			held[s] = true
		}
	}
	r.ok = true
	return r
}

func (p *packer) spread(free []ResourceSet, held []bool) pass {
	r := p.newPass()
	for _, b := range p.order {
		d := p.bundles[b]
		best := -1
		for _, wantHeld := range []bool{false, true} {
			var bestScore float64
			for s := range free {
				if held[s] != wantHeld || !free[s].Covers(d) {
					continue
				}
				sc := freeFraction(p.totals[s], free[s], d)
				if best < 0 || sc > bestScore {
					best, bestScore = s, sc
				}
			}
			if best >= 0 {
				break
			}
		}
		if best < 0 {
			r.failed = b
			return r
		}
		free[best].Sub(d)
		held[best] = true
		r.slot[b] = best
		r.placed++
	}
	r.ok = true
	return r
}

func (p *packer) pack(free []ResourceSet, held []bool) pass {
	r := p.newPass()
	left := slices.Clone(p.order)
	for len(left) > 0 {
		best, bestN := -1, 0
		var bestTake []int
		var bestScore float64
		for s := range free {
			take := greedyFill(free[s].Clone(), p.bundles, left)
			if len(take) == 0 {
				continue
			}
			taken := ResourceSet{}
			for _, b := range take {
				taken.Add(p.bundles[b])
			}
			after := free[s].Clone()
			after.Sub(taken)
			sc := freeFraction(p.totals[s], after, taken)
			better := best < 0
			if !better {
				switch {
				case held[s] != held[best]:
					better = held[s]
				case len(take) != bestN:
					better = len(take) > bestN
				default:
					better = sc < bestScore
				}
			}
			if better {
				best, bestN, bestTake, bestScore = s, len(take), take, sc
			}
		}
		if best < 0 {
			r.failed = left[0]
			return r
		}
		held[best] = true
		for _, b := range bestTake {
			free[best].Sub(p.bundles[b])
			r.slot[b] = best
			r.placed++
		}
		left = slices.DeleteFunc(left, func(b int) bool { return r.slot[b] >= 0 })
	}
	r.ok = true
	return r
}

// greedyFill returns the bundles of left (in order) that fit into room one
// after another; room is consumed.
func greedyFill(room ResourceSet, bundles []ResourceSet, left []int) []int {
	var take []int
	for _, b := range left {
		if room.Covers(bundles[b]) {
			room.Sub(bundles[b])
			take = append(take, b)
		}
	}
	return take
}

// searchBudget bounds the exhaustive fallback for PACK and SPREAD, in
// search steps (one bundle tried on one node).
const searchBudget = 20000

// search looks for any arrangement of p.order on free (not mutated) by
// depth-first search. It returns the slots, and whether the search
// finished (so a nil result proves there is none).
func (p *packer) search(free []ResourceSet) (map[int]int, bool) {
	room := make([]ResourceSet, len(free))
	for i := range free {
		room[i] = free[i].Clone()
	}
	got := map[int]int{}
	steps := 0
	var dfs func(k int) (bool, bool)
	dfs = func(k int) (found, complete bool) {
		if k == len(p.order) {
			return true, true
		}
		b := p.order[k]
		complete = true
		for s := range room {
			if !room[s].Covers(p.bundles[b]) || sameAsEarlier(room, s, p.bundles[b]) {
				continue
			}
			if steps++; steps > searchBudget {
				return false, false
			}
			room[s].Sub(p.bundles[b])
			got[b] = s
			f, c := dfs(k + 1)
			room[s].Add(p.bundles[b])
			if f {
				return true, true
			}
			complete = complete && c
			if !c {
				return false, false
			}
		}
		delete(got, b)
		return false, complete
	}
	found, complete := dfs(0)
	if !found {
		return nil, complete
	}
	return got, true
}

// sameAsEarlier reports whether an earlier slot that fits d has the same
// room as slot s, so trying s again is redundant.
func sameAsEarlier(room []ResourceSet, s int, d ResourceSet) bool {
	for e := 0; e < s; e++ {
		if room[e].Covers(d) && room[e].Equal(room[s]) {
			return true
		}
	}
	return false
}

// attempt runs the strategy on a copy of free and held, then (PACK and
// SPREAD) the exhaustive search. proven is true when a failure is certain.
func (p *packer) attempt(free []ResourceSet, held []bool) (r pass, proven bool) {
	f := cloneSets(free)
	h := slices.Clone(held)
	r = p.run(f, h)
	if r.ok {
		copy(free, f)
		copy(held, h)
		return r, false
	}
	switch p.strategy {
	case StrictPack, StrictSpread:
		return r, true
	}
	got, complete := p.search(free)
	if got == nil {
		return r, complete
	}
	r = p.newPass()
	for b, s := range got {
		r.slot[b] = s
		free[s].Sub(p.bundles[b])
		held[s] = true
	}
	r.ok, r.placed = true, len(got)
	return r, false
}

func cloneSets(sets []ResourceSet) []ResourceSet {
	out := make([]ResourceSet, len(sets))
	for i, s := range sets {
		out[i] = s.Clone()
	}
	return out
}

// eligible returns the slots a single bundle may use under the strategy,
// given held slots: STRICT_SPREAD excludes held ones, STRICT_PACK with a
// held slot allows only those.
func (p *packer) eligible(held []bool) []int {
	var out []int
	for s := range p.ids {
		switch {
		case p.strategy == StrictSpread && held[s]:
			continue
		case p.strategy == StrictPack && anyHeld(held) && !held[s]:
			continue
		}
		out = append(out, s)
	}
	return out
}

func (p *packer) shortfallOf(d ResourceSet, room []ResourceSet, slots []int) (shortfall, bool) {
	ids := make([]string, len(slots))
	have := make([]ResourceSet, len(slots))
	for i, s := range slots {
		ids[i], have[i] = p.ids[s], room[s]
	}
	return findShortfall(ids, have, d)
}

// checkFeasible returns an *InfeasibleError when the group cannot be placed
// even on empty nodes (capacity = total minus this group's kept bundles).
func (p *packer) checkFeasible(capacity []ResourceSet, held []bool) error {
	elig := p.eligible(held)
	if p.strategy == StrictSpread && len(elig) < len(p.order) {
		other := ""
		if n := len(p.ids) - len(elig); n > 0 {
			other = fmt.Sprintf(" (%d more hold other bundles of the group)", n)
		}
		return &InfeasibleError{Bundle: -1, Reason: fmt.Sprintf(
			"STRICT_SPREAD needs %d distinct nodes for %d bundles, but only %d alive nodes are eligible%s",
			len(p.order), len(p.order), len(elig), other)}
	}
	for _, b := range p.order {
		if sf, short := p.shortfallOf(p.bundles[b], capacity, elig); short {
			return &InfeasibleError{Bundle: b, Resource: sf.resource, Need: sf.need, Most: sf.most, Reason: fmt.Sprintf(
				"bundle %d {%s} can never be placed: %s", b, p.bundles[b], sf.describe("in total"))}
		}
	}
	if p.strategy == StrictPack {
		sum := p.sum()
		if sf, short := p.shortfallOf(sum, capacity, elig); short {
			where := "one node"
			if anyHeld(held) {
				where = "the node holding the group's other bundles"
			}
			return &InfeasibleError{Bundle: -1, Resource: sf.resource, Need: sf.need, Most: sf.most, Reason: fmt.Sprintf(
				"STRICT_PACK needs all bundles, {%s} together, on %s: %s", sum, where, sf.describe("in total"))}
		}
		return nil
	}
	if p.strategy == Pack || p.strategy == Spread {
		sum := p.sum()
		for _, k := range sum.Names() {
			var all Quantity
			for _, c := range capacity {
				if c[k] > 0 {
					all = satAdd(all, c[k])
				}
			}
			if all < sum[k] {
				return &InfeasibleError{Bundle: -1, Resource: k, Need: sum[k], Most: all, Reason: fmt.Sprintf(
					"the bundles need %s=%s together but the alive nodes have %s in total", k, sum[k], all)}
			}
		}
	}
	r, proven := p.attempt(cloneSets(capacity), slices.Clone(held))
	if r.ok || !proven {
		return nil
	}
	if p.strategy == StrictSpread {
		return &InfeasibleError{Bundle: r.failed, Reason: fmt.Sprintf(
			"STRICT_SPREAD: only %d of %d bundles fit on distinct alive nodes even with every node empty; bundle %d {%s} has no node left",
			r.placed, len(p.order), r.failed, p.bundles[r.failed])}
	}
	return &InfeasibleError{Bundle: -1, Reason: fmt.Sprintf(
		"the %d bundles {%s in all} do not fit the alive nodes' total capacity in any arrangement", len(p.order), p.sum())}
}

// solve places the group on free (what is free now), or returns a
// *PendingError.
func (p *packer) solve(free []ResourceSet, held []bool) ([]int, error) {
	const what = "free"
	start := cloneSets(free)
	r, _ := p.attempt(free, held)
	if r.ok {
		return r.slot, nil
	}
	elig := p.eligible(held)
	pe := &PendingError{Bundle: r.failed}
	switch p.strategy {
	case StrictPack:
		sum := p.sum()
		sf, _ := p.shortfallOf(sum, start, elig)
		pe.Resource, pe.Need, pe.Free = sf.resource, sf.need, sf.most
		pe.Reason = fmt.Sprintf("STRICT_PACK: no eligible node has room for all bundles, {%s} together, now: %s", sum, sf.describe(what))
		return nil, pe
	case StrictSpread:
		b := r.failed
		sf, short := p.shortfallOf(p.bundles[b], start, elig)
		detail := "the nodes with room are taken by the group's other bundles"
		if short {
			detail = sf.describe(what)
			pe.Resource, pe.Need, pe.Free = sf.resource, sf.need, sf.most
		}
		pe.Reason = fmt.Sprintf("STRICT_SPREAD: only %d of %d bundles fit on distinct nodes now; bundle %d {%s}: %s",
			r.placed, len(p.order), b, p.bundles[b], detail)
		return nil, pe
	}
	// PACK / SPREAD: name the first bundle that has no room on its own, or
	// the one greedy stopped at.
	for _, b := range p.order {
		if sf, short := p.shortfallOf(p.bundles[b], start, elig); short {
			pe.Bundle, pe.Resource, pe.Need, pe.Free = b, sf.resource, sf.need, sf.most
			pe.Reason = fmt.Sprintf("bundle %d {%s} does not fit in what is free now: %s", b, p.bundles[b], sf.describe(what))
			return nil, pe
		}
	}
	b := r.failed
	pe.Bundle = b
	pe.Reason = fmt.Sprintf("every bundle fits somewhere alone, but not all %d together in what is free now; after %d were placed, bundle %d {%s} had no room left",
		len(p.order), r.placed, b, p.bundles[b])
	return nil, pe
}
