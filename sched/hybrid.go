package sched

import (
	"cmp"
	"math/rand/v2"
	"slices"
)

// SpreadThreshold is the hybrid policy's utilization threshold, as Ray's
// scheduler_spread_threshold (0.5): Local takes work itself while its
// critical load is below it; at or above it, work goes to another node
// below it with the demand free, and only when none is does Local pack up
// to 100%.
const SpreadThreshold = 0.5

// TopKFraction is the share of the cluster's nodes among which the hybrid
// policy chooses at random once it leaves Local (Ray's
// scheduler_top_k_fraction, 0.2; at least one node, Ray's
// scheduler_top_k_absolute), so that deciders with the same view do not
// all pick the same node.
const TopKFraction = 0.2

// loadKinds are the resources whose use makes a node utilized. Ray's
// critical resource utilization counts CPU, memory and object store
// memory; nodeup counts GPU in place of object store memory, which the
// scheduler does not track.
var loadKinds = []string{CPU, GPU, Memory}

// criticalLoad is a node's critical resource utilization, as Ray's
// CalculateCriticalResourceUtilization: the highest share of its CPU, GPU
// or memory in use, from total and free amounts, in [0, 1] (0 when it has
// none of them).
func criticalLoad(total, avail ResourceSet) float64 {
	load := 0.0
	for _, k := range loadKinds {
		t := total[k]
		if t <= 0 {
			continue
		}
		load = max(load, 1-float64(min(avail[k], t))/float64(t))
	}
	return load
}

// hybrid is Ray's hybrid policy (DEFAULT): Local while it has the demand
// free below SpreadThreshold; else the best other node below the threshold
// with it free; else Local with it free (pack); else the best other node
// with it free; else wait on Local when it can ever hold it; else wait on
// the best other feasible node. nil when no node is feasible.
func (v *judged) hybrid(rng *rand.Rand) *cand {
	l := v.local
	if l != nil && l.free && l.load < SpreadThreshold {
		return l
	}
	if c := v.best(v.others(func(c *cand) bool { return c.free && c.load < SpreadThreshold }), rng); c != nil {
		return c
	}
	if l != nil && l.free {
		return l
	}
	if c := v.best(v.others(func(c *cand) bool { return c.free }), rng); c != nil {
		return c
	}
	if l != nil && l.fits {
		return l
	}
	return v.best(v.others(func(c *cand) bool { return c.fits }), rng)
}

// best chooses among cands the way Ray's hybrid policy does once it leaves
// Local: ordered by critical load (then ID), one of the first k at random,
// k = max(1, TopKFraction of the snapshot's nodes). Ray truncates loads
// below the threshold to 0 and so orders those by ID; ordering by the load
// itself sends spillback to the emptiest node, which on clusters under ten
// nodes (k = 1) is all the choice there is. nil when cands is empty; a nil
// rng always takes the first.
func (v *judged) best(cands []*cand, rng *rand.Rand) *cand {
	if len(cands) == 0 {
		return nil
	}
	slices.SortStableFunc(cands, func(a, b *cand) int { return cmp.Compare(a.load, b.load) })
	k := min(max(1, int(float64(v.size)*TopKFraction)), len(cands))
	if k == 1 || rng == nil {
		return cands[0]
	}
	return cands[rng.IntN(k)]
}
