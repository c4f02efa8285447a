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
		v.all[i] = judgeNode(s, r, n)
		if n.ID == s.Local {
			v.local = &v.all[i]
		}
	}
	return v
}

// judgeNode is n judged against r.
func judgeNode(s Snapshot, r Request, n *Node) cand {
	c := cand{node: n, load: criticalLoad(n.Total, n.Available)}
	c.fits = labelsOK(r.Strategy.Labels, n) && n.Total.Covers(r.Demand) && !(n.ID == s.Local && r.Veto != "")
	c.free = c.fits && n.Available.Covers(r.Demand)
	return c
}

// localFirst returns Local judged against r when r goes there whatever
// the other nodes look like: Local can hold it and r stays (Stay; for
// hard affinity only when Local is the target), has affinity to Local, or
// is hybrid with the demand free below SpreadThreshold. nil otherwise.
// This is the common case, decided without judging every node.
func localFirst(s Snapshot, r Request) *cand {
	if r.Bundle != nil || s.Local == "" || len(r.Strategy.SoftLabels) > 0 {
		return nil // soft labels weigh every node (nodeLabel)
	}
	var l cand
	for i := range s.Nodes {
		if n := &s.Nodes[i]; n.ID == s.Local && n.Alive {
			l = judgeNode(s, r, n)
			break
		}
	}
	if !l.fits {
		return nil
	}
	st := r.Strategy
	affinity := st.Kind == StrategyNodeAffinity
	switch {
	case r.Stay && (!affinity || st.Soft || st.Node == s.Local):
	case affinity && st.Node == s.Local:
	case st.Kind == StrategyHybrid && l.free && l.load < SpreadThreshold:
	default:
		return nil
	}
	return &l
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
func (v *judged) feasible() []*cand { return v.matching(func(c *cand) bool { return c.fits }) }
