package sched

import (
	"cmp"
	"slices"
)

// Node is one node as placement sees it: the scheduler's input, built by the
// caller from the node table (identity, totals, labels, liveness) and the
// latest resource reports (Available). It mirrors Ray's NodeResources plus
// the node's alive flag.
//
// Total and Available are in fixed-point units like every ResourceSet (see
// Quantity); Total normally includes the implicit "node:<ID>" = 1 and, on GPU
// nodes, "accelerator_type:<model>" = 1. Available is what is free now, after
// running work and committed placement-group reservations; it may exceed
// Total briefly in stale reports and is never trusted beyond Total.
// Placement functions only read a Node; they never modify the maps.
type Node struct {
	// ID is the node's unique ID (the node table key).
	ID string
	// Name is the node's name, for messages; "" shows ID instead.
	Name string
	// Total is the node's full capacity.
	Total ResourceSet
	// Available is the capacity free now.
	Available ResourceSet
	// Labels are the node's labels (e.g. "zone": "rack1"), matched by
	// LabelSelector. Nil means no labels.
	Labels map[string]string
	// Alive is false for nodes that are dead, left or suspect-and-excluded;
	// such nodes are never chosen and do not count toward feasibility.
	Alive bool
}

// name is n's name for messages: Name, else ID.
func (n *Node) name() string {
	if n.Name != "" {
		return n.Name
	}
	return n.ID
}

// freeFraction is the mean over the resources demand asks for of the
// fraction of the node's total still free in avail (after subtracting
// nothing); 0 when demand names nothing the node has. Higher means emptier.
// It is the per-demand analogue of Ray's LeastResourceScorer.
func freeFraction(total, avail, demand ResourceSet) float64 {
	var sum float64
	var n int
	for k, d := range demand {
		t := total[k]
		if d <= 0 || t <= 0 {
			continue
		}
		a := min(avail[k], t)
		sum += float64(a) / float64(t)
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// aliveSorted returns pointers to the alive nodes sorted by ID, so every
// decision is deterministic whatever the caller's order. Later duplicates
// of an ID are dropped.
func aliveSorted(nodes []Node) []*Node {
	out := make([]*Node, 0, len(nodes))
	seen := make(map[string]bool, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		if !n.Alive || seen[n.ID] {
			continue
		}
		seen[n.ID] = true
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *Node) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
