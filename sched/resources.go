// Package sched holds nodeup's scheduling vocabulary and its one placement
// policy layer, as pure functions over a snapshot the caller gathers: no
// I/O, no locks, no clock, no storage types, randomness only from a
// passed-in *rand.Rand.
//
// Vocabulary: fixed-point resource quantities and resource sets; label
// selectors; Ray's placement-group resource names.
//
// Policies: Decide places one task or actor (Ray's composite policy over
// its hybrid, SPREAD, node-affinity, label and bundle policies; MoveTarget
// re-places a queued one), and PlaceBundles places a placement group's
// bundles (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD; CheckStrategy checks
// an assignment). The node daemon (cluster/) gathers the snapshots, calls
// these for every task lease, actor and placement group, and carries out
// the decisions; committed reservations live in the FSM (store/).
// Decisions fail with *InfeasibleError (never, on the alive nodes as they
// are) or *PendingError (not now).
package sched

import (
	"slices"
	"strings"
)

// ResourceSet maps a resource name ("CPU", "GPU", "memory", "TPU-v3",
// "node:<id>") to its quantity in fixed-point units (1/10000; bytes for
// "memory" and "object_store_memory"). A missing name means zero. Methods
// that only read accept a nil set.
type ResourceSet map[string]Quantity

// Clone returns a copy of r that shares nothing with it; never nil, so the
// copy can be added to even when r is nil.
func (r ResourceSet) Clone() ResourceSet {
	c := make(ResourceSet, len(r))
	for k, v := range r {
		c[k] = v
	}
	return c
}

// Add adds o to r in place, creating missing names. Sums saturate at
// MaxQuantity rather than wrap (cluster-wide memory totals in bytes can get
// near int64 range). r must be non-nil unless o is empty.
func (r ResourceSet) Add(o ResourceSet) {
	for k, v := range o {
		r[k] = satAdd(r[k], v)
	}
}

// Sub subtracts o from r in place, as when a lease takes resources from a
// node. Results may reach zero (the name is kept) or go negative, which
// callers treat as over-commitment; they saturate rather than wrap. r must be
// non-nil unless o is empty.
func (r ResourceSet) Sub(o ResourceSet) {
	for k, v := range o {
		r[k] = satSub(r[k], v)
	}
}

func satAdd(a, b Quantity) Quantity {
	s := a + b
	switch {
	case b > 0 && s < a:
		return MaxQuantity
	case b < 0 && s > a:
		return minQuantity
	}
	return s
}

func satSub(a, b Quantity) Quantity {
	s := a - b
	switch {
	case b < 0 && s < a:
		return MaxQuantity
	case b > 0 && s > a:
		return minQuantity
	}
	return s
}

// Covers reports whether r has at least the demanded amount of every
// resource demand asks a positive amount of, as Ray's feasibility check.
func (r ResourceSet) Covers(demand ResourceSet) bool {
	// Not via Missing: this is the scheduler's inner loop, and Missing
	// sorts names to report the first one deterministically.
	for k, d := range demand {
		if d > 0 && r[k] < d {
			return false
		}
	}
	return true
}

// Missing returns the first resource, by name order, that r lacks for
// demand, with the amount r has and the amount demanded, for messages like
// "needs GPU=1, node has 0". ok is false when r covers demand.
func (r ResourceSet) Missing(demand ResourceSet) (name string, have, want Quantity, ok bool) {
	for _, k := range demand.Names() {
		if d := demand[k]; d > 0 && r[k] < d {
			return k, r[k], d, true
		}
	}
	return "", 0, 0, false
}

// Equal reports whether r and o hold the same quantities, a missing name
// being equal to zero (so {"CPU": 0} equals {}).
func (r ResourceSet) Equal(o ResourceSet) bool {
	for k, v := range r {
		if o[k] != v {
			return false
		}
	}
	for k, v := range o {
		if r[k] != v {
			return false
		}
	}
	return true
}

// IsZero reports whether every quantity in r is zero (true for nil and empty).
func (r ResourceSet) IsZero() bool {
	for _, v := range r {
		if v != 0 {
			return false
		}
	}
	return true
}

// Names returns r's resource names in sorted order, for deterministic
// iteration and output.
func (r ResourceSet) Names() []string {
	names := make([]string, 0, len(r))
	for k := range r {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// String returns "CPU=2, TPU-v3=0.5" sorted by name, in whole units; "" for
// an empty set. ParseResources accepts the output back when no quantity is
// negative.
func (r ResourceSet) String() string {
	var b strings.Builder
	for i, k := range r.Names() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(r[k].String())
	}
	return b.String()
}

// Floats returns r in whole units as float64, for JSON output in the same
// shape ray.available_resources() prints. Not for arithmetic.
func (r ResourceSet) Floats() map[string]float64 {
	m := make(map[string]float64, len(r))
	for k, v := range r {
		m[k] = v.Float()
	}
	return m
}
