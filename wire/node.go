package wire

import (
	"maps"
	"slices"

	"github.com/nodeup/nodeup/sched"
)

// NodeStatus is the liveness status of a node as recorded in the replicated
// state. Transitions are proposed by the leader (from gossip and heartbeat
// observations) or by the node itself (registration, graceful leave).
type NodeStatus string

const (
	// NodeAlive means the node is registered and reachable; it may receive work.
	NodeAlive NodeStatus = "alive"
	// NodeSuspect means the node missed heartbeats or gossip marked it suspect;
	// it receives no new work but its existing work is kept.
	NodeSuspect NodeStatus = "suspect"
	// NodeDead means the node is considered failed; its work is rescheduled.
	NodeDead NodeStatus = "dead"
	// NodeLeft means the node left the cluster gracefully.
	NodeLeft NodeStatus = "left"
)

// Valid reports whether s is one of NodeAlive, NodeSuspect, NodeDead or
// NodeLeft. The empty status is not valid.
func (s NodeStatus) Valid() bool {
	switch s {
	case NodeAlive, NodeSuspect, NodeDead, NodeLeft:
		return true
	}
	return false
}

// Live reports whether a node with status s is up, alive or suspect (not
// dead, not left): it holds its work and counts in placement.
func (s NodeStatus) Live() bool { return s == NodeAlive || s == NodeSuspect }

// Node is one member of the cluster as recorded in the replicated state.
// It is serialised with msgpack using the Go field names as keys.
type Node struct {
	// ID is the stable node ID, generated once and persisted in the node's
	// data directory. It must be non-empty and contain no NUL byte.
	ID string
	// Name is the human-readable node name (not necessarily unique).
	Name string
	// Address is the RPC "host:port" of the node; it is also its Raft
	// address when the node is a server.
	Address string
	// GossipAddress is the memberlist "host:port" of the node.
	GossipAddress string
	// HTTPAddress is the "host:port" of the node's HTTP API, or "" if the
	// API is disabled.
	HTTPAddress string
	// Server reports whether the node is eligible to be a Raft voter.
	Server bool
	// Resources are the node's total resources in sched fixed-point units
	// (sched.Unit per whole CPU/GPU/custom unit, per byte for "memory").
	Resources sched.ResourceSet
	// Labels are free-form key/value labels used for placement constraints.
	Labels map[string]string
	// Status is the node's liveness status.
	Status NodeStatus
	// Incarnation is bumped by the node on every restart with the same data
	// directory; a registration carrying a lower incarnation than the
	// recorded one is stale and rejected.
	Incarnation uint64
	// Version is the nodeup version the node runs.
	Version string
	// RegisteredAt is the time of the node's last registration, in unix
	// nanoseconds, as stamped by the proposer.
	RegisteredAt int64
	// StatusChangedAt is the time of the last change of Status, in unix
	// nanoseconds, as stamped by the proposer.
	StatusChangedAt int64
	// Ineligible: the scheduling policy places no new task lease, actor or
	// placement-group bundle here (`nodeup node eligibility --disable`, and
	// every drain), as Nomad's scheduling eligibility. Only the FSM's
	// NodeEligibility command changes it; registration keeps it.
	Ineligible bool
	// Draining: `nodeup node drain` moves this node's actors and bundles
	// elsewhere; it stays set (with Ineligible) until eligibility is
	// enabled again. DrainDeadline (unix nanoseconds, 0 for none) is when
	// what is left here is stopped.
	Draining      bool
	DrainDeadline int64
	// CreateIndex is the Raft index at which the node was first registered;
	// set by the FSM.
	CreateIndex uint64
	// ModifyIndex is the Raft index of the last change to the node; set by
	// the FSM.
	ModifyIndex uint64
}

// Copy returns a deep copy of n (Resources and Labels are copied); a nil n
// yields nil.
func (n *Node) Copy() *Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Resources = maps.Clone(n.Resources)
	c.Labels = maps.Clone(n.Labels)
	return &c
}

// KVEntry is one entry of the replicated key/value space.
type KVEntry struct {
	// Key is the entry's key (non-empty, no NUL byte). Keys are flat strings;
	// "/" has no special meaning beyond prefix listing.
	Key string
	// Value is the opaque value.
	Value []byte
	// CreateIndex is the Raft index at which the key was created.
	CreateIndex uint64
	// ModifyIndex is the Raft index of the last write to the key; it is the
	// value compared by check-and-set writes.
	ModifyIndex uint64
}

// Copy returns a deep copy of e (Value is copied); a nil e yields nil.
func (e *KVEntry) Copy() *KVEntry {
	if e == nil {
		return nil
	}
	c := *e
	c.Value = slices.Clone(e.Value)
	return &c
}
