package sched

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// ErrGroupExists is wrapped by Ledger.Commit and Ledger.Place when the
// group ID already has a reservation.
var ErrGroupExists = errors.New("placement group already reserved")

// ErrNoGroup is wrapped by Ledger methods given a group ID with no
// reservation.
var ErrNoGroup = errors.New("no such placement group")

// ErrReservation is wrapped by Ledger.Commit and Ledger.Reassign when the
// proposed assignment is not valid against the ledger as it is: unknown or
// dead node, over a node's capacity, or breaking the strategy (also
// CheckStrategy's errors).
var ErrReservation = errors.New("invalid reservation")

// Reservation is one placement group's committed bundles: Bundles[i] is
// reserved on node Nodes[i] ("" while that bundle is unplaced after its
// node was lost).
type Reservation struct {
	// Group is the placement group ID.
	Group string
	// Strategy is the group's placement strategy.
	Strategy PlacementStrategy
	// Bundles are the group's bundles, in the user's order.
	Bundles []ResourceSet
	// Nodes are the node IDs, one per bundle.
	Nodes []string
}

func (r *Reservation) clone() Reservation {
	c := Reservation{Group: r.Group, Strategy: r.Strategy, Nodes: slices.Clone(r.Nodes)}
	c.Bundles = make([]ResourceSet, len(r.Bundles))
	for i, b := range r.Bundles {
		c.Bundles[i] = b.Clone()
	}
	return c
}

// Ledger is the record of placement-group reservations per node, Ray's GCS
// placement-group resource manager reduced to bookkeeping. All methods are
// safe for concurrent use; each is atomic (all bundles of a group or none).
//
// It keeps two kinds of state apart:
//
//   - committed state (nodes' totals, liveness, labels; reservations) that
//     must be identical on every replica: Commit, Reassign, Release,
//     NodeLost and SetNode change it and validate only against it, so a
//     Raft state machine that applies the same entries in the same order
//     reaches the same ledger and the same accept/reject decisions;
//   - soft usage outside placement groups (SetUsage, from heartbeats),
//     which Nodes, Place and Repair subtract when deciding but Commit and
//     Reassign ignore.
//
// Place and Repair decide and commit in one step, for a single process; a
// Raft leader instead decides with PlaceBundles/RePlaceBundles on Nodes(),
// proposes the result, and applies it with Commit/Reassign.
type Ledger struct {
	mu     sync.Mutex
	nodes  map[string]*ledgerNode
	groups map[string]*Reservation
}

type ledgerNode struct {
	total    ResourceSet
	labels   map[string]string
	alive    bool
	reserved ResourceSet
	used     ResourceSet
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{nodes: map[string]*ledgerNode{}, groups: map[string]*Reservation{}}
}

// SetNode adds node id or updates its total capacity, labels and liveness;
// its reservations stay (see NodeLost). A dead node is never chosen, and
// reservations on it count for nothing until repaired away.
func (l *Ledger) SetNode(id string, total ResourceSet, labels map[string]string, alive bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.nodes[id]
	if n == nil {
		n = &ledgerNode{reserved: ResourceSet{}}
		l.nodes[id] = n
	}
	n.total, n.labels, n.alive = total.Clone(), labels, alive
}

// SetUsage records the resources in use on node id outside placement
// groups (tasks and actors not in a bundle), from its latest report. It is
// soft state: Nodes, Place and Repair subtract it; Commit and Reassign
// ignore it. Unknown nodes are ignored.
func (l *Ledger) SetUsage(id string, used ResourceSet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.nodes[id]; n != nil {
		n.used = used.Clone()
	}
}

// NodeLost forgets every bundle reserved on node id (it died, or came back
// as a new incarnation whose reservations are gone): those bundles become
// unplaced ("" in Reservation.Nodes) and their resources are released. It
// returns the affected group IDs, sorted, for Repair.
func (l *Ledger) NodeLost(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, g := range l.sortedGroups() {
		r := l.groups[g]
		hit := false
		for i, nd := range r.Nodes {
			if nd == id {
				l.unreserve(nd, r.Bundles[i])
				r.Nodes[i] = ""
				hit = true
			}
		}
		if hit {
			out = append(out, g)
		}
	}
	return out
}

// Nodes returns the ledger's nodes for placement, sorted by ID, with
// Available = Total - reserved - usage (floored at zero per resource).
func (l *Ledger) Nodes() []Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.view()
}

func (l *Ledger) view() []Node {
	out := make([]Node, 0, len(l.nodes))
	for id, n := range l.nodes {
		avail := n.total.Clone()
		avail.Sub(n.reserved)
		avail.Sub(n.used)
		for k, v := range avail {
			if v < 0 {
				avail[k] = 0
			}
		}
		out = append(out, Node{ID: id, Total: n.total.Clone(), Available: avail, Labels: n.labels, Alive: n.alive})
	}
	slices.SortFunc(out, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Reserved returns a copy of what placement groups hold on node id.
func (l *Ledger) Reserved(id string) ResourceSet {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.nodes[id]; n != nil {
		return n.reserved.Clone()
	}
	return ResourceSet{}
}

// Get returns a copy of group's reservation.
func (l *Ledger) Get(group string) (Reservation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.groups[group]
	if !ok {
		return Reservation{}, false
	}
	return r.clone(), true
}

// Groups returns the reserved group IDs, sorted.
func (l *Ledger) Groups() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sortedGroups()
}

func (l *Ledger) sortedGroups() []string { return slices.Sorted(maps.Keys(l.groups)) }

// NeedsRepair returns the groups, sorted, with a bundle unplaced or on a
// node that is unknown or not alive.
func (l *Ledger) NeedsRepair() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, g := range l.sortedGroups() {
		for _, nd := range l.groups[g].Nodes {
			if n := l.nodes[nd]; n == nil || !n.alive {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// Place decides with PlaceBundles on Nodes() and commits the result, in
// one atomic step: of two groups racing for the same last resources,
// exactly one gets them. It returns the assignment, or PlaceBundles' error
// (or ErrGroupExists) with the ledger unchanged.
func (l *Ledger) Place(group string, bundles []ResourceSet, strategy PlacementStrategy) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.groups[group]; dup {
		return nil, fmt.Errorf("%w: %q", ErrGroupExists, group)
	}
	got, err := PlaceBundles(l.view(), bundles, strategy)
	if err != nil {
		return nil, err
	}
	r := (&Reservation{Group: group, Strategy: strategy, Bundles: bundles, Nodes: got}).clone()
	if err := l.apply(&r, nil); err != nil {
		return nil, fmt.Errorf("sched: internal error: placement not committable: %w", err)
	}
	return slices.Clone(got), nil
}

// Commit records a reservation decided elsewhere (a Raft log entry). It
// checks, against committed state only: a new group ID, valid bundles and
// strategy, one known alive node per bundle, the strategy's constraint
// (STRICT_PACK one node, STRICT_SPREAD distinct nodes), and that every
// node's reservations stay within its total. On any failure (wrapping
// ErrGroupExists, ErrInvalidBundle, ErrInvalidStrategy or ErrReservation)
// nothing changes.
func (l *Ledger) Commit(r Reservation) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.groups[r.Group]; dup {
		return fmt.Errorf("%w: %q", ErrGroupExists, r.Group)
	}
	if err := validGroup(r.Strategy, r.Bundles); err != nil {
		return err
	}
	c := r.clone()
	return l.apply(&c, nil)
}

// Repair places again the bundles of group that are unplaced or on a node
// no longer alive (RePlaceBundles on Nodes()), keeping the others, and
// commits the result atomically. It returns the new assignment, or the
// placement error (*PendingError, *InfeasibleError; ErrNoGroup) with the
// ledger unchanged; the caller retries pending repairs as resources free.
func (l *Ledger) Repair(group string) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.groups[group]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoGroup, group)
	}
	got, err := RePlaceBundles(l.view(), old.Bundles, old.Strategy, old.Nodes)
	if err != nil {
		return nil, err
	}
	r := old.clone()
	r.Nodes = got
	if err := l.apply(&r, old); err != nil {
		return nil, fmt.Errorf("sched: internal error: repair not committable: %w", err)
	}
	return slices.Clone(got), nil
}

// Reassign moves an existing group's bundles to nodes (a repair decided
// elsewhere and committed through Raft), with Commit's checks; bundles
// whose node does not change are not re-checked against capacity.
func (l *Ledger) Reassign(group string, nodes []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.groups[group]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoGroup, group)
	}
	if len(nodes) != len(old.Bundles) {
		return fmt.Errorf("%w: %d nodes for %d bundles", ErrReservation, len(nodes), len(old.Bundles))
	}
	r := old.clone()
	r.Nodes = slices.Clone(nodes)
	return l.apply(&r, old)
}

// Release drops group's reservation, returning its resources; false if
// there was none.
func (l *Ledger) Release(group string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.groups[group]
	if !ok {
		return false
	}
	for i, nd := range r.Nodes {
		if nd != "" {
			l.unreserve(nd, r.Bundles[i])
		}
	}
	delete(l.groups, group)
	return true
}

func (l *Ledger) unreserve(id string, b ResourceSet) {
	if n := l.nodes[id]; n != nil {
		n.reserved.Sub(b)
		for k, v := range n.reserved {
			if v == 0 {
				delete(n.reserved, k)
			}
		}
	}
}

// apply validates r (replacing old, nil for a new group) against committed
// state and installs it; on error nothing changes.
func (l *Ledger) apply(r *Reservation, old *Reservation) error {
	if len(r.Nodes) != len(r.Bundles) {
		return fmt.Errorf("%w: %d nodes for %d bundles", ErrReservation, len(r.Nodes), len(r.Bundles))
	}
	// Per node: what this group holds before and after.
	before := map[string]ResourceSet{}
	if old != nil {
		for i, nd := range old.Nodes {
			if nd != "" {
				addTo(before, nd, old.Bundles[i])
			}
		}
	}
	after := map[string]ResourceSet{}
	for i, nd := range r.Nodes {
		if nd == "" {
			return fmt.Errorf("%w: bundle %d has no node", ErrReservation, i)
		}
		moved := old == nil || old.Nodes[i] != nd
		if n := l.nodes[nd]; moved && (n == nil || !n.alive) {
			return fmt.Errorf("%w: bundle %d: node %s is unknown or not alive", ErrReservation, i, nd)
		}
		addTo(after, nd, r.Bundles[i])
	}
	if err := CheckStrategy(r.Strategy, r.Nodes); err != nil {
		return err
	}
	for _, nd := range slices.Sorted(maps.Keys(after)) {
		n := l.nodes[nd]
		if n == nil {
			return fmt.Errorf("%w: node %s is unknown", ErrReservation, nd)
		}
		next := n.reserved.Clone()
		next.Sub(before[nd])
		next.Add(after[nd])
		for _, k := range after[nd].Names() {
			grew := next[k] > n.reserved[k]
			if grew && next[k] > n.total[k] {
				return fmt.Errorf("%w: node %s would have %s=%s reserved, over its total %s",
					ErrReservation, nd, k, next[k], n.total[k])
			}
		}
	}
	for nd, b := range before {
		l.unreserve(nd, b)
	}
	for nd, b := range after {
		l.nodes[nd].reserved.Add(b)
	}
	l.groups[r.Group] = r
	return nil
}

func addTo(m map[string]ResourceSet, k string, b ResourceSet) {
	if m[k] == nil {
		m[k] = ResourceSet{}
	}
	m[k].Add(b)
}

// Verify recomputes every node's reservations from the groups and checks
// them against the stored sums, the strategies' constraints, and (for alive
// nodes) the totals (which only a SetNode that shrank a node's total can
// break). It returns the first violation; nil means consistent.
// It is for tests and debug endpoints.
func (l *Ledger) Verify() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	sum := map[string]ResourceSet{}
	for _, g := range l.sortedGroups() {
		r := l.groups[g]
		if err := CheckStrategy(r.Strategy, r.Nodes); err != nil {
			return fmt.Errorf("group %s: %w", g, err)
		}
		for i, nd := range r.Nodes {
			if nd != "" {
				addTo(sum, nd, r.Bundles[i])
			}
		}
	}
	for id, n := range l.nodes {
		if !n.reserved.Equal(sum[id]) {
			return fmt.Errorf("node %s: stored reservations {%s} but groups hold {%s}", id, n.reserved, sum[id])
		}
		if !n.alive {
			continue
		}
		if k, have, want, over := n.total.Missing(n.reserved); over {
			return fmt.Errorf("node %s: %s=%s reserved, over its total %s", id, k, want, have)
		}
	}
	return nil
}
