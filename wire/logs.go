package wire

// Worker and actor process logs (docs/operations.md, "Worker and actor
// logs"): what `nodeup logs` and a driver's log_to_driver read.
const (
	// MethodLogsList: any client → a node: the worker and actor log files
	// of this node, or (LogsListRequest.Cluster) of every alive node, the
	// node asking its peers. LogsListRequest → LogsList. Read role.
	MethodLogsList = "Logs.List"
	// MethodLogsRead: any client → a node: a byte range or the last lines
	// of one log file of this node or (LogsReadRequest.Node) of another
	// alive node, the node forwarding. LogsReadRequest → LogsReadReply.
	// Read role.
	MethodLogsRead = "Logs.Read"
)

// MaxLogRead is the most bytes one Logs.Read returns (1 MiB); a larger or
// non-positive Limit is taken as this.
const MaxLogRead = 1 << 20

// MaxLogList is the most files one node lists in a LogsList (about 200
// bytes each in msgpack); LogsList.LeftOut counts the rest.
const MaxLogList = 5000

// MaxLogClusterList is the most files a cluster-wide LogsList carries
// (about 10 MB, well under rpc.MaxFrameSize); LeftOut counts the rest.
const MaxLogClusterList = 50_000

// LogsListRequest filters a listing: Job (a job ID: its task workers' and
// its actors' files) and Actor (an actor ID); empty matches all. Cluster
// asks every alive node, not only this one.
type LogsListRequest struct {
	Job     string `msgpack:",omitempty"`
	Actor   string `msgpack:",omitempty"`
	Cluster bool   `msgpack:",omitempty"`
}

// LogFile is one worker or actor log file of a node: the current file of a
// process (Backup 0) or one of its rotated ones (Backup n: <name>.n, n=1
// the newest).
type LogFile struct {
	NodeID   string
	NodeName string
	Addr     string // the node's RPC address
	Name     string // the bare file name, what LogsReadRequest.Name takes
	Kind     string // "worker" (a task worker) or "actor"
	Job      string `msgpack:",omitempty"` // the job; "" for an actor the node no longer knows (restarted since)
	Actor    string `msgpack:",omitempty"` // the actor ID, for Kind "actor"
	Class    string `msgpack:",omitempty"` // the actor's class name, when known
	Worker   string // the worker's ID (16 hex digits)
	PID      int
	Backup   int   `msgpack:",omitempty"`
	Size     int64 // bytes
	ModTime  int64 // last write, Unix nanoseconds
	Live     bool  `msgpack:",omitempty"` // its process is running
}

// LogNodeError is a node a cluster-wide Logs.List could not list, and why.
type LogNodeError struct {
	NodeName string
	Addr     string
	Error    string
}

// LogsList is the answer to Logs.List: the files, sorted by node name
// then file name; LeftOut, how many the caps (MaxLogList a node,
// MaxLogClusterList in all) left out; and
// the nodes that did not answer (cluster listing only).
type LogsList struct {
	Files   []LogFile
	LeftOut int            `msgpack:",omitempty"`
	Errors  []LogNodeError `msgpack:",omitempty"`
}

// LogsReadRequest reads the log file Name (a bare name as LogFile.Name:
// anything else is bad_input) on the node Node (its name, ID or RPC
// address; "": the node asked). Without Tail it reads from byte Offset at
// most Limit bytes (1 to MaxLogRead; others mean MaxLogRead); with Tail
// > 0 the last Tail lines (at most Limit bytes of them), ignoring Offset.
// The data ends at a line end whenever the range holds one.
type LogsReadRequest struct {
	Node   string `msgpack:",omitempty"`
	Name   string
	Offset int64 `msgpack:",omitempty"`
	Limit  int64 `msgpack:",omitempty"`
	Tail   int   `msgpack:",omitempty"`
}

// LogsReadReply holds Data, the bytes of the file from Offset; Next is
// the offset after them (where a follower reads next) and Size the file's
// size at the read. Size < a follower's offset means the file was rotated
// (started anew): read it again from 0.
type LogsReadReply struct {
	NodeName string
	Name     string
	Data     []byte
	Offset   int64
	Next     int64
	Size     int64
}
