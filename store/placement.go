package store

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// PlacementGroupState and its values travel in wire.PGInfo.State.
type PlacementGroupState = wire.PlacementGroupState

// Placement-group states (wire.PGPending, ...).
const (
	PGPending      = wire.PGPending
	PGCreated      = wire.PGCreated
	PGRescheduling = wire.PGRescheduling
	PGRemoved      = wire.PGRemoved
)

// MaxRemovedPlacementGroups is how many REMOVED groups the table keeps for
// listings (the oldest are dropped first), as Ray's GCS keeps a bounded
// number of removed groups.
const MaxRemovedPlacementGroups = 1000

// PlacementGroup is one placement group as the leader registered and placed
// it. Nodes[i] is the node ID holding Bundles[i] ("" while unplaced); the
// reservations of CREATED and RESCHEDULING groups count against their
// nodes' totals (checked by the FSM: no node is ever over-reserved).
type PlacementGroup struct {
	// ID is the group ID (hex, 8 to 64 characters, chosen by the creator).
	ID string
	// Name and Namespace make a group findable by name (GetPlacementGroup);
	// Name may be empty. NameKey is Namespace+"/"+Name while the group is
	// named and not removed (set by the FSM, unique).
	Name      string
	Namespace string
	NameKey   string
	// JobID is the creating job; its groups are removed when it ends
	// unless Detached (Ray's lifetime="detached").
	JobID    string
	Detached bool
	// Strategy is PACK, SPREAD, STRICT_PACK or STRICT_SPREAD.
	Strategy sched.PlacementStrategy
	// Bundles are the resource maps, in the creator's order (sched units).
	Bundles []sched.ResourceSet
	// Nodes has one node ID per bundle ("" = not placed).
	Nodes []string
	// State is the lifecycle state.
	State PlacementGroupState
	// PendingReason says why a PENDING or RESCHEDULING group is not placed;
	// Infeasible is set when no arrangement of the alive nodes could ever
	// hold it (Ray reports such groups as infeasible).
	PendingReason string
	Infeasible    bool
	// CreatedAt and StateChangedAt are unix nanoseconds stamped by the leader.
	CreatedAt      int64
	StateChangedAt int64
	// RemovedKey orders REMOVED groups for pruning (set by the FSM; empty
	// while not REMOVED).
	RemovedKey string
	// CreateIndex and ModifyIndex are Raft indexes set by the FSM.
	CreateIndex uint64
	ModifyIndex uint64
}

// Copy returns a deep copy of g; a nil g yields nil.
func (g *PlacementGroup) Copy() *PlacementGroup {
	if g == nil {
		return nil
	}
	c := *g
	c.Bundles = make([]sched.ResourceSet, len(g.Bundles))
	for i, b := range g.Bundles {
		c.Bundles[i] = maps.Clone(b)
	}
	c.Nodes = slices.Clone(g.Nodes)
	return &c
}

// Live reports whether g holds (or is to hold) reservations: not REMOVED.
func (g *PlacementGroup) Live() bool { return g.State != PGRemoved }

func (g *PlacementGroup) nameKey() string {
	if g.Name == "" || g.State == PGRemoved {
		return ""
	}
	return g.Namespace + "/" + g.Name
}

// PGOpKind is the kind of one placement-group operation in a
// PlacementGroupWriteRequest. Values are persisted: append only.
type PGOpKind uint8

const (
	// PGOpCreate registers Group (state PENDING, or CREATED with every
	// bundle's node in Group.Nodes). Errors: ErrInvalidRequest (bad ID,
	// strategy, bundles or state; the ID already used),
	// ErrPlacementGroupNameTaken, ErrReservation.
	PGOpCreate PGOpKind = 1
	// PGOpReserve places a PENDING or RESCHEDULING group: Nodes is the full
	// assignment; the group becomes CREATED. Errors: ErrPlacementGroupNotFound,
	// ErrPlacementGroupRemoved, ErrInvalidRequest (the group is CREATED
	// already), ErrReservation.
	PGOpReserve PGOpKind = 2
	// PGOpPending records why a PENDING or RESCHEDULING group waits
	// (Reason, Infeasible); a no-op for groups in other states.
	PGOpPending PGOpKind = 3
	// PGOpLose unplaces the bundles of a CREATED or RESCHEDULING group held
	// on any node in Nodes (those nodes died), releasing them; the group
	// becomes RESCHEDULING. A no-op when it has none there or is REMOVED.
	PGOpLose PGOpKind = 4
	// PGOpRemove marks the group REMOVED and releases its reservations;
	// removing a removed group is a no-op. Errors: ErrPlacementGroupNotFound.
	PGOpRemove PGOpKind = 5
)

// PlacementGroupOp is one operation on the placement-group table.
type PlacementGroupOp struct {
	Kind PGOpKind
	// Group is the record to register (PGOpCreate only).
	Group PlacementGroup
	// ID names the group for every other kind.
	ID string
	// Nodes: PGOpReserve's full assignment, or PGOpLose's lost node IDs.
	Nodes []string
	// Reason and Infeasible: PGOpPending's new pending reason.
	Reason     string
	Infeasible bool
	// At is the leader's clock (unix nanoseconds), for StateChangedAt.
	At int64
}

// PlacementGroupWriteRequest applies Ops in order in one Raft entry, so a
// leader can batch many groups' changes into one durable write. Each op is
// atomic and independent: one that fails changes nothing and does not stop
// the others. The Apply result is a *PlacementGroupWriteResult.
type PlacementGroupWriteRequest struct {
	Ops []PlacementGroupOp
}

// PlacementGroupWriteResult has one entry per op: nil when applied, else why not.
type PlacementGroupWriteResult struct {
	Errors []error
}

// placementReserved is one row of tablePGReserved: what placement groups
// hold on a node (derived from the groups; rebuilt on restore).
type placementReserved struct {
	NodeID   string
	Reserved sched.ResourceSet
}

// PlacementGroups returns every group (removed ones included, up to
// MaxRemovedPlacementGroups of them) in creation order.
func (s *StateStore) PlacementGroups() ([]*PlacementGroup, error) {
	return all(s, "placement groups", tablePGs, "id", byPGCreation)
}

// LivePlacementGroups returns the groups that are not REMOVED, in creation
// order, read through an index so removed ones cost nothing.
func (s *StateStore) LivePlacementGroups() ([]*PlacementGroup, error) {
	return all(s, "live placement groups", tablePGs, "live", byPGCreation, true)
}

func byPGCreation(a, b *PlacementGroup) int {
	return cmp.Or(cmp.Compare(a.CreateIndex, b.CreateIndex), cmp.Compare(a.ID, b.ID))
}

// PlacementGroupByID returns the group with that ID, or (nil, nil).
func (s *StateStore) PlacementGroupByID(id string) (*PlacementGroup, error) {
	return first[*PlacementGroup](s, "placement group "+id, tablePGs, "id", id)
}

// PlacementGroupByName returns the group named name in namespace that is not
// removed, or (nil, nil).
func (s *StateStore) PlacementGroupByName(namespace, name string) (*PlacementGroup, error) {
	return first[*PlacementGroup](s, "placement group "+namespace+"/"+name, tablePGs, "name", namespace+"/"+name)
}

// PlacementReserved returns, per node ID, what CREATED and RESCHEDULING
// groups hold there (sched units; nodes with nothing reserved are absent).
func (s *StateStore) PlacementReserved() (map[string]sched.ResourceSet, error) {
	it, err := s.readTxn().Get(tablePGReserved, "id")
	if err != nil {
		return nil, fmt.Errorf("list placement reservations: %w", err)
	}
	out := map[string]sched.ResourceSet{}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		r := raw.(*placementReserved)
		out[r.NodeID] = r.Reserved.Clone()
	}
	return out, nil
}

func validPlacementGroup(g *PlacementGroup) error {
	if err := validID("placement group ID", g.ID); err != nil {
		return err
	}
	if !g.Strategy.Valid() {
		return fmt.Errorf("placement group %s: invalid strategy %q: %w", g.ID, g.Strategy, ErrInvalidRequest)
	}
	if err := sched.ValidateBundles(g.Bundles); err != nil {
		return fmt.Errorf("placement group %s: %v: %w", g.ID, err, ErrInvalidRequest)
	}
	if len(g.Nodes) != len(g.Bundles) {
		return fmt.Errorf("placement group %s: %d nodes for %d bundles: %w", g.ID, len(g.Nodes), len(g.Bundles), ErrInvalidRequest)
	}
	if !g.State.Valid() {
		return fmt.Errorf("placement group %s: invalid state %q: %w", g.ID, g.State, ErrInvalidRequest)
	}
	return nil
}

// writePlacementGroups applies a PlacementGroupWriteRequest at index.
func (s *StateStore) writePlacementGroups(index uint64, req *PlacementGroupWriteRequest) (*PlacementGroupWriteResult, error) {
	res := &PlacementGroupWriteResult{Errors: make([]error, len(req.Ops))}
	err := s.write(index, func(txn *memdb.Txn) (bool, error) {
		changed := false
		for i := range req.Ops {
			ok, err := applyPGOp(txn, index, &req.Ops[i])
			if err != nil {
				res.Errors[i] = err
				continue
			}
			changed = changed || ok
		}
		return changed, nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// applyPGOp validates op against txn and, only if valid, applies it.
func applyPGOp(txn *memdb.Txn, index uint64, op *PlacementGroupOp) (bool, error) {
	if op.Kind == PGOpCreate {
		return createPG(txn, index, op)
	}
	raw, err := txn.First(tablePGs, "id", op.ID)
	if err != nil {
		return false, err
	}
	if raw == nil {
		if op.Kind == PGOpPending || op.Kind == PGOpLose {
			return false, nil
		}
		return false, fmt.Errorf("placement group %s: %w", op.ID, ErrPlacementGroupNotFound)
	}
	cur := raw.(*PlacementGroup)
	g := cur.Copy()
	g.ModifyIndex = index
	switch op.Kind {
	case PGOpReserve:
		switch cur.State {
		case PGRemoved:
			return false, fmt.Errorf("placement group %s: %w", op.ID, ErrPlacementGroupRemoved)
		case PGCreated:
			return false, fmt.Errorf("placement group %s is CREATED already: %w", op.ID, ErrInvalidRequest)
		}
		if len(op.Nodes) != len(cur.Bundles) {
			return false, fmt.Errorf("placement group %s: %d nodes for %d bundles: %w", op.ID, len(op.Nodes), len(cur.Bundles), ErrReservation)
		}
		g.Nodes = slices.Clone(op.Nodes)
		g.State, g.PendingReason, g.Infeasible, g.StateChangedAt = PGCreated, "", false, op.At
		if err := reserve(txn, cur, g); err != nil {
			return false, err
		}
	case PGOpPending:
		if cur.State != PGPending && cur.State != PGRescheduling {
			return false, nil
		}
		if cur.PendingReason == op.Reason && cur.Infeasible == op.Infeasible {
			return false, nil
		}
		g.PendingReason, g.Infeasible = op.Reason, op.Infeasible
	case PGOpLose:
		if cur.State != PGCreated && cur.State != PGRescheduling {
			return false, nil
		}
		hit := false
		for i, nd := range g.Nodes {
			if nd != "" && slices.Contains(op.Nodes, nd) {
				g.Nodes[i], hit = "", true
			}
		}
		if !hit {
			return false, nil
		}
		if cur.State != PGRescheduling {
			g.State, g.StateChangedAt = PGRescheduling, op.At
		}
		g.PendingReason = "a node holding some of its bundles died; placing them again"
		if err := reserve(txn, cur, g); err != nil {
			return false, err
		}
	case PGOpRemove:
		if cur.State == PGRemoved {
			return false, nil
		}
		g.State, g.StateChangedAt, g.PendingReason, g.Infeasible = PGRemoved, op.At, "", false
		g.RemovedKey = pruneKey(index)
		if err := reserve(txn, cur, g); err != nil {
			return false, err
		}
		if err := pruneRemoved(txn, 1); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("placement group op kind %d: %w", op.Kind, ErrInvalidRequest)
	}
	g.NameKey = g.nameKey()
	return true, txn.Insert(tablePGs, g)
}

func createPG(txn *memdb.Txn, index uint64, op *PlacementGroupOp) (bool, error) {
	g := op.Group.Copy()
	if g.State == "" {
		g.State = PGPending
	}
	if g.Nodes == nil {
		g.Nodes = make([]string, len(g.Bundles))
	}
	if err := validPlacementGroup(g); err != nil {
		return false, err
	}
	if g.State != PGPending && g.State != PGCreated {
		return false, fmt.Errorf("placement group %s: created in state %s (want PENDING or CREATED): %w", g.ID, g.State, ErrInvalidRequest)
	}
	if raw, err := txn.First(tablePGs, "id", g.ID); err != nil || raw != nil {
		if err == nil {
			err = fmt.Errorf("placement group ID %s is already used: %w", g.ID, ErrInvalidRequest)
		}
		return false, err
	}
	g.NameKey = g.nameKey()
	if g.NameKey != "" {
		raw, err := txn.First(tablePGs, "name", g.NameKey)
		if err != nil {
			return false, err
		}
		if raw != nil {
			return false, fmt.Errorf("placement group name %q in namespace %q belongs to group %s: %w",
				g.Name, g.Namespace, raw.(*PlacementGroup).ID, ErrPlacementGroupNameTaken)
		}
	}
	if g.State == PGPending {
		clear(g.Nodes)
	} else if err := reserve(txn, nil, g); err != nil {
		return false, err
	}
	g.CreateIndex, g.ModifyIndex, g.RemovedKey = index, index, ""
	return true, txn.Insert(tablePGs, g)
}

// holds is what g reserves per node: nothing unless CREATED or RESCHEDULING.
func holds(g *PlacementGroup) map[string]sched.ResourceSet {
	out := map[string]sched.ResourceSet{}
	if g == nil || (g.State != PGCreated && g.State != PGRescheduling) {
		return out
	}
	for i, nd := range g.Nodes {
		if nd == "" {
			continue
		}
		if out[nd] == nil {
			out[nd] = sched.ResourceSet{}
		}
		out[nd].Add(g.Bundles[i])
	}
	return out
}

// reserve moves the per-node reservations from what old holds to what g
// holds, checking first: a CREATED group has every bundle placed, the
// strategy's hard constraint holds, every node that gains reservations is
// registered and alive, and no node's reservations exceed its total.
// Nothing changes on error (wrapping ErrReservation).
func reserve(txn *memdb.Txn, old, g *PlacementGroup) error {
	if g.State == PGCreated {
		for i, nd := range g.Nodes {
			if nd == "" {
				return fmt.Errorf("placement group %s: bundle %d has no node: %w", g.ID, i, ErrReservation)
			}
		}
	}
	if err := sched.CheckStrategy(g.Strategy, g.Nodes); err != nil {
		return fmt.Errorf("placement group %s: %w", g.ID, err)
	}
	before, after := holds(old), holds(g)
	next := map[string]sched.ResourceSet{}
	for nd := range mergeKeys(before, after) {
		cur, err := reservedOn(txn, nd)
		if err != nil {
			return err
		}
		n := cur.Clone()
		n.Sub(before[nd])
		n.Add(after[nd])
		grew := false
		for k, q := range n {
			if q > cur[k] {
				grew = true
			}
		}
		if grew {
			raw, err := txn.First(tableNodes, "id", nd)
			if err != nil {
				return err
			}
			if raw == nil {
				return fmt.Errorf("placement group %s: node %s is not registered: %w", g.ID, nd, ErrReservation)
			}
			node := raw.(*Node)
			if !node.Status.Live() {
				return fmt.Errorf("placement group %s: node %s is %s: %w", g.ID, nd, node.Status, ErrReservation)
			}
			for _, k := range n.Names() {
				if n[k] > cur[k] && n[k] > node.Resources[k] {
					return fmt.Errorf("placement group %s: node %s would have %s=%s reserved, over its total %s: %w",
						g.ID, nd, k, n[k], node.Resources[k], ErrReservation)
				}
			}
		}
		for k, q := range n {
			if q <= 0 {
				delete(n, k)
			}
		}
		next[nd] = n
	}
	for nd, r := range next {
		var err error
		if len(r) == 0 {
			_, err = txn.DeleteAll(tablePGReserved, "id", nd)
		} else {
			err = txn.Insert(tablePGReserved, &placementReserved{NodeID: nd, Reserved: r})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func mergeKeys(a, b map[string]sched.ResourceSet) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func reservedOn(txn *memdb.Txn, nd string) (sched.ResourceSet, error) {
	raw, err := txn.First(tablePGReserved, "id", nd)
	if err != nil || raw == nil {
		return sched.ResourceSet{}, err
	}
	return raw.(*placementReserved).Reserved, nil
}

// pruneRemoved counts added newly removed groups and deletes the oldest
// removed ones beyond MaxRemovedPlacementGroups.
func pruneRemoved(txn *memdb.Txn, added int) error {
	return pruneOldest(txn, tablePGs, "removed", indexPGRemoved, MaxRemovedPlacementGroups, added)
}

// pruneKey is the value of a pruning index ("dead", "removed") for a row
// that reached its final state at index: zero-padded, so oldest sorts first.
func pruneKey(index uint64) string { return fmt.Sprintf("%020d", index) }

// pruneOldest adds added to the count kept under tableIndex key counter and
// deletes the rows of table first in index (oldest first) while the count
// is above max.
func pruneOldest(txn *memdb.Txn, table, index, counter string, max uint64, added int) error {
	count := uint64(added)
	if raw, err := txn.First(tableIndex, "id", counter); err != nil {
		return err
	} else if raw != nil {
		count += raw.(*indexEntry).Value
	}
	for count > max {
		raw, err := txn.First(table, index)
		if err != nil {
			return err
		}
		if raw == nil {
			break
		}
		if err := txn.Delete(table, raw); err != nil {
			return err
		}
		count--
	}
	return txn.Insert(tableIndex, &indexEntry{Key: counter, Value: count})
}

// recount sets the pruning counter kept under tableIndex key counter to the
// number of rows in table's index, pruning the oldest beyond max, after a
// snapshot's rows are inserted (the counters are not in the snapshot).
func recount(txn *memdb.Txn, table, index, counter string, max uint64) error {
	it, err := txn.Get(table, index)
	if err != nil {
		return err
	}
	n := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n++
	}
	if n == 0 {
		return nil
	}
	return pruneOldest(txn, table, index, counter, max, n)
}

// restorePlacement rebuilds the derived placement rows (per-node
// reservations, the removed count) after a snapshot's groups are inserted.
func restorePlacement(txn *memdb.Txn) error {
	it, err := txn.Get(tablePGs, "id")
	if err != nil {
		return err
	}
	sum := map[string]sched.ResourceSet{}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		for nd, r := range holds(raw.(*PlacementGroup)) {
			if sum[nd] == nil {
				sum[nd] = sched.ResourceSet{}
			}
			sum[nd].Add(r)
		}
	}
	for nd, r := range sum {
		if err := txn.Insert(tablePGReserved, &placementReserved{NodeID: nd, Reserved: r}); err != nil {
			return err
		}
	}
	return recount(txn, tablePGs, "removed", indexPGRemoved, MaxRemovedPlacementGroups)
}
