package check

import (
	"fmt"
	"sort"
	"strconv"
)

// item is something that holds resources in a scope over [from, to): a
// task attempt or actor incarnation (h set), or a placement-group bundle
// reserved on a node.
type item struct {
	name     string
	from, to int64
	demand   map[string]float64
	h        *holder // nil for a bundle
	group    string  // a bundle's group
	// handoff: the task took over the lease of one that just ended in its
	// process (same demand): its start is no new grant, so it is not
	// checked (an over-commit after an unblock may carry on, as in Ray).
	handoff bool
}

// scope is a pool with a capacity: a node's free pool, one bundle, or one
// group's bundles on one node.
type scope struct {
	desc  string // "node n0", "bundle 1 of group g", ...
	node  string
	cap   map[string]float64
	items []item
}

// checkCapacity checks every scope at every instant something started in
// it (except a task taking over a just-ended task's lease): the sum of
// what is active then must fit the scope's capacity.
func checkCapacity(m *model, cfg Config) []Violation {
	var out []Violation
	for _, s := range scopes(m, cfg) {
		out = append(out, s.check(cfg)...)
	}
	return out
}

// scopes builds the node pools (work outside groups, plus each ready
// group's bundles), each bundle, and each group's share of each node.
func scopes(m *model, cfg Config) []*scope {
	byKey := map[string]*scope{}
	var out []*scope
	get := func(key, desc, node string, cap map[string]float64) *scope {
		s := byKey[key]
		if s == nil {
			s = &scope{desc: desc, node: node, cap: cap}
			byKey[key] = s
			out = append(out, s)
		}
		return s
	}
	for _, n := range cfg.Nodes {
		get("node:"+n.Name, "node "+n.Name, n.Name, n.Total)
	}
	for _, id := range sortedGroups(m) {
		g := m.groups[id]
		if g.ready == 0 {
			continue
		}
		for _, b := range g.bundles {
			s := byKey["node:"+b.Node]
			if s == nil {
				s = get("node:"+b.Node, "node "+b.Node, b.Node, map[string]float64{})
			}
			s.items = append(s.items, item{name: fmt.Sprintf("bundle %d of group %s", b.Index, id), from: g.ready, to: g.removing, demand: b.Demand})
			get(bundleKey(id, b.Index), fmt.Sprintf("bundle %d of group %s", b.Index, id), b.Node, b.Demand)
			gs := get("group:"+id+"@"+b.Node, fmt.Sprintf("group %s on node %s", id, b.Node), b.Node, map[string]float64{})
			addTo(gs.cap, b.Demand)
		}
	}
	_, tookOver := handoffPairs(m, cfg.ReleaseGrace.Nanoseconds())
	for _, hd := range m.holders {
		it := item{name: hd.name(), from: hd.from, to: hd.to, demand: hd.demand, h: hd, handoff: tookOver[hd]}
		if hd.group == "" {
			if s := byKey["node:"+hd.node]; s != nil {
				s.items = append(s.items, it)
			}
			continue
		}
		if s := byKey[bundleKey(hd.group, hd.bundle)]; s != nil && hd.bundle >= 0 {
			s.items = append(s.items, it)
		}
		if s := byKey["group:"+hd.group+"@"+hd.node]; s != nil {
			s.items = append(s.items, it)
		}
	}
	return out
}

func bundleKey(group string, index int) string { return "bundle:" + group + ":" + strconv.Itoa(index) }

func sortedGroups(m *model) []string {
	ids := make([]string, 0, len(m.groups))
	for id := range m.groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func addTo(dst, src map[string]float64) {
	for k, v := range src {
		dst[k] += v
	}
}

// check reports, for each resource, the first instant the scope was over
// its capacity and how many starts found it over.
func (s *scope) check(cfg Config) []Violation {
	sort.SliceStable(s.items, func(i, j int) bool { return s.items[i].from < s.items[j].from })
	first := map[string]*Violation{}
	count := map[string]int{}
	var order []string
	for _, x := range s.items {
		if x.handoff {
			continue
		}
		for _, r := range sortedNames(x.demand) {
			if x.demand[r] <= 0 {
				continue
			}
			v := s.overAt(x, r, cfg)
			if v == nil {
				continue
			}
			if count[r]++; count[r] == 1 {
				first[r] = v
				order = append(order, r)
			}
		}
	}
	out := make([]Violation, 0, len(order))
	for _, r := range order {
		v := *first[r]
		v.Detail = fmt.Sprintf("%s; %d start(s) found it over", v.Detail, count[r])
		out = append(out, v)
	}
	return out
}

// overAt sums resource r over the scope's items active when x started and
// returns a violation if the sum exceeds the capacity. For CPU, items
// (other than x) blocked within BlockGrace before x's start lend theirs.
func (s *scope) overAt(x item, r string, cfg Config) *Violation {
	t := x.from
	held := 0.0
	var names, lent []string
	for _, y := range s.items {
		if y.from > t {
			break
		}
		if t >= y.to || y.demand[r] <= 0 {
			continue
		}
		if r == "CPU" && y.h != nil && y.name != x.name && y.h.blockedWithin(t-cfg.BlockGrace.Nanoseconds(), t) {
			lent = append(lent, fmt.Sprintf("%s(%g lent)", y.name, y.demand[r]))
			continue
		}
		held += y.demand[r]
		names = append(names, fmt.Sprintf("%s(%g)", y.name, y.demand[r]))
	}
	if held <= s.cap[r]+eps {
		return nil
	}
	why := "tasks blocked in Get/Wait lend their CPU"
	if r != "CPU" {
		why = "tasks blocked in Get/Wait still hold it: only CPU is lent"
	}
	return &Violation{Invariant: InvCapacity, At: ns(t), Node: s.node, Resource: r, Held: held, Total: s.cap[r], Tasks: append(names, lent...),
		Detail: fmt.Sprintf("%s over capacity when %s started (%s)", s.desc, x.name, why)}
}
