package sched

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInfeasible is matched (errors.Is) by every *InfeasibleError: the demand
// can never be met by the alive nodes as they are, even if they were empty.
// It stays true until the cluster changes (a node joins or comes back), so
// callers keep such demand waiting and report it, as Ray reports infeasible
// tasks and placement groups, rather than retrying in a loop.
var ErrInfeasible = errors.New("infeasible")

// ErrPending is matched (errors.Is) by every *PendingError: the demand fits
// the cluster's capacity but not what is free now; retry when resources are
// released (Ray keeps such a placement group PENDING and such a task queued).
var ErrPending = errors.New("pending")

// InfeasibleError says why a demand (a task's resources or a placement
// group's bundles) can never be satisfied by the alive nodes' total
// capacity. Match it with errors.As or errors.Is(err, ErrInfeasible).
type InfeasibleError struct {
	// Bundle is the index of the bundle that cannot be placed, or -1 when
	// the error is about a task's demand or the group as a whole (for
	// example STRICT_SPREAD with more bundles than alive nodes).
	Bundle int
	// Resource is the resource that is short, "" when the problem is not
	// one resource (too few nodes, labels, a dead affinity target).
	Resource string
	// Need is the amount of Resource required; Most is the most any
	// eligible alive node has in total. Both 0 when Resource is "".
	Need, Most Quantity
	// Reason is the full explanation, without the "infeasible: " prefix.
	Reason string
}

// Error returns "infeasible: " followed by Reason.
func (e *InfeasibleError) Error() string { return "infeasible: " + e.Reason }

// Is makes errors.Is(err, ErrInfeasible) true.
func (e *InfeasibleError) Is(target error) bool { return target == ErrInfeasible }

// PendingError says why a demand cannot be placed now although the alive
// nodes' capacity could hold it: what is free is not enough or not in the
// right places. Match it with errors.As or errors.Is(err, ErrPending).
type PendingError struct {
	// Bundle is the index of the first bundle that could not be placed, or
	// -1 for a task's demand or a group-wide shortage.
	Bundle int
	// Resource is the resource that is short, "" when each resource is
	// free somewhere but not together on one eligible node.
	Resource string
	// Need is the amount of Resource required; Free is the most of it free
	// on any eligible node. Both 0 when Resource is "".
	Need, Free Quantity
	// Node, for task placement only, is where the request should wait
	// (queue) under the strategy, as Ray queues a task on a feasible but
	// busy node; "" when there is no preference.
	Node string
	// Reason is the full explanation, without the "pending: " prefix.
	Reason string
}

// Error returns "pending: " followed by Reason.
func (e *PendingError) Error() string { return "pending: " + e.Reason }

// Is makes errors.Is(err, ErrPending) true.
func (e *PendingError) Is(target error) bool { return target == ErrPending }

// findShortfall describes why demand fits none of the given (id, have) pairs:
// the first resource (by name) that no candidate has enough of, with the
// most any has and where; or, when every resource is somewhere, the first
// candidate's missing resource. ok is false if some candidate covers demand.
type shortfall struct {
	resource   string
	need, most Quantity
	node       string // node holding "most", or the closest node
	together   bool   // every resource is available somewhere, not on one node
}

func findShortfall(ids []string, have []ResourceSet, demand ResourceSet) (shortfall, bool) {
	for _, h := range have {
		if h.Covers(demand) {
			return shortfall{}, false
		}
	}
	for _, k := range demand.Names() {
		d := demand[k]
		if d <= 0 {
			continue
		}
		var most Quantity
		where := ""
		for i, h := range have {
			if h[k] > most {
				most, where = h[k], ids[i]
			}
		}
		if most < d {
			return shortfall{resource: k, need: d, most: most, node: where}, true
		}
	}
	// Each resource exists somewhere; report the first node's gap.
	if len(have) == 0 {
		return shortfall{}, true
	}
	k, h, d, _ := have[0].Missing(demand)
	return shortfall{resource: k, need: d, most: h, node: ids[0], together: true}, true
}

// describe renders a shortfall for messages; what is "in total" or "free".
func (s shortfall) describe(what string) string {
	if s.resource == "" {
		return "no eligible alive node"
	}
	if s.together {
		return fmt.Sprintf("no single eligible node has all of it %s at once (node %s has %s %s of %s)",
			what, s.node, s.most, s.resource, s.need)
	}
	if s.most == 0 {
		if model, ok := strings.CutPrefix(s.resource, AcceleratorTypePrefix); ok {
			return fmt.Sprintf("no eligible alive node has accelerator type %q %s (resource %s)", model, what, s.resource)
		}
		return fmt.Sprintf("no eligible alive node has any %s %s (needs %s)", s.resource, what, s.need)
	}
	return fmt.Sprintf("needs %s=%s but the most %s on any eligible node is %s (node %s)",
		s.resource, s.need, what, s.most, s.node)
}

// ErrReservation is wrapped by CheckStrategy's errors, and by the FSM when a
// proposed placement-group reservation is not valid against committed state
// (unknown or dead node, over a node's capacity, or breaking the strategy).
var ErrReservation = errors.New("invalid reservation")
