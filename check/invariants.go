package check

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// checkSpread checks each SPREAD burst (tasks submitted together onto idle
// nodes, Event.Burst): counting where each task first started, over every
// node with CPU enough for one, no node may be more than one task ahead of
// another.
func checkSpread(m *model, cfg Config) []Violation {
	bursts := map[string][]*taskInfo{}
	var names []string
	for _, id := range m.order {
		t := m.tasks[id]
		if b := t.submit.Burst; b != "" {
			if bursts[b] == nil {
				names = append(names, b)
			}
			bursts[b] = append(bursts[b], t)
		}
	}
	var out []Violation
	for _, b := range names {
		if v := spreadOf(m, cfg, b, bursts[b]); v != nil {
			out = append(out, *v)
		}
	}
	return out
}

func spreadOf(m *model, cfg Config, burst string, tasks []*taskInfo) *Violation {
	cpu := 0.0
	for _, t := range tasks {
		if t.firstStart() == nil {
			return nil // never ran: checkCompletion says so
		}
		cpu = max(cpu, t.submit.Demand["CPU"])
	}
	count := map[string]int{}
	for _, n := range cfg.Nodes {
		if n.Total["CPU"] >= cpu-eps {
			count[n.Name] = 0
		}
	}
	var ids []string
	for _, t := range tasks {
		count[t.firstStart().node]++
		ids = append(ids, t.id)
	}
	lo, hi := len(tasks), 0
	for _, c := range count {
		lo, hi = min(lo, c), max(hi, c)
	}
	if hi-lo <= 1 {
		return nil
	}
	return &Violation{Invariant: InvSpread, At: ns(tasks[0].submit.Time), Tasks: ids,
		Detail: fmt.Sprintf("SPREAD burst %s of %d tasks onto %d idle nodes ran %s: a node is %d tasks ahead of another", burst, len(tasks), len(count), fmtCounts(count), hi-lo)}
}

// fmtCounts formats per-node counts as "n0=6 n1=0", sorted by node.
func fmtCounts(c map[string]int) string {
	var keys []string
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return strings.Join(parts, " ")
}

// checkRetries checks that an attempt after a crash runs in another
// process, and that a task failing with WorkerCrashedError counted no more
// worker deaths than processes died (Crash events) between its submit and
// its result: each death can cost a task one attempt, so a higher count
// means a retry was sent to a worker that had already died.
func checkRetries(m *model, _ Config) []Violation {
	var out []Violation
	for _, id := range m.order {
		t := m.tasks[id]
		for k := 0; k+1 < len(t.attempts); k++ {
			a, b := t.attempts[k], t.attempts[k+1]
			if a.ended == endedByCrash && a.pid == b.pid && a.node == b.node {
				out = append(out, Violation{Invariant: InvRetry, At: ns(b.from), Node: b.node, Tasks: []string{a.name(), b.name()},
					Detail: fmt.Sprintf("%s ran in process %d on node %s, which crashed running %s", b.name(), b.pid, b.node, a.name())})
			}
		}
		if v := deathCount(m, t); v != nil {
			out = append(out, *v)
		}
	}
	return out
}

func deathCount(m *model, t *taskInfo) *Violation {
	r := t.result
	if r == nil || r.ErrKind != ErrCrashed {
		return nil
	}
	var died []string
	for _, c := range m.crashes {
		if c.at >= t.submit.Time && c.at <= r.Time {
			died = append(died, fmt.Sprintf("pid %d on %s (%s)", c.pid, c.node, c.task))
		}
	}
	if r.Attempts <= len(died) {
		return nil
	}
	return &Violation{Invariant: InvRetry, At: ns(r.Time), Tasks: []string{t.id},
		Detail: fmt.Sprintf("task %s failed after %d worker deaths (MaxRetries %d) but only %d worker process(es) died while it was pending [%s]: a retry went to a worker that was already dead (%s)",
			t.id, r.Attempts, t.submit.MaxRetries, len(died), strings.Join(died, "; "), r.Err)}
}

// checkPlacement checks that work ran where its strategy says (hard node
// affinity, label selector, its bundle's node), that STRICT_PACK and
// STRICT_SPREAD groups were placed as such, and that SPREAD and PACK
// groups created onto idle nodes were placed as their strategy prefers
// (idleMisplaced).
func checkPlacement(m *model, cfg Config) []Violation {
	var out []Violation
	for _, hd := range m.holders {
		if why := misplaced(m, cfg, hd); why != "" {
			out = append(out, Violation{Invariant: InvPlacement, At: ns(hd.from), Node: hd.node, Tasks: []string{hd.name()},
				Detail: fmt.Sprintf("%s with strategy %s ran on node %s: %s", hd.name(), hd.strategy, hd.node, why)})
		}
	}
	for _, id := range sortedGroups(m) {
		g := m.groups[id]
		if g.ready == 0 {
			continue
		}
		var nodes []string
		for _, b := range g.bundles {
			nodes = append(nodes, b.Node)
		}
		distinct := len(g.nodeCount)
		bad := g.strategy == "STRICT_PACK" && distinct != 1 || g.strategy == "STRICT_SPREAD" && distinct != len(g.bundles)
		if bad {
			out = append(out, Violation{Invariant: InvPlacement, At: ns(g.ready),
				Detail: fmt.Sprintf("group %s (%s) placed its %d bundles on nodes %v", id, g.strategy, len(g.bundles), nodes)})
		}
		if why := idleMisplaced(g, cfg); why != "" {
			out = append(out, Violation{Invariant: InvPlacement, At: ns(g.ready),
				Detail: fmt.Sprintf("group %s (%s, created onto idle nodes) placed its %d bundles on nodes %v: %s", id, g.strategy, len(g.bundles), nodes, why)})
		}
	}
	return out
}

// idleMisplaced says why a group created alone onto idle nodes is not
// placed as its soft strategy prefers ("" if it is, or if the group was
// not idle): SPREAD puts its bundles on as many distinct nodes as can each
// hold one (every bundle on its own node when there are enough), and PACK
// puts them all on one node when one node can hold them all.
func idleMisplaced(g *group, cfg Config) string {
	if !g.idle {
		return ""
	}
	switch g.strategy {
	case "SPREAD":
		fit := 0
		for _, n := range cfg.Nodes {
			ok := true
			for _, b := range g.bundles {
				ok = ok && coversAll(n.Total, b.Demand)
			}
			if ok {
				fit++
			}
		}
		if want := min(fit, len(g.bundles)); len(g.nodeCount) < want {
			return fmt.Sprintf("%d distinct nodes, but %d nodes could each hold a bundle", len(g.nodeCount), want)
		}
	case "PACK":
		sum := map[string]float64{}
		for _, b := range g.bundles {
			addTo(sum, b.Demand)
		}
		for _, n := range cfg.Nodes {
			if coversAll(n.Total, sum) && len(g.nodeCount) != 1 {
				return fmt.Sprintf("%d nodes, but node %s could hold them all", len(g.nodeCount), n.Name)
			}
		}
	}
	return ""
}

// misplaced says why hd ran on a node its strategy rules out ("" if not).
func misplaced(m *model, cfg Config, hd *holder) string {
	switch {
	case strings.HasPrefix(hd.strategy, "affinity:"):
		if want := strings.TrimPrefix(hd.strategy, "affinity:"); hd.node != want {
			return "hard affinity to node " + want
		}
	case strings.HasPrefix(hd.strategy, "labels:"):
		n, _ := cfg.node(hd.node)
		return labelMismatch(strings.TrimPrefix(hd.strategy, "labels:"), n.Labels)
	case hd.group != "":
		g := m.groups[hd.group]
		if g == nil || g.ready == 0 {
			return ""
		}
		for _, b := range g.bundles {
			if (hd.bundle < 0 || b.Index == hd.bundle) && b.Node == hd.node {
				return ""
			}
		}
		return fmt.Sprintf("no bundle %d of group %s is there", hd.bundle, hd.group)
	}
	return ""
}

// labelMismatch checks "k=v1|v2,k2=v3" (In conditions) against labels.
func labelMismatch(sel string, labels map[string]string) string {
	for _, cond := range strings.Split(sel, ",") {
		k, vals, _ := strings.Cut(cond, "=")
		if !slices.Contains(strings.Split(vals, "|"), labels[k]) {
			return fmt.Sprintf("label %s=%q is not in %s", k, labels[k], vals)
		}
	}
	return ""
}

// checkCompletion checks that every task, actor (its creation and first
// call) and placement group (its creation) resolved without error (a
// WorkerCrashedError is judged by checkRetries), and that every task
// attempt that started either ended or died with its process.
func checkCompletion(m *model, _ Config) []Violation {
	var out []Violation
	for _, id := range m.order {
		t := m.tasks[id]
		if t.submit.Kind != Submit {
			continue
		}
		switch r := t.result; {
		case r == nil:
			out = append(out, Violation{Invariant: InvCompletion, At: ns(t.submit.Time), Tasks: []string{id},
				Detail: fmt.Sprintf("task %s was submitted at %s and never resolved", id, rel(m, t.submit.Time))})
		case r.Err != "" && r.ErrKind != ErrCrashed:
			out = append(out, Violation{Invariant: InvCompletion, At: ns(r.Time), Tasks: []string{id},
				Detail: fmt.Sprintf("task %s failed (%s): %s", id, r.ErrKind, r.Err)})
		}
	}
	for _, hd := range m.holders {
		if hd.ended == endedOpen && !hd.actor {
			out = append(out, Violation{Invariant: InvCompletion, At: ns(hd.from), Node: hd.node, Tasks: []string{hd.name()},
				Detail: fmt.Sprintf("%s started in process %d and neither ended nor crashed", hd.name(), hd.pid)})
		}
	}
	return out
}

// checkLeaks turns the driver's Leak events (a node still short of
// resources after all work of a phase ended) into violations.
func checkLeaks(m *model, _ Config) []Violation {
	out := make([]Violation, 0, len(m.leaks))
	for _, e := range m.leaks {
		out = append(out, Violation{Invariant: InvLeak, At: e.At(), Node: e.Node, Detail: e.Detail})
	}
	return out
}
