package wire

// Operator methods (issue 19), as Consul's and Nomad's `operator raft` and
// `operator snapshot`: served by the leader (any node forwards them). Each
// names its role in MethodRoles.
const (
	// MethodRaftPeers: CLI → leader (forwarded). Empty → RaftPeersResponse.
	// Needs read.
	MethodRaftPeers = "Operator.RaftPeers"
	// MethodRaftRemovePeer: CLI → leader (forwarded).
	// RaftRemovePeerRequest → RaftServer (the server removed). Needs admin.
	MethodRaftRemovePeer = "Operator.RaftRemovePeer"
	// MethodSnapshotSave: CLI → leader (forwarded). Empty → Snapshot.
	// Needs admin: a snapshot holds every token's hash and the KV.
	MethodSnapshotSave = "Operator.SnapshotSave"
	// MethodSnapshotRestore: CLI → leader (forwarded). Snapshot → Empty.
	// Needs admin.
	MethodSnapshotRestore = "Operator.SnapshotRestore"
)

// RaftPeersResponse lists the servers of the latest Raft configuration,
// sorted by name then ID, as `nodeup operator raft list-peers` prints them.
type RaftPeersResponse struct {
	Servers []RaftServer
}

// RaftRemovePeerRequest names the server to take out of the Raft
// configuration by its node ID or its Raft address (host:port).
type RaftRemovePeerRequest struct {
	Peer string
}

// MaxSnapshotSize is the largest snapshot, in bytes, that save returns and
// restore accepts: it travels in one RPC frame (rpc.MaxFrameSize, 64 MiB)
// with room for the frame's header.
const MaxSnapshotSize = 60 << 20

// Snapshot is the leader's FSM state as Raft snapshots it (the store's
// snapshot stream: magic, version, records, end marker), at Raft Index and
// Term. Data is at most MaxSnapshotSize bytes.
type Snapshot struct {
	Index uint64
	Term  uint64
	Data  []byte
}

// Node drain and scheduling eligibility (issue 19), as Nomad's `node
// drain` and `node eligibility`: CLI → leader (forwarded), admin.
const (
	// MethodNodeDrain: NodeDrainRequest → Node (the record after the
	// change).
	MethodNodeDrain = "Node.Drain"
	// MethodNodeEligibility: NodeEligibilityRequest → Node.
	MethodNodeEligibility = "Node.Eligibility"
	// MethodNodeDrainStop: leader → the drained node, once its drain
	// deadline has passed. Empty → NodeDrainStopReply. Its task worker
	// processes are stopped; their owners retry the tasks elsewhere (Ray's
	// max_retries).
	MethodNodeDrainStop = "Node.DrainStop"
)

// NodeDrainStopReply counts the task worker processes stopped.
type NodeDrainStopReply struct {
	Stopped int
}

// NodeDrainRequest drains the node named by ID or name (a name must be
// unique): it becomes ineligible, its restartable actors restart elsewhere
// and its placement-group bundles move; after DeadlineNanos (0: none) the
// actors left there are stopped.
type NodeDrainRequest struct {
	Node          string
	DeadlineNanos int64
}

// NodeEligibilityRequest sets whether the node named by ID or name may get
// new work; Eligible also ends a drain.
type NodeEligibilityRequest struct {
	Node     string
	Eligible bool
}
