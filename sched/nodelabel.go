package sched

import "math/rand/v2"

// nodeLabel is the policy of Ray's NodeLabelSchedulingStrategy for a
// request with soft labels: among the nodes the hard labels (and totals)
// allow, a node matching the soft labels with the demand free; else any
// with it free; else one matching the soft labels to wait on; else any
// feasible one. Within each set the choice is best's (least loaded,
// Ray's top k), Local counted like any other node. nil when no node is
// feasible.
func (v *judged) nodeLabel(rng *rand.Rand) *cand {
	soft := func(c *cand) bool { return labelsOK(v.req.Strategy.SoftLabels, c.node) }
	for _, keep := range []func(*cand) bool{
		func(c *cand) bool { return c.free && soft(c) },
		func(c *cand) bool { return c.free },
		func(c *cand) bool { return c.fits && soft(c) },
		func(c *cand) bool { return c.fits },
	} {
		if c := v.best(v.matching(keep), rng); c != nil {
			return c
		}
	}
	return nil
}

// matching returns every alive node, Local included, that satisfies keep,
// in ID order.
func (v *judged) matching(keep func(*cand) bool) []*cand {
	var out []*cand
	for i := range v.all {
		if c := &v.all[i]; keep(c) {
			out = append(out, c)
		}
	}
	return out
}
