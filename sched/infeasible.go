package sched

import (
	"fmt"
	"strings"
)

// infeasible says why v's request has no node: the bundle's, the veto of
// a Stay request, the hard affinity target's, the labels no alive node
// matches, Local's veto when only Local's totals hold the demand, or the
// resource no matching node has enough of in total.
func (v *judged) infeasible() error {
	r := v.req
	sel := r.Strategy.Labels
	switch {
	case r.Bundle != nil:
		return v.bundleReason(r.Bundle)
	case r.Stay && r.Veto != "":
		return &InfeasibleError{Bundle: -1, Reason: r.Veto}
	case r.Strategy.Kind == StrategyNodeAffinity && !r.Strategy.Soft:
		return v.affinityReason()
	}
	var matching []*Node
	for i := range v.all {
		n := v.all[i].node
		if labelsOK(sel, n) {
			matching = append(matching, n)
		}
	}
	if len(matching) == 0 && len(sel) > 0 {
		return &InfeasibleError{Bundle: -1, Reason: v.noLabelMatch()}
	}
	if l := v.local; r.Veto != "" && l != nil && labelsOK(sel, l.node) && l.node.Total.Covers(r.Demand) {
		return &InfeasibleError{Bundle: -1, Reason: r.Veto}
	}
	return totalShortfall(matching, r.Demand)
}

// totalShortfall explains why none of nodes can ever hold demand: the
// first resource (by name) that no node has enough of in total, with the
// most any has, or that no single node has all of it.
func totalShortfall(nodes []*Node, demand ResourceSet) *InfeasibleError {
	most := ResourceSet{}
	for _, n := range nodes {
		for k, q := range n.Total {
			most[k] = max(most[k], q)
		}
	}
	for _, k := range demand.Names() {
		if demand[k] <= most[k] {
			continue
		}
		e := &InfeasibleError{Bundle: -1, Resource: k, Need: demand[k], Most: most[k]}
		if most[k] == 0 {
			e.Reason = fmt.Sprintf("no alive node has resource %q (requested %s)", k, demand[k])
		} else {
			e.Reason = fmt.Sprintf("no single node has %s %s: the most any alive node has is %s", k, demand[k], most[k])
		}
		return e
	}
	return &InfeasibleError{Bundle: -1, Reason: fmt.Sprintf("no single alive node has all of %s at once", demand)}
}

// noLabelMatch says why no alive node matches the request's labels: the
// selector, and each alive node's first failing condition (three at
// most).
func (v *judged) noLabelMatch() string {
	sel := v.req.Strategy.Labels
	var why []string
	for i := range v.all {
		if len(why) == 3 {
			break
		}
		if ok, reason := sel.Matches(v.all[i].node.Labels); !ok {
			why = append(why, fmt.Sprintf("node %s: %s", v.all[i].node.name(), reason))
		}
	}
	return fmt.Sprintf("no alive node matches labels %s (%s)", sel, strings.Join(why, "; "))
}

// labelsOK reports whether n's labels satisfy sel.
func labelsOK(sel LabelSelector, n *Node) bool {
	ok, _ := sel.Matches(n.Labels)
	return ok
}
