package sched

import (
	"fmt"
	"math/rand/v2"
)

// StrategyKind is a task's or actor's scheduling strategy, spelled as Ray
// spells it and as wire.Strategy carries it.
type StrategyKind string

// The task and actor strategies.
const (
	// StrategyHybrid is Ray's DEFAULT: the hybrid policy (SpreadThreshold).
	StrategyHybrid StrategyKind = ""
	// StrategySpread is Ray's "SPREAD": round robin over the feasible nodes.
	StrategySpread StrategyKind = "SPREAD"
	// StrategyNodeAffinity is Ray's NodeAffinitySchedulingStrategy: one
	// node, hard (only there) or soft (there when it can, else hybrid).
	StrategyNodeAffinity StrategyKind = "NODE_AFFINITY"
)

// Strategy is how one task or actor chooses its node.
type Strategy struct {
	// Kind is the strategy; Node and Soft are for StrategyNodeAffinity.
	Kind StrategyKind
	Node string
	Soft bool
	// Labels are hard conditions on node labels that hold with any Kind
	// (Ray's label_selector, and NodeLabelSchedulingStrategy's hard).
	Labels LabelSelector
	// SoftLabels are preferred node labels (Ray's
	// NodeLabelSchedulingStrategy's soft): among the nodes Labels allow,
	// those matching SoftLabels are chosen first (nodeLabel). Only with
	// StrategyHybrid.
	SoftLabels LabelSelector
}

// Validate rejects an unknown Kind, a malformed Labels or SoftLabels, and
// SoftLabels with a Kind other than StrategyHybrid, naming them; errors
// about the selectors wrap ErrInvalidLabelSelector.
func (st Strategy) Validate() error {
	switch st.Kind {
	case StrategyHybrid, StrategySpread, StrategyNodeAffinity:
	default:
		return fmt.Errorf("unknown scheduling strategy %q: accepted are \"\" (DEFAULT), %s, %s", st.Kind, StrategySpread, StrategyNodeAffinity)
	}
	if err := st.Labels.Validate(); err != nil {
		return err
	}
	if len(st.SoftLabels) > 0 && st.Kind != StrategyHybrid {
		return fmt.Errorf("%w: soft labels %s go with the DEFAULT strategy (Ray's NodeLabelSchedulingStrategy), not %s",
			ErrInvalidLabelSelector, st.SoftLabels, st.Kind)
	}
	if err := st.SoftLabels.Validate(); err != nil {
		return fmt.Errorf("soft labels: %w", err)
	}
	return nil
}

// Snapshot is the cluster as one placement decision sees it: a copy the
// caller gathered (the node table, resource reports) that Decide only
// reads.
type Snapshot struct {
	// Nodes are the nodes with their totals, free resources, labels and
	// liveness; order does not matter (decisions go by ID).
	Nodes []Node
	// Local is the deciding node (a task's), or the node the work prefers
	// (an actor's owner): Ray's preferred node. "" for none.
	Local string
	// SpreadNext is SPREAD's round-robin position, kept by the caller from
	// one Decision to the next (Decision.SpreadNext).
	SpreadNext int
}

// Request is one task's or actor's demand and how it may be placed.
type Request struct {
	// Demand is what it holds while it runs, in fixed-point units.
	Demand ResourceSet
	// Strategy chooses among the feasible nodes.
	Strategy Strategy
	// Stay is set on a request another node already chose this one for
	// (spillback): it runs or waits on Local whenever Local can ever hold
	// it, so a request moves at most one hop per decision (as Ray's).
	Stay bool
	// Veto says why Local can never hold the demand although its totals
	// cover it (its GPU devices, a bundle too small); "" when it can. A
	// request with Stay that Local vetoes is infeasible with this reason:
	// the node that spilled it here could not know.
	Veto string
	// Bundle, when set, lists the nodes holding the placement-group bundle
	// the demand must run in; only they are candidates.
	Bundle *BundleNodes
}

// BundleNodes are where a placement-group demand can run, as the group's
// record says (the node table does not list bundle resources).
type BundleNodes struct {
	// Group is the placement group's ID, for messages.
	Group string
	// Nodes are the IDs of the nodes holding a matching bundle, in the
	// order to try them.
	Nodes []string
	// Reason says why Nodes is empty (the group is pending, removed or
	// unknown).
	Reason string
}

// Outcome is what a Decision asks of its caller.
type Outcome int

const (
	// Run: the chosen node has the demand free now, as the snapshot shows.
	Run Outcome = iota + 1
	// Wait: the chosen node can hold the demand but it is not free there
	// (nor anywhere the policy would rather use): queue it there, as Ray
	// queues a feasible task on a busy node.
	Wait
)

// String returns "run" or "wait".
func (o Outcome) String() string {
	switch o {
	case Run:
		return "run"
	case Wait:
		return "wait"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Decision is where one request goes.
type Decision struct {
	// Node is the chosen node's ID (Snapshot.Local: run or queue here).
	Node string
	// Outcome says whether it can start there now.
	Outcome Outcome
	// SpreadNext is the round-robin position for the next decision.
	SpreadNext int
}

// Decide places one task or actor request on s: the composite of the
// bundle, node-affinity, SPREAD, node-label and hybrid policies (Ray's
// CompositeSchedulingPolicy), each a pure function of s, r and rng (used
// only to choose among Ray's top k nodes). Label selectors, totals and
// Veto decide which nodes are feasible under every strategy; a Stay
// request stays on Local when Local is feasible.
//
// It returns *InfeasibleError when no node can ever hold the demand under
// the strategy, naming the missing resource, the failing label, the
// affinity target or Local's veto, and *PendingError when a bundle
// request's group has no live node holding its bundle (yet). A node that
// can hold the demand but has it free nowhere is a Decision with Outcome
// Wait, not an error.
func Decide(s Snapshot, r Request, rng *rand.Rand) (Decision, error) {
	d := Decision{SpreadNext: s.SpreadNext}
	c := localFirst(s, r)
	var v *judged
	if c == nil {
		v = judge(s, r)
		switch {
		case r.Bundle != nil:
			c = v.inBundle(r.Bundle)
		case r.Stay && r.Veto != "":
			// Infeasible: the node that sent it here could not know the
			// veto, and sending it on could bounce it back.
		case r.Strategy.Kind == StrategyNodeAffinity:
			c = v.affinity(r.Strategy, rng)
		case r.Strategy.Kind == StrategySpread:
			c, d.SpreadNext = v.spread(s.SpreadNext)
		case len(r.Strategy.SoftLabels) > 0:
			c = v.nodeLabel(rng)
		default:
			c = v.hybrid(rng)
		}
	}
	if c == nil {
		return d, v.infeasible()
	}
	d.Node, d.Outcome = c.node.ID, Wait
	if c.free {
		d.Outcome = Run
	}
	return d, nil
}

// MoveTarget is where a request waiting on s.Local should go now that a
// new snapshot shows another node with its demand free (Ray's raylet
// re-schedules its queue on every resource update): the hybrid choice among
// the other feasible nodes with the demand free. ok is false when none
// has, and always for a Pinned request.
func MoveTarget(s Snapshot, r Request, rng *rand.Rand) (node string, ok bool) {
	if r.Pinned() {
		return "", false
	}
	v := judge(s, r)
	c := v.best(v.others(func(c *cand) bool { return c.free }), rng)
	if c == nil {
		return "", false
	}
	return c.node.ID, true
}

// Pinned reports whether r waits where it was placed whatever frees up
// elsewhere: hard node affinity, and demand in a placement group (its
// bundle is where it is).
func (r Request) Pinned() bool {
	_, _, inGroup := PlacementGroupOf(r.Demand)
	return inGroup || r.Bundle != nil || (r.Strategy.Kind == StrategyNodeAffinity && !r.Strategy.Soft)
}
