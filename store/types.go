package store

import "github.com/nodeup/nodeup/wire"

// Node, its status and KVEntry travel on the wire (NodeRegisterRequest,
// StatusResponse, KVResponse), so package wire defines them; the FSM
// stores them as they are.
type (
	Node       = wire.Node
	NodeStatus = wire.NodeStatus
	KVEntry    = wire.KVEntry
	// TokenRecord is a token as the cluster keeps it: the hash of its
	// secret, never the secret (tokens.go).
	TokenRecord = wire.TokenRecord
)

// Node statuses (wire.NodeAlive, ...).
const (
	NodeAlive   = wire.NodeAlive
	NodeSuspect = wire.NodeSuspect
	NodeDead    = wire.NodeDead
	NodeLeft    = wire.NodeLeft
)

// ClusterMeta identifies the cluster. It is written once, by the first
// ClusterInit command, and never changes afterwards.
type ClusterMeta struct {
	// ID is the unique cluster ID (non-empty).
	ID string
	// Name is the human-readable cluster name.
	Name string
	// CreatedAt is the cluster creation time in unix nanoseconds, as stamped
	// by the proposer.
	CreatedAt int64
	// CreateIndex is the Raft index of the ClusterInit command; set by the FSM.
	CreateIndex uint64
}

// Copy returns a copy of m; a nil m yields nil.
func (m *ClusterMeta) Copy() *ClusterMeta {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}
