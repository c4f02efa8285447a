package wire

// MethodWorkerList: any client → a node: the worker processes of every
// alive node (or, with Local, of this node), for `nodeup list workers`
// (Ray's `ray list workers`). WorkerListRequest → WorkerList. Read role.
const MethodWorkerList = "Worker.List"

// MaxWorkerList is the most workers one node lists (the rest counted in
// WorkerList.LeftOut).
const MaxWorkerList = 10_000

// WorkerListRequest asks for every alive node's workers, or with Local
// this node's only.
type WorkerListRequest struct {
	Local bool `msgpack:",omitempty"`
}

// WorkerInfo is one worker process a node started: a task worker (shared
// by a job's tasks) or an actor's dedicated worker. PID is 0 while it
// starts.
type WorkerInfo struct {
	WorkerID string
	JobID    string
	NodeID   string
	NodeName string
	PID      int    `msgpack:",omitempty"`
	Addr     string `msgpack:",omitempty"` // its RPC address once registered
	ActorID  string `msgpack:",omitempty"` // an actor worker's actor
}

// WorkerList answers Worker.List: Workers ordered by node then worker ID;
// LeftOut, how many the per-node bound (MaxWorkerList) kept out;
// Unreachable, the nodes that did not answer, with why.
type WorkerList struct {
	Workers     []WorkerInfo
	LeftOut     int      `msgpack:",omitempty"`
	Unreachable []string `msgpack:",omitempty"`
}
