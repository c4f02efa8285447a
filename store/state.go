package store

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	memdb "github.com/hashicorp/go-memdb"
)

// StateStore is the in-memory replicated state, a go-memdb database as
// Nomad's state.StateStore. Its exported methods are read-only and safe for
// concurrent use; every record they return is a fresh deep copy the caller
// may keep and mutate. The state changes only through the FSM that owns the
// store (FSM.Apply and FSM.Restore); the unexported write methods are called
// from the FSM alone.
type StateStore struct {
	// writeMu serialises writers (apply and restore) so that no write can
	// land on a database that a restore has just replaced.
	writeMu sync.Mutex

	// mu guards db and restored.
	mu sync.RWMutex
	db *memdb.MemDB
	// restored is closed when a restore replaces db, whose own watch
	// channels then never fire (see firstWatch).
	restored chan struct{}
}

// newStateStore returns an empty state store.
func newStateStore() (*StateStore, error) {
	db, err := newMemDB()
	if err != nil {
		return nil, err
	}
	return &StateStore{db: db, restored: make(chan struct{})}, nil
}

// readTxn returns a read transaction on the current database.
func (s *StateStore) readTxn() *memdb.Txn {
	s.mu.RLock()
	db := s.db
	s.mu.RUnlock()
	return db.Txn(false)
}

// snapshot returns an immutable point-in-time copy of the current database.
func (s *StateStore) snapshot() *memdb.MemDB {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.db.Snapshot()
}

// replace swaps in db as the whole state and fires the restored channel
// that watch sets hold (see firstWatch).
func (s *StateStore) replace(db *memdb.MemDB) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	s.db = db
	close(s.restored)
	s.restored = make(chan struct{})
	s.mu.Unlock()
}

// LatestIndex returns the Raft index of the last change to the state (the
// last command that modified something, or the index recorded in the
// restored snapshot); 0 for an empty store.
func (s *StateStore) LatestIndex() uint64 {
	return latestIndex(s.readTxn())
}

// latestIndex reads the latest-change index from txn.
func latestIndex(txn *memdb.Txn) uint64 {
	raw, err := txn.First(tableIndex, "id", indexLatest)
	if err != nil || raw == nil {
		return 0
	}
	return raw.(*indexEntry).Value
}

// Nodes returns all nodes sorted by ID (an empty, non-nil slice if none).
func (s *StateStore) Nodes() ([]*Node, error) {
	return all(s, "nodes", tableNodes, "id", byNodeID)
}

// NodesByName returns the nodes named name, sorted by ID (an empty, non-nil
// slice if none). Names are not unique.
func (s *StateStore) NodesByName(name string) ([]*Node, error) {
	return all(s, fmt.Sprintf("nodes named %q", name), tableNodes, "name", byNodeID, name)
}

// copier is a table record that hands out copies, so that readers never
// share a record with the FSM.
type copier[T any] interface{ Copy() T }

// first returns a copy of the first record of table whose index equals
// args, or the zero value (nil) when there is none; what names the record
// in the error.
func first[T copier[T]](s *StateStore, what, table, index string, args ...any) (T, error) {
	return firstWatch[T](s, nil, what, table, index, args...)
}

// all returns copies of every record of table whose index equals args,
// sorted by cmpFn (an empty, non-nil slice if none); what names them in the
// error.
func all[T copier[T]](s *StateStore, what, table, index string, cmpFn func(a, b T) int, args ...any) ([]T, error) {
	it, err := s.readTxn().Get(table, index, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	out := []T{}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(T).Copy())
	}
	slices.SortFunc(out, cmpFn)
	return out, nil
}

func byNodeID(a, b *Node) int { return cmp.Compare(a.ID, b.ID) }

// NodeByID returns the node with the given ID, or (nil, nil) if there is
// none.
func (s *StateStore) NodeByID(id string) (*Node, error) {
	return first[*Node](s, "node "+id, tableNodes, "id", id)
}

// ClusterMeta returns the cluster identity, or (nil, nil) before the
// ClusterInit command has been applied.
func (s *StateStore) ClusterMeta() (*ClusterMeta, error) {
	return first[*ClusterMeta](s, "cluster meta", tableMeta, "id", true)
}

// KVGet returns the entry for key, or (nil, nil) if there is none.
func (s *StateStore) KVGet(key string) (*KVEntry, error) {
	return first[*KVEntry](s, fmt.Sprintf("key %q", key), tableKV, "id", key)
}

// KVList returns the entries whose key starts with prefix ("" lists all),
// sorted by key (an empty, non-nil slice if none).
func (s *StateStore) KVList(prefix string) ([]*KVEntry, error) {
	return all(s, fmt.Sprintf("keys with prefix %q", prefix), tableKV, "id_prefix",
		func(a, b *KVEntry) int { return cmp.Compare(a.Key, b.Key) }, prefix)
}

// write runs fn in a write transaction; if fn reports a change, the latest
// index is set to index and the transaction is committed, which fires the
// watch channels of the entries it changed.
// If fn fails or reports no change, nothing is committed.
func (s *StateStore) write(index uint64, fn func(txn *memdb.Txn) (changed bool, err error)) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.RLock()
	db := s.db
	s.mu.RUnlock()

	txn := db.Txn(true)
	defer txn.Abort()
	changed, err := fn(txn)
	if err != nil || !changed {
		return err
	}
	if err := txn.Insert(tableIndex, &indexEntry{Key: indexLatest, Value: index}); err != nil {
		return fmt.Errorf("update latest index: %w", err)
	}
	txn.Commit()
	return nil
}

// validID checks that an ID or key is usable as a memdb string index value.
func validID(what, id string) error {
	if id == "" {
		return fmt.Errorf("empty %s: %w", what, ErrInvalidRequest)
	}
	if strings.IndexByte(id, 0) >= 0 {
		return fmt.Errorf("%s %q contains a NUL byte: %w", what, id, ErrInvalidRequest)
	}
	return nil
}

// initCluster records meta at index unless the cluster is already
// initialised: same ID is a no-op, a different ID is ErrClusterIDMismatch.
func (s *StateStore) initCluster(index uint64, meta ClusterMeta) error {
	if err := validID("cluster ID", meta.ID); err != nil {
		return err
	}
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableMeta, "id", true)
		if err != nil {
			return false, err
		}
		if raw != nil {
			cur := raw.(*ClusterMeta)
			if cur.ID == meta.ID {
				return false, nil
			}
			return false, fmt.Errorf("cluster is %s, not %s: %w", cur.ID, meta.ID, ErrClusterIDMismatch)
		}
		m := meta
		m.CreateIndex = index
		return true, txn.Insert(tableMeta, &m)
	})
}

// upsertNode inserts or replaces the node at index (see NodeRegisterRequest
// for the rules). The stored record is a deep copy of n.
func (s *StateStore) upsertNode(index uint64, n *Node) error {
	if n == nil {
		return fmt.Errorf("nil node: %w", ErrInvalidRequest)
	}
	if err := validID("node ID", n.ID); err != nil {
		return err
	}
	node := n.Copy()
	if node.Status == "" {
		node.Status = NodeAlive
	}
	if !node.Status.Valid() {
		return fmt.Errorf("invalid status %q: %w", node.Status, ErrInvalidRequest)
	}
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableNodes, "id", node.ID)
		if err != nil {
			return false, err
		}
		statusChanged := true
		if raw != nil {
			cur := raw.(*Node)
			if node.Incarnation < cur.Incarnation {
				return false, fmt.Errorf("incarnation %d < recorded %d: %w",
					node.Incarnation, cur.Incarnation, ErrStaleIncarnation)
			}
			node.CreateIndex = cur.CreateIndex
			// Eligibility is the operator's, not the node's to report.
			node.Ineligible, node.Draining, node.DrainDeadline = cur.Ineligible, cur.Draining, cur.DrainDeadline
			statusChanged = cur.Status != node.Status
			if !statusChanged && node.StatusChangedAt == 0 {
				node.StatusChangedAt = cur.StatusChangedAt
			}
		} else {
			node.CreateIndex = index
		}
		if statusChanged && node.StatusChangedAt == 0 {
			node.StatusChangedAt = node.RegisteredAt
		}
		node.ModifyIndex = index
		return true, txn.Insert(tableNodes, node)
	})
}

// updateNodeStatus sets the status of node id at index; setting the current
// status is a no-op.
func (s *StateStore) updateNodeStatus(index uint64, id string, status NodeStatus, at int64) error {
	if !status.Valid() {
		return fmt.Errorf("invalid status %q: %w", status, ErrInvalidRequest)
	}
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableNodes, "id", id)
		if err != nil {
			return false, err
		}
		if raw == nil {
			return false, ErrNodeNotFound
		}
		cur := raw.(*Node)
		if cur.Status == status {
			return false, nil
		}
		node := cur.Copy()
		node.Status = status
		node.StatusChangedAt = at
		node.ModifyIndex = index
		return true, txn.Insert(tableNodes, node)
	})
}

// setNodeEligibility applies req at index (see NodeEligibilityRequest).
func (s *StateStore) setNodeEligibility(index uint64, req *NodeEligibilityRequest) error {
	if req.Eligible && req.Drain {
		return fmt.Errorf("eligible and draining at once: %w", ErrInvalidRequest)
	}
	if req.DrainDeadline < 0 {
		return fmt.Errorf("drain deadline %d: %w", req.DrainDeadline, ErrInvalidRequest)
	}
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableNodes, "id", req.NodeID)
		if err != nil {
			return false, err
		}
		if raw == nil {
			return false, ErrNodeNotFound
		}
		node := raw.(*Node).Copy()
		switch {
		case req.Eligible:
			node.Ineligible, node.Draining, node.DrainDeadline = false, false, 0
		case req.Drain:
			node.Ineligible, node.Draining, node.DrainDeadline = true, true, req.DrainDeadline
		default:
			node.Ineligible = true
		}
		node.ModifyIndex = index
		return true, txn.Insert(tableNodes, node)
	})
}

// deleteNode removes node id at index; a missing node is a no-op.
func (s *StateStore) deleteNode(index uint64, id string) error {
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableNodes, "id", id)
		if err != nil || raw == nil {
			return false, err
		}
		return true, txn.Delete(tableNodes, raw)
	})
}

// kvSet applies req at index (see KVSetRequest for the CAS rules).
func (s *StateStore) kvSet(index uint64, req *KVSetRequest) (*KVSetResult, error) {
	if err := validID("key", req.Key); err != nil {
		return nil, err
	}
	res := &KVSetResult{}
	err := s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableKV, "id", req.Key)
		if err != nil {
			return false, err
		}
		var cur *KVEntry
		if raw != nil {
			cur = raw.(*KVEntry)
		}
		if req.CAS {
			var curIndex uint64
			if cur != nil {
				curIndex = cur.ModifyIndex
			}
			if curIndex != req.Index {
				res.Index = curIndex
				return false, nil
			}
		}
		e := &KVEntry{
			Key:         req.Key,
			Value:       slices.Clone(req.Value),
			CreateIndex: index,
			ModifyIndex: index,
		}
		if cur != nil {
			e.CreateIndex = cur.CreateIndex
		}
		res.OK, res.Index = true, index
		return true, txn.Insert(tableKV, e)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// kvDelete removes key at index; a missing key is a no-op.
func (s *StateStore) kvDelete(index uint64, key string) error {
	if err := validID("key", key); err != nil {
		return err
	}
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableKV, "id", key)
		if err != nil || raw == nil {
			return false, err
		}
		return true, txn.Delete(tableKV, raw)
	})
}
