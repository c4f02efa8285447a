package wire

import (
	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
)

// Cluster methods served on every node's port. Leader-only methods may be
// sent to any node: it forwards them to the leader (as Nomad forwards).
const (
	// MethodHello: any → any node. Empty → HelloResponse.
	MethodHello = "Cluster.Hello"
	// MethodStatus: CLI, HTTP → leader (forwarded). Empty → StatusResponse.
	MethodStatus = "Cluster.Status"
	// MethodNodeRegister: node → leader (forwarded). NodeRegisterRequest → Empty.
	MethodNodeRegister = "Node.Register"
	// MethodNodeHeartbeat: node → leader (forwarded). HeartbeatRequest → HeartbeatResponse.
	MethodNodeHeartbeat = "Node.Heartbeat"
	// MethodKVGet, MethodKVList, MethodKVSet, MethodKVDelete: the internal
	// KV, at the leader (forwarded). KVRequest → KVResponse.
	MethodKVGet    = "KV.Get"
	MethodKVList   = "KV.List"
	MethodKVSet    = "KV.Set"
	MethodKVDelete = "KV.Delete"
	// MethodRaftStats: autopilot, leader → server (internal). Empty → RaftStats.
	MethodRaftStats = "Raft.Stats"
	// MethodRaftLeave: a leaving server → leader (internal). RaftLeaveRequest → Empty.
	MethodRaftLeave = "Raft.Leave"
)

// LeaderSuffix marks the leader-only variant of a method ("KV.Get@leader"):
// the forwarder calls it at the leader, which refuses it with CodeNotLeader
// instead of forwarding again, so a stale leader view can never make
// requests loop.
const LeaderSuffix = "@leader"

// HelloResponse tells a joining node which cluster it is talking to and where
// to gossip.
type HelloResponse struct {
	ClusterID   string
	ClusterName string
	NodeID      string
	Version     string
	LeaderAddr  string   // RPC address of the Raft leader, "" if unknown
	GossipAddrs []string // host:port of live members' memberlist ports
}

// NodeRegisterRequest puts a node's record (total resources, labels,
// addresses, incarnation) in the Raft node table.
type NodeRegisterRequest struct {
	Node Node
}

// HeartbeatRequest reports a node's soft state to the leader (kept in the
// leader's memory only, never in the Raft log).
type HeartbeatRequest struct {
	NodeID      string
	Incarnation uint64
	Available   sched.ResourceSet
	Pending     []PendingDemand // queued or infeasible work on this node
	// GPUs is the node's device status (health, reservations, telemetry:
	// utilization %, memory bytes, °C, W, processes); nil without GPUs.
	GPUs    *gpu.Status
	Bundles []BundleHeld // placement-group bundles this node holds
	Actors  []ActorHeld  // actor incarnations running on this node
}

// HeartbeatResponse says whether the leader knows this node's current
// incarnation (false: register again) and who leads.
type HeartbeatResponse struct {
	Known      bool
	LeaderAddr string
	View       []NodeInfo // every node's totals and last reported free resources
	// StaleActors are reported actors the actor table has moved past (the
	// node was cut off and the actor restarted elsewhere, or ended): the
	// node stops them.
	StaleActors []StaleActor
}

// ActorHeld is an actor incarnation whose worker process runs on a node.
type ActorHeld struct {
	ID          string
	Incarnation int
}

// StaleActor is an actor process its node must stop, and why. JobLives is
// set when the table has the same incarnation alive on another node (two
// leaders each placed it): that incarnation's job is not over, so the node
// must not end the job's other workers and objects or tell peers to.
type StaleActor struct {
	ActorHeld
	Reason   string
	JobLives bool
}

// RaftServer is one member of the Raft configuration.
type RaftServer struct {
	ID       string
	Name     string
	Address  string
	Suffrage string // "voter", "nonvoter" or "staging"
	Leader   bool
}

// NodeView is a node's Raft record plus the leader's soft state for it.
type NodeView struct {
	Node
	Available     sched.ResourceSet // resource units free now; equals total until reported
	LastHeartbeat int64             // unix nanoseconds of the last soft-state report, 0 if none
	RaftSuffrage  string            // "voter", "nonvoter", or "" when not in the Raft group
	// GPUs is the node's GPU status from its last heartbeat (per device:
	// health, reservations, utilization %, memory used/total bytes,
	// temperature °C, power W, processes with a foreign flag); nil for a
	// node without GPUs or before its first report to this leader.
	GPUs *gpu.Status
}

// StatusResponse is the cluster view that `nodeup status` prints.
type StatusResponse struct {
	ClusterID   string
	ClusterName string
	LeaderID    string
	LeaderName  string
	LeaderAddr  string
	Servers     []RaftServer
	Nodes       []NodeView
	// Total and Available sum the resources of alive nodes (resource units).
	Total     sched.ResourceSet
	Available sched.ResourceSet
	// Pending is work waiting for resources, per node; Reason says why
	// (infeasible work names the missing resource).
	Pending []PendingDemand
	// Insecure: the leader runs with --insecure (no TLS between nodes,
	// no CA, no tokens).
	Insecure bool
	// CAHash is the cluster CA's pin ("sha256:<hex>"), "" when insecure.
	CAHash string
}

// KVRequest addresses the internal KV (the seeds' internal_kv).
type KVRequest struct {
	Key    string
	Prefix string
	Value  []byte
	CAS    bool   // with Set: only if the entry's ModifyIndex equals Index (0: absent)
	Index  uint64 // CAS index
}

// KVResponse returns entries or a write's outcome.
type KVResponse struct {
	Entries []KVEntry
	OK      bool
	Index   uint64
}

// RaftStats is what autopilot needs from each server (Raft.Stats).
type RaftStats struct {
	LastContactNanos int64
	LastTerm         uint64
	LastIndex        uint64
	DiskError        string // the server's *DiskWriteError, "" while it can write
}

// RaftLeaveRequest asks the leader to take a server (node ID, in the
// incarnation that is leaving) out of the Raft configuration.
type RaftLeaveRequest struct {
	NodeID      string
	Incarnation uint64
}
