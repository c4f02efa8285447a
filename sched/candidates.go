package sched

// cand is one alive node judged against one request.
type cand struct {
	node *Node
	// fits: labels match, totals cover the demand, and no veto: it can
	// ever hold the demand.
	fits bool
	// free: fits, and the demand is free there now.
	free bool
	// load is the node's critical resource utilization (criticalLoad).
	load float64
}

// judged is a snapshot judged against one request: the policies' common
// input.
type judged struct {
	req   Request
	all   []cand // alive nodes in ID order
	local *cand  // Snapshot.Local among all; nil when not alive or absent
	// size is how many nodes the snapshot lists, alive or not (Ray's top k
	// counts every node it knows).
	size int
}

// judge prepares s for r: every alive node in ID order with its fit,
// free and load.
func judge(s Snapshot, r Request) *judged {
	alive := aliveSorted(s.Nodes)
	v := &judged{req: r, all: make([]cand, len(alive)), size: len(s.Nodes)}
	for i, n := range alive {
		c := &v.all[i]
		c.node = n
		ok, _ := r.Strategy.Labels.Matches(n.Labels)
		c.fits = ok && n.Total.Covers(r.Demand) && !(n.ID == s.Local && r.Veto != "")
		c.free = c.fits && n.Available.Covers(r.Demand)
		c.load = criticalLoad(n.Total, n.Available)
		if n.ID == s.Local {
			v.local = c
		}
	}
	return v
}

// stay reports whether a Stay request keeps to Local: Local is feasible
// under the strategy (for hard node affinity, Local is the target).
func (v *judged) stay() bool {
	st := v.req.Strategy
	if !v.req.Stay || v.local == nil || !v.local.fits {
		return false
	}
	return st.Kind != StrategyNodeAffinity || st.Soft || st.Node == v.local.node.ID
}

// others returns the nodes other than Local that satisfy keep, in ID order.
func (v *judged) others(keep func(*cand) bool) []*cand {
	var out []*cand
	for i := range v.all {
		c := &v.all[i]
		if c != v.local && keep(c) {
			out = append(out, c)
		}
	}
	return out
}

// byID returns the alive node with id, or nil.
func (v *judged) byID(id string) *cand {
	for i := range v.all {
		if v.all[i].node.ID == id {
			return &v.all[i]
		}
	}
	return nil
}

// feasible returns every node that fits, Local included, in ID order.
func (v *judged) feasible() []*cand {
	var out []*cand
	for i := range v.all {
		if v.all[i].fits {
			out = append(out, &v.all[i])
		}
	}
	return out
}
