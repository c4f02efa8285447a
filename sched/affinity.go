package sched

import (
	"fmt"
	"math/rand/v2"
)

// affinity is the node-affinity policy (Ray's NodeAffinitySchedulingPolicy
// with spill_on_unavailable off): the target when it can ever hold the
// demand, free or not (the work waits there); otherwise nil when hard, and
// the hybrid policy over the other feasible nodes when soft.
func (v *judged) affinity(st Strategy, rng *rand.Rand) *cand {
	if t := v.byID(st.Node); t != nil && t.fits {
		return t
	}
	if !st.Soft {
		return nil
	}
	return v.hybrid(rng)
}

// affinityReason says why hard affinity's target cannot hold r: not
// alive, its labels, its totals, or its veto; the one message for tasks
// and actors.
func (v *judged) affinityReason() *InfeasibleError {
	r := v.req
	id := r.Strategy.Node
	e := &InfeasibleError{Bundle: -1}
	t := v.byID(id)
	switch {
	case t == nil:
		e.Reason = fmt.Sprintf("node affinity: node %s is not alive", id)
	case !labelsOK(r.Strategy.Labels, t.node):
		_, why := r.Strategy.Labels.Matches(t.node.Labels)
		e.Reason = fmt.Sprintf("node affinity: node %s does not match labels %s (%s)", t.node.name(), r.Strategy.Labels, why)
	case !t.node.Total.Covers(r.Demand):
		k, have, want, _ := t.node.Total.Missing(r.Demand)
		e.Resource, e.Need, e.Most = k, want, have
		e.Reason = fmt.Sprintf("node affinity: node %s has %s %s in total, the demand needs %s", t.node.name(), k, have, want)
	default:
		e.Reason = fmt.Sprintf("node affinity: node %s: %s", t.node.name(), r.Veto)
	}
	return e
}
