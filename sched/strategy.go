package sched

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// TaskStrategyKind names a task or actor scheduling strategy, as Ray's
// scheduling_strategy option.
type TaskStrategyKind string

// The task strategies.
const (
	// StrategyDefault is Ray's "DEFAULT" hybrid policy: prefer the local
	// node, pack onto nodes below the spread threshold, then spread to the
	// least utilized. "" means the same.
	StrategyDefault TaskStrategyKind = "DEFAULT"
	// StrategySpread is Ray's "SPREAD": the least utilized node with room,
	// ties taken in round-robin order across calls.
	StrategySpread TaskStrategyKind = "SPREAD"
	// StrategyNodeAffinity is Ray's NodeAffinitySchedulingStrategy: run on
	// TaskStrategy.NodeID; hard fails when that node cannot, soft falls
	// back to DEFAULT.
	StrategyNodeAffinity TaskStrategyKind = "NODE_AFFINITY"
	// StrategyNodeLabel is Ray's NodeLabelSchedulingStrategy: only nodes
	// matching TaskStrategy.Labels, preferring those matching SoftLabels,
	// least utilized first.
	StrategyNodeLabel TaskStrategyKind = "NODE_LABEL"
)

// TaskStrategyKinds lists the accepted kinds in documentation order.
var TaskStrategyKinds = []TaskStrategyKind{StrategyDefault, StrategySpread, StrategyNodeAffinity, StrategyNodeLabel}

// ErrInvalidTaskStrategy is wrapped by ParseTaskStrategyKind and
// TaskStrategy.Validate errors.
var ErrInvalidTaskStrategy = errors.New("invalid scheduling strategy")

// ParseTaskStrategyKind parses a kind name, case-insensitively, ignoring
// surrounding space; "" is StrategyDefault. The error wraps
// ErrInvalidTaskStrategy, quotes s and lists the accepted names.
func ParseTaskStrategyKind(s string) (TaskStrategyKind, error) {
	t := TaskStrategyKind(strings.ToUpper(strings.TrimSpace(s)))
	if t == "" {
		return StrategyDefault, nil
	}
	if slices.Contains(TaskStrategyKinds, t) {
		return t, nil
	}
	return "", fmt.Errorf("%w %q: accepted are %s", ErrInvalidTaskStrategy, s, joinNames(TaskStrategyKinds))
}

// TaskStrategy is where a task or actor may run. The zero value is
// DEFAULT. Labels apply to every kind, as Ray's label_selector option does
// alongside any strategy.
type TaskStrategy struct {
	// Kind is the strategy; "" means StrategyDefault.
	Kind TaskStrategyKind
	// NodeID is the NODE_AFFINITY target.
	NodeID string
	// Soft, for NODE_AFFINITY, falls back to DEFAULT when the target is
	// dead or can never run the demand (Ray's soft=True).
	Soft bool
	// SpillOnUnavailable, for soft NODE_AFFINITY, also falls back when the
	// target is alive but busy now (Ray's _spill_on_unavailable).
	SpillOnUnavailable bool
	// Labels are hard label conditions: only matching nodes are eligible.
	Labels LabelSelector
	// SoftLabels are preferred label conditions: among eligible nodes with
	// room, matching ones are chosen first; never a reason to fail.
	SoftLabels LabelSelector
}

// Validate checks the kind, that NODE_AFFINITY names a node, and both
// label selectors. Errors wrap ErrInvalidTaskStrategy or
// ErrInvalidLabelSelector.
func (t TaskStrategy) Validate() error {
	kind := t.kind()
	if !slices.Contains(TaskStrategyKinds, kind) {
		_, err := ParseTaskStrategyKind(string(t.Kind))
		return err
	}
	if kind == StrategyNodeAffinity && t.NodeID == "" {
		return fmt.Errorf("%w: NODE_AFFINITY needs a node ID", ErrInvalidTaskStrategy)
	}
	if err := t.Labels.Validate(); err != nil {
		return err
	}
	if err := t.SoftLabels.Validate(); err != nil {
		return fmt.Errorf("soft labels: %w", err)
	}
	return nil
}

func (t TaskStrategy) kind() TaskStrategyKind {
	if t.Kind == "" {
		return StrategyDefault
	}
	return t.Kind
}

// AcceleratorQuantity is the amount of "accelerator_type:<model>" a demand
// asks for to require that accelerator, 0.001 as in Ray.
const AcceleratorQuantity Quantity = 10

// WithAcceleratorType returns a copy of demand that also asks for
// AcceleratorQuantity of "accelerator_type:<model>", so only nodes that
// report that accelerator model qualify (Ray's accelerator_type= option).
func WithAcceleratorType(demand ResourceSet, model string) ResourceSet {
	d := demand.Clone()
	d[AcceleratorTypeResource(model)] = AcceleratorQuantity
	return d
}

// Filter is one feasibility step of node selection (Nomad's
// FeasibilityChecker): Check returns "" when the node passes and a short
// reason (for messages) when it does not.
type Filter interface {
	// Name is a short label for summaries, e.g. "alive", "labels".
	Name() string
	// Check returns "" to keep n, or why n is rejected.
	Check(n *Node) string
}

// AliveFilter rejects nodes that are not alive.
type AliveFilter struct{}

// Name returns "alive".
func (AliveFilter) Name() string { return "alive" }

// Check rejects a node whose Alive is false.
func (AliveFilter) Check(n *Node) string {
	if !n.Alive {
		return "not alive"
	}
	return ""
}

// LabelFilter rejects nodes whose labels do not match Selector.
type LabelFilter struct{ Selector LabelSelector }

// Name returns "labels".
func (LabelFilter) Name() string { return "labels" }

// Check rejects a node whose labels fail the selector.
func (f LabelFilter) Check(n *Node) string {
	if ok, why := f.Selector.Matches(n.Labels); !ok {
		return why
	}
	return ""
}

// CapacityFilter rejects nodes whose Total does not cover Demand: they can
// never run it (Ray's IsFeasible).
type CapacityFilter struct{ Demand ResourceSet }

// Name returns "capacity".
func (CapacityFilter) Name() string { return "capacity" }

// Check rejects a node whose total lacks some demanded resource.
func (f CapacityFilter) Check(n *Node) string {
	k, have, want, short := n.Total.Missing(f.Demand)
	if !short {
		return ""
	}
	if model, ok := strings.CutPrefix(k, AcceleratorTypePrefix); ok {
		return fmt.Sprintf("has no accelerator of type %q", model)
	}
	return fmt.Sprintf("has %s=%s in total, needs %s", k, have, want)
}

// Rejection is one node a Filter rejected, with the reason.
type Rejection struct {
	// Node is the node ID; Filter the filter's Name; Reason its words.
	Node, Filter, Reason string
}

// FilterNodes runs the filters in order over nodes (Nomad's feasibility
// chain) and returns the nodes passing all, sorted by ID, and for each
// rejected node the first filter that rejected it.
func FilterNodes(nodes []Node, filters ...Filter) ([]*Node, []Rejection) {
	var kept []*Node
	var rej []Rejection
	seen := make(map[string]bool, len(nodes))
next:
	for i := range nodes {
		n := &nodes[i]
		if seen[n.ID] {
			continue
		}
		seen[n.ID] = true
		for _, f := range filters {
			if why := f.Check(n); why != "" {
				rej = append(rej, Rejection{Node: n.ID, Filter: f.Name(), Reason: why})
				continue next
			}
		}
		kept = append(kept, n)
	}
	slices.SortFunc(kept, func(a, b *Node) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(rej, func(a, b Rejection) int { return strings.Compare(a.Node, b.Node) })
	return kept, rej
}

// summarize renders rejections grouped by filter, each with a count and
// the first node's reason: `2 nodes not alive; 1 node (n3): label zone="x" ...`.
func summarize(rej []Rejection) string {
	type group struct {
		n     int
		first Rejection
	}
	var order []string
	groups := map[string]*group{}
	for _, r := range rej {
		g := groups[r.Filter]
		if g == nil {
			g = &group{first: r}
			groups[r.Filter] = g
			order = append(order, r.Filter)
		}
		g.n++
	}
	parts := make([]string, 0, len(order))
	for _, f := range order {
		g := groups[f]
		noun := "nodes"
		if g.n == 1 {
			noun = "node"
		}
		if f == "alive" {
			parts = append(parts, fmt.Sprintf("%d %s not alive", g.n, noun))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d %s rejected by %s (e.g. %s: %s)", g.n, noun, f, g.first.Node, g.first.Reason))
	}
	return strings.Join(parts, "; ")
}

// DefaultSpreadThreshold is the utilization below which the hybrid policy
// packs rather than spreads: Ray's scheduler_spread_threshold default, 0.5.
const DefaultSpreadThreshold = 0.5

// Selector chooses nodes for tasks and actors. Its zero value is ready to
// use with DefaultSpreadThreshold; NewSelector sets another threshold. It
// keeps only the SPREAD round-robin position, so one Selector may be shared
// by goroutines.
type Selector struct {
	threshold    float64
	hasThreshold bool
	next         atomic.Uint64
}

// NewSelector returns a Selector whose hybrid policy packs onto nodes below
// threshold utilization (0 to 1; 0 always spreads to the least utilized
// node, 1 packs until a node is full, which is what cluster/localsched.go's
// policy did before this package had one).
func NewSelector(threshold float64) *Selector {
	return &Selector{threshold: min(max(threshold, 0), 1), hasThreshold: true}
}

// SpreadThreshold returns the hybrid policy's threshold.
func (s *Selector) SpreadThreshold() float64 {
	if s.hasThreshold {
		return s.threshold
	}
	return DefaultSpreadThreshold
}

var defaultSelector Selector

// SelectNode is (*Selector).Select on a shared default Selector.
func SelectNode(nodes []Node, demand ResourceSet, strategy TaskStrategy, localNodeID string) (string, error) {
	return defaultSelector.Select(nodes, demand, strategy, localNodeID)
}

// Select chooses the node a task or actor with resource demand should run
// on under strategy; localNodeID is the node deciding (the submitter's
// node, preferred by DEFAULT; "" for none, e.g. the leader placing actors).
// Demand may be empty (a zero-resource task). Only alive nodes whose labels
// match strategy.Labels and whose Total covers demand are eligible; a node
// "has room" when its Available (capped at Total) covers demand.
//
// It returns a node with room and a nil error, or:
//   - *InfeasibleError when no eligible node could ever run it, naming the
//     missing resource (an accelerator type is named as such) and how many
//     nodes each filter rejected; or, for hard NODE_AFFINITY, why the
//     target is not usable;
//   - *PendingError when eligible nodes exist but none has room now. The
//     returned ID (also PendingError.Node) is where the request should
//     wait, as Ray queues on a feasible node: for DEFAULT the local node
//     when it is eligible and no worse than the best, for NODE_AFFINITY the
//     target, otherwise the best-ranked eligible node.
//
// Invalid strategies or negative demand give an error wrapping
// ErrInvalidTaskStrategy, ErrInvalidLabelSelector or ErrInvalidQuantity.
//
// Strategies (after filtering):
//
//   - DEFAULT, Ray's hybrid policy: each node with room scores its critical
//     utilization (Node.CriticalUtilization), counted as 0 when below the
//     spread threshold. The local node wins when its score is no higher than
//     the best; otherwise the lowest score wins, ties by node ID (Ray picks
//     at random among the best few; picking by ID fills the same nodes first,
//     which is the packing the threshold is for). So work stays local until
//     the local node passes the threshold, then goes to nodes still under
//     it, and once all are over it, to the least utilized.
//   - SPREAD: the node with room with the lowest critical utilization; ties
//     in round-robin order that advances on every call (Ray's SPREAD is
//     round robin over nodes with room).
//   - NODE_AFFINITY: the target if it is alive, eligible and has room. Hard:
//     infeasible if dead, unknown or never able to run it; pending (queue
//     at the target) if busy. Soft: DEFAULT over all nodes when the target
//     is dead or can never run it, or busy with SpillOnUnavailable; queue
//     at the target when busy otherwise.
//   - NODE_LABEL: the least utilized node with room (the Labels filter has
//     done the selecting).
//
// Under every kind, when SoftLabels is set and some node with room matches
// it, only those are ranked (Ray's soft label preference).
func (s *Selector) Select(nodes []Node, demand ResourceSet, strategy TaskStrategy, localNodeID string) (string, error) {
	if err := strategy.Validate(); err != nil {
		return "", err
	}
	for _, k := range demand.Names() {
		if q := demand[k]; q < 0 {
			return "", fmt.Errorf("%w: resource %q: negative amount %s", ErrInvalidQuantity, k, q)
		}
	}
	kind := strategy.kind()
	if kind == StrategyNodeAffinity {
		id, fallback, err := s.affinity(nodes, demand, strategy)
		if !fallback {
			return id, err
		}
		kind = StrategyDefault
	}
	filters := []Filter{AliveFilter{}, LabelFilter{strategy.Labels}, CapacityFilter{demand}}
	elig, rej := FilterNodes(nodes, filters...)
	if len(elig) == 0 {
		return "", infeasibleTask(nodes, demand, strategy.Labels, rej)
	}
	var room []*Node
	for _, n := range elig {
		if capped(n.Available, n.Total).Covers(demand) {
			room = append(room, n)
		}
	}
	if len(room) > 0 && len(strategy.SoftLabels) > 0 {
		var pref []*Node
		for _, n := range room {
			if ok, _ := strategy.SoftLabels.Matches(n.Labels); ok {
				pref = append(pref, n)
			}
		}
		if len(pref) > 0 {
			room = pref
		}
	}
	pool := room
	if len(pool) == 0 {
		pool = elig
	}
	var pick *Node
	switch kind {
	case StrategyDefault:
		pick = s.hybrid(pool, localNodeID)
	case StrategySpread:
		pick = leastUtilized(rotate(pool, s.next.Add(1)-1))
	default: // StrategyNodeLabel
		pick = leastUtilized(pool)
	}
	if len(room) > 0 {
		return pick.ID, nil
	}
	return pick.ID, pendingTask(elig, demand, pick.ID)
}

// affinity handles NODE_AFFINITY; fallback asks the caller to run DEFAULT.
func (s *Selector) affinity(nodes []Node, demand ResourceSet, st TaskStrategy) (string, bool, error) {
	var target *Node
	for i := range nodes {
		if nodes[i].ID == st.NodeID {
			target = &nodes[i]
			break
		}
	}
	why := ""
	switch {
	case target == nil:
		why = "is not a known node"
	case !target.Alive:
		why = "is not alive"
	default:
		if w := (LabelFilter{st.Labels}).Check(target); w != "" {
			why = "does not match the label selector: " + w
		} else if w := (CapacityFilter{demand}).Check(target); w != "" {
			why = "can never run {" + demand.String() + "}: it " + w
		}
	}
	if why != "" {
		if st.Soft {
			return "", true, nil
		}
		ie := &InfeasibleError{Bundle: -1, Reason: fmt.Sprintf("node affinity: node %s %s", st.NodeID, why)}
		if k, have, want, short := target.totalMissing(demand); short {
			ie.Resource, ie.Need, ie.Most = k, want, have
		}
		return "", false, ie
	}
	if capped(target.Available, target.Total).Covers(demand) {
		return target.ID, false, nil
	}
	if st.Soft && st.SpillOnUnavailable {
		return "", true, nil
	}
	k, have, want, _ := capped(target.Available, target.Total).Missing(demand)
	return target.ID, false, &PendingError{Bundle: -1, Resource: k, Need: want, Free: have, Node: target.ID, Reason: fmt.Sprintf(
		"node affinity: node %s has %s=%s free now, needs %s; waiting there", target.ID, k, have, want)}
}

// totalMissing is Total.Missing on a possibly nil node.
func (n *Node) totalMissing(demand ResourceSet) (string, Quantity, Quantity, bool) {
	if n == nil {
		return "", 0, 0, false
	}
	return n.Total.Missing(demand)
}

// hybrid is Ray's hybrid choice among pool (all with room, or all busy).
func (s *Selector) hybrid(pool []*Node, local string) *Node {
	th := s.SpreadThreshold()
	score := func(n *Node) float64 {
		u := n.CriticalUtilization()
		if u < th {
			return 0
		}
		return u
	}
	var best, loc *Node
	var bestScore float64
	for _, n := range pool { // sorted by ID: ties go to the lowest ID
		sc := score(n)
		if best == nil || sc < bestScore {
			best, bestScore = n, sc
		}
		if n.ID == local {
			loc = n
		}
	}
	if loc != nil && score(loc) <= bestScore {
		return loc
	}
	return best
}

// leastUtilized returns the node with the lowest critical utilization,
// ties to the earliest in pool.
func leastUtilized(pool []*Node) *Node {
	var best *Node
	var bu float64
	for _, n := range pool {
		if u := n.CriticalUtilization(); best == nil || u < bu {
			best, bu = n, u
		}
	}
	return best
}

// rotate returns pool starting at position k mod len(pool).
func rotate(pool []*Node, k uint64) []*Node {
	i := int(k % uint64(len(pool)))
	return append(slices.Clone(pool[i:]), pool[:i]...)
}

// infeasibleTask explains why no node is eligible for demand.
func infeasibleTask(nodes []Node, demand ResourceSet, labels LabelSelector, rej []Rejection) error {
	ie := &InfeasibleError{Bundle: -1}
	// Shortfall against the nodes that passed liveness and labels.
	var ids []string
	var totals []ResourceSet
	for i := range nodes {
		n := &nodes[i]
		if ok, _ := labels.Matches(n.Labels); n.Alive && ok {
			ids = append(ids, n.ID)
			totals = append(totals, n.Total)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "no node can ever run {%s}", demand)
	switch {
	case len(nodes) == 0:
		b.WriteString(": there are no nodes")
	case len(ids) > 0:
		if sf, short := findShortfall(ids, totals, demand); short {
			ie.Resource, ie.Need, ie.Most = sf.resource, sf.need, sf.most
			b.WriteString(": " + sf.describe("in total"))
		}
	}
	if len(rej) > 0 {
		b.WriteString(" (" + summarize(rej) + ")")
	}
	ie.Reason = b.String()
	return ie
}

// pendingTask explains why no eligible node has room now.
func pendingTask(elig []*Node, demand ResourceSet, wait string) error {
	ids := make([]string, len(elig))
	free := make([]ResourceSet, len(elig))
	for i, n := range elig {
		ids[i], free[i] = n.ID, capped(n.Available, n.Total)
	}
	pe := &PendingError{Bundle: -1, Node: wait}
	sf, _ := findShortfall(ids, free, demand)
	pe.Resource, pe.Need, pe.Free = sf.resource, sf.need, sf.most
	pe.Reason = fmt.Sprintf("no eligible node has room for {%s} now: %s; waiting on node %s", demand, sf.describe("free"), wait)
	return pe
}
