package check

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// checkWork reports each WC-flagged task that waited, after it was ready
// (submitted and its direct dependencies done), more than WorkBound while
// one node continuously had room for it. Room is judged conservatively:
// everything counts as held from its start (an actor and a bundle from
// their creation) until ReleaseGrace after it ended, and tasks blocked in
// Get keep their CPU, so only room the scheduler surely had is counted.
func checkWork(m *model, cfg Config) []Violation {
	occ := occupancy(m, cfg)
	for _, n := range cfg.Nodes {
		occ[n.Name] = append(occ[n.Name], workerless(m, n)...)
	}
	bound := cfg.WorkBound.Nanoseconds()
	out := groupWaits(m, cfg)
	for _, id := range m.order {
		t := m.tasks[id]
		first := t.firstStart()
		if !t.submit.WC || first == nil {
			continue
		}
		ready, ok := readyAt(m, t)
		if !ok || first.from-ready <= bound {
			continue
		}
		for _, n := range cfg.Nodes {
			st := longestFit(occ[n.Name], n.Total, t.submit.Demand, ready, first.from)
			if st.to-st.from <= bound {
				continue
			}
			out = append(out, Violation{Invariant: InvWork, At: ns(st.from), Node: n.Name, Tasks: []string{id},
				Detail: fmt.Sprintf("task %s (demand %s) was ready at %s and started at %s on node %s (waited %s) while node %s had room for it for %s, from %s to %s (free then: %s)",
					id, fmtRes(t.submit.Demand), rel(m, ready), rel(m, first.from), first.node, secs(first.from-ready),
					n.Name, secs(st.to-st.from), rel(m, st.from), rel(m, st.to), fmtRes(only(st.free, t.submit.Demand)))})
			break
		}
	}
	return out
}

// groupWaits reports placement groups that took more than WorkBound to be
// ready while, continuously for longer than that, the nodes had room for
// all their bundles under their strategy (everything else held as in
// checkWork, other groups' bundles from their creation).
func groupWaits(m *model, cfg Config) []Violation {
	bound := cfg.WorkBound.Nanoseconds()
	var out []Violation
	for _, id := range sortedGroups(m) {
		g := m.groups[id]
		if g.ready == 0 || g.created == 0 || g.ready-g.created <= bound {
			continue
		}
		occ := occupancy(m, cfg)
		for n, items := range occ {
			occ[n] = slices.DeleteFunc(items, func(it item) bool { return it.group == id })
		}
		st := longestPlaceable(occ, cfg.Nodes, g, g.created, g.ready)
		if st.to-st.from <= bound {
			continue
		}
		var shapes []string
		for _, b := range g.bundles {
			shapes = append(shapes, "{"+fmtRes(b.Demand)+"}")
		}
		out = append(out, Violation{Invariant: InvWork, At: ns(st.from),
			Detail: fmt.Sprintf("placement group %s (%s, bundles %s) was created at %s and ready at %s (waited %s) while the nodes had room for it for %s, from %s to %s",
				id, g.strategy, strings.Join(shapes, " "), rel(m, g.created), rel(m, g.ready), secs(g.ready-g.created), secs(st.to-st.from), rel(m, st.from), rel(m, st.to))})
	}
	return out
}

// longestPlaceable is longestFit for a whole group: the longest interval
// within [from, to) during which some assignment of g's bundles to nodes
// allowed by its strategy fit the nodes' free resources.
func longestPlaceable(occ map[string][]item, nodes []Node, g *group, from, to int64) stretch {
	var all []item
	for _, items := range occ {
		all = append(all, items...)
	}
	return longestStretch(cutPoints(all, from, to), func(p int64) (bool, map[string]float64) {
		free := make([]map[string]float64, len(nodes))
		for k, n := range nodes {
			free[k] = freeAt(occ[n.Name], n.Total, p)
		}
		return placeable(g.strategy, g.bundles, free), nil
	})
}

// placeable reports whether bundles fit free (one map per node) under
// strategy, trying every assignment (groups are small; above 4096
// assignments it answers false, which only hides violations).
func placeable(strategy string, bundles []Bundle, free []map[string]float64) bool {
	n := len(free)
	total := 1
	for range bundles {
		if total *= n; total > 4096 || n == 0 {
			return false
		}
	}
	assign := make([]int, len(bundles))
	for code := 0; code < total; code++ {
		c := code
		for i := range assign {
			assign[i], c = c%n, c/n
		}
		if allowed(strategy, assign) && fitsAssigned(bundles, assign, free) {
			return true
		}
	}
	return false
}

// allowed checks an assignment of bundles to node indexes against the
// strict strategies (PACK and SPREAD accept any).
func allowed(strategy string, assign []int) bool {
	distinct := map[int]bool{}
	for _, a := range assign {
		distinct[a] = true
	}
	switch strategy {
	case "STRICT_PACK":
		return len(distinct) == 1
	case "STRICT_SPREAD":
		return len(distinct) == len(assign)
	}
	return true
}

func fitsAssigned(bundles []Bundle, assign []int, free []map[string]float64) bool {
	need := make([]map[string]float64, len(free))
	for i, b := range bundles {
		if need[assign[i]] == nil {
			need[assign[i]] = map[string]float64{}
		}
		addTo(need[assign[i]], b.Demand)
	}
	for k, nd := range need {
		if nd != nil && !covers(free[k], nd) {
			return false
		}
	}
	return true
}

// readyAt is when t was submitted and all its direct dependencies had
// ended; false if a dependency never ended.
func readyAt(m *model, t *taskInfo) (int64, bool) {
	ready := t.submit.Time
	for _, d := range t.submit.Deps {
		dt := m.tasks[d]
		if dt == nil {
			return 0, false
		}
		done := dt.doneAt()
		if done == 0 {
			return 0, false
		}
		ready = max(ready, done)
	}
	return ready, true
}

// occupancy lists, per node, what held resources there with the widest
// plausible interval (see checkWork). Work inside bundles is covered by
// its bundle.
func occupancy(m *model, cfg Config) map[string][]item {
	grace := cfg.ReleaseGrace.Nanoseconds()
	next := handoffs(m, grace)
	occ := map[string][]item{}
	for _, hd := range m.holders {
		if hd.group != "" {
			continue
		}
		from, to := hd.from, hd.to
		if t := m.tasks[hd.task]; hd.actor && t != nil {
			if t.submit.Time != 0 {
				from = min(from, t.submit.Time)
			}
			if t.killed != 0 {
				to = max(to, t.killed)
			}
		}
		switch {
		case hd.ended == endedOpen:
			to = never
		case next[hd] != 0:
			to = next[hd]
		default:
			to += grace
		}
		occ[hd.node] = append(occ[hd.node], item{name: hd.name(), from: from, to: to, demand: hd.demand, h: hd})
	}
	for _, id := range sortedGroups(m) {
		g := m.groups[id]
		if g.ready == 0 {
			continue
		}
		to := g.removed
		if to != never {
			to += grace
		}
		for _, b := range g.bundles {
			occ[b.Node] = append(occ[b.Node], item{name: fmt.Sprintf("bundle %d of group %s", b.Index, id), from: g.created, to: to, demand: b.Demand, group: id})
		}
	}
	return occ
}

// handoffs finds, for each task attempt that ended normally, the start of
// another with the same demand in the same process within grace of its end
// (the lease passed on to the next task of the same shape); its resources
// count as held until that start instead of for the whole grace. Each
// start takes over from one ended attempt, the earliest first.
func handoffs(m *model, grace int64) map[*holder]int64 {
	next, _ := handoffPairs(m, grace)
	return next
}

// handoffPairs is handoffs, also returning the set of attempts that took
// a lease over.
func handoffPairs(m *model, grace int64) (map[*holder]int64, map[*holder]bool) {
	ends := make([]*holder, 0, len(m.holders))
	for _, hd := range m.holders {
		if hd.ended == endedNormally && !hd.actor && hd.group == "" {
			ends = append(ends, hd)
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].to < ends[j].to })
	taken := map[*holder]bool{}
	next := map[*holder]int64{}
	for _, a := range ends {
		var best *holder
		for _, b := range m.holders {
			if taken[b] || b == a || b.actor || b.pid != a.pid || b.node != a.node || b.from < a.to || b.from > a.to+grace || !sameDemand(a.demand, b.demand) {
				continue
			}
			if best == nil || b.from < best.from {
				best = b
			}
		}
		if best != nil {
			taken[best], next[a] = true, best.from
		}
	}
	return next, taken
}

func sameDemand(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if math.Abs(b[k]-v) > eps {
			return false
		}
	}
	return true
}

// workerless returns, as items holding all of node n, the times when n
// had no running job worker process for sure: from the history's start,
// and from each crash on n, until the next start of a task without GPUs
// there (a node's first task, or its first after a crash, waits for a
// process to start, which is not the scheduler's idleness).
func workerless(m *model, n Node) []item {
	var out []item
	begin := []int64{m.start}
	for _, c := range m.crashes {
		if c.node == n.Name {
			begin = append(begin, c.at)
		}
	}
	for _, b := range begin {
		end := int64(never)
		for _, hd := range m.holders {
			if hd.node == n.Name && !hd.actor && len(hd.gpus) == 0 && hd.from > b && hd.from < end {
				end = hd.from
			}
		}
		out = append(out, item{name: "no worker process on " + n.Name, from: b, to: end, demand: n.Total})
	}
	return out
}

// stretch is an interval during which a node had room, with the free
// resources at its start.
type stretch struct {
	from, to int64
	free     map[string]float64
}

// longestFit returns the longest interval within [from, to) during which
// total minus what items held covered demand.
func longestFit(items []item, total, demand map[string]float64, from, to int64) stretch {
	return longestStretch(cutPoints(items, from, to), func(p int64) (bool, map[string]float64) {
		free := freeAt(items, total, p)
		return covers(free, demand), free
	})
}

// cutPoints returns from, to and every item boundary strictly between
// them, sorted: the instants where what is free can change.
func cutPoints(items []item, from, to int64) []int64 {
	points := []int64{from, to}
	for _, it := range items {
		for _, p := range []int64{it.from, it.to} {
			if p > from && p < to {
				points = append(points, p)
			}
		}
	}
	sort.Slice(points, func(i, j int) bool { return points[i] < points[j] })
	return points
}

// longestStretch returns the longest run of consecutive intervals between
// points over which fits holds (checked at each interval's start); the
// stretch keeps the free resources fits reported at the run's start.
func longestStretch(points []int64, fits func(p int64) (bool, map[string]float64)) stretch {
	var best, cur stretch
	open := false
	for i := 0; i+1 < len(points); i++ {
		p, q := points[i], points[i+1]
		if p == q {
			continue
		}
		ok, free := fits(p)
		if !ok {
			open = false
			continue
		}
		if !open {
			cur, open = stretch{from: p, free: free}, true
		}
		cur.to = q
		if cur.to-cur.from > best.to-best.from {
			best = cur
		}
	}
	return best
}

// freeAt is total minus what the items active at t hold.
func freeAt(items []item, total map[string]float64, t int64) map[string]float64 {
	free := map[string]float64{}
	for k, v := range total {
		free[k] = v
	}
	for _, it := range items {
		if it.from <= t && t < it.to {
			for k, v := range it.demand {
				free[k] -= v
			}
		}
	}
	return free
}

// only returns r's entries for the resources demand names.
func only(r, demand map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k := range demand {
		out[k] = r[k]
	}
	return out
}

func covers(free, demand map[string]float64) bool {
	for k, v := range demand {
		if v > 0 && free[k] < v-eps {
			return false
		}
	}
	return true
}

// checkMakespan checks each phase whose name starts with "makespan": N
// independent tasks of at most D seconds and c CPU each, on nodes with C
// slots of c CPU in all, must finish within ceil(N/C)·D + MakespanSlack of
// the first submit.
func checkMakespan(m *model, cfg Config) []Violation {
	var out []Violation
	for _, ph := range m.phases {
		if !strings.HasPrefix(ph.Phase, "makespan") {
			continue
		}
		if v := makespanOf(m, cfg, ph.Phase); v != nil {
			out = append(out, *v)
		}
	}
	return out
}

func makespanOf(m *model, cfg Config, phase string) *Violation {
	var tasks []*taskInfo
	first, last := int64(never), int64(0)
	dur, cpu := 0.0, 0.0
	for _, id := range m.order {
		t := m.tasks[id]
		if t.submit.Phase != phase || t.submit.Kind != Submit {
			continue
		}
		done := t.doneAt()
		if done == 0 {
			return nil // unfinished: checkCompletion says so
		}
		tasks = append(tasks, t)
		first, last = min(first, t.submit.Time), max(last, done)
		dur, cpu = max(dur, t.submit.Dur), max(cpu, t.submit.Demand["CPU"])
	}
	if len(tasks) == 0 || cpu <= 0 {
		return nil
	}
	slots := 0
	for _, n := range cfg.Nodes {
		slots += int(math.Floor(n.Total["CPU"]/cpu + eps))
	}
	if slots == 0 {
		return nil
	}
	ideal := math.Ceil(float64(len(tasks))/float64(slots)) * dur
	limit := ideal + cfg.MakespanSlack.Seconds()
	took := float64(last-first) / 1e9
	if took <= limit {
		return nil
	}
	return &Violation{Invariant: InvMakespan, At: ns(first),
		Detail: fmt.Sprintf("phase %s: %d tasks of %gs and CPU %g on %d slots took %.2fs, over ceil(N/C)·D = %.2fs + slack %.2fs; at most %d ran at once",
			phase, len(tasks), dur, cpu, slots, took, ideal, cfg.MakespanSlack.Seconds(), peakConcurrency(tasks))}
}

// peakConcurrency is the most of the tasks' attempts running at once.
func peakConcurrency(tasks []*taskInfo) int {
	type edge struct {
		t     int64
		delta int
	}
	var edges []edge
	for _, t := range tasks {
		for _, a := range t.attempts {
			edges = append(edges, edge{a.from, 1}, edge{a.to, -1})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		return edges[i].t < edges[j].t || edges[i].t == edges[j].t && edges[i].delta < edges[j].delta
	})
	peak, cur := 0, 0
	for _, e := range edges {
		cur += e.delta
		peak = max(peak, cur)
	}
	return peak
}

// rel formats t as seconds since the history began ("+3.20s").
func rel(m *model, t int64) string { return "+" + secs(t-m.start) }

// fmtRes formats a resource map as "CPU=1 slot=0.5", sorted by name.
func fmtRes(r map[string]float64) string {
	var parts []string
	for _, k := range sortedNames(r) {
		parts = append(parts, fmt.Sprintf("%s=%g", k, math.Round(r[k]*1e4)/1e4))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, " ")
}
