// Package wire holds the messages of nodeup's task protocol: what a core
// worker (driver or worker process) says to its node's local scheduler, what
// nodes say to each other about leases and binaries, and what an owner says
// to the workers that run its tasks. All travel as msgpack bodies of rpc
// frames (see rpc/doc.go); docs/protocol.md lists them for implementers of
// other languages. Field names are the wire names: never rename, only add.
package wire

import (
	"fmt"

	"github.com/nodeup/nodeup/sched"
)

// Methods served by every node daemon (the local scheduler).
const (
	// MethodJobRegister: driver → local node. JobRegisterRequest → JobRegisterReply.
	MethodJobRegister = "Job.Register"
	// MethodJobFinish: driver → local node at Shutdown. JobFinishRequest → Empty.
	MethodJobFinish = "Job.Finish"
	// MethodBinaryFetch: node → node, chunked copy of a job's binary. BinaryFetchRequest → BinaryFetchReply.
	MethodBinaryFetch = "Binary.Fetch"
	// MethodLease: core worker → node. LeaseRequest → LeaseReply (blocks while queued).
	MethodLease = "Sched.Lease"
	// MethodLeaseReturn: core worker → the node that granted a lease. LeaseReturnRequest → Empty.
	MethodLeaseReturn = "Sched.Return"
	// MethodBlocked / MethodUnblocked: worker → its node while a task waits in Get
	// (its CPU is lent back meanwhile). BlockedRequest → Empty.
	MethodBlocked   = "Sched.Blocked"
	MethodUnblocked = "Sched.Unblocked"
	// MethodWorkerRegister: a worker process → its node once it serves. WorkerRegisterRequest → Empty.
	MethodWorkerRegister = "Worker.Register"
	// MethodClusterView: core worker → node: the node table with resources. Empty → ClusterView.
	MethodClusterView = "Sched.ClusterView"
	// MethodObjectCreate: core worker → its node: allocate a large object in
	// the node's shared-memory store; the caller writes it through its own
	// mapping of the arena, then seals it. ObjectCreateRequest → ObjectLocation.
	MethodObjectCreate = "Obj.Create"
	// MethodObjectSeal / MethodObjectAbort: finish or drop a created object. ObjectKey → Empty.
	MethodObjectSeal  = "Obj.Seal"
	MethodObjectAbort = "Obj.Abort"
	// MethodObjectLocate: core worker → its node: make a large object local
	// (pulling it from From in chunks if needed) and say where it is in the
	// arena. ObjectLocateRequest → ObjectLocation.
	MethodObjectLocate = "Obj.Locate"
	// MethodObjectRead: node → node, a chunk of a sealed object.
	// ObjectReadRequest → the chunk's bytes as a bare msgpack bin (no
	// enclosing map), which the node writes straight from its arena and the
	// puller reads straight into its own (rpc.Bulk, rpc.Client.CallInto).
	MethodObjectRead = "Obj.Read"
	// MethodObjectWrite: core worker → its node: bytes of an object the
	// caller created (Obj.Create) and has not sealed, for a process that
	// cannot map the node's arena (a driver on another machine, which reads
	// with Obj.Locate and Obj.Read). ObjectWriteRequest → Empty.
	MethodObjectWrite = "Obj.Write"
	// MethodObjectFree: an object's owner → the node holding its primary
	// copy, once no reference to it is left (Ray's owner-driven free); that
	// node deletes it and passes the request on, FromNode set, to the nodes
	// that pulled a secondary copy. Keys not present are skipped, so a free
	// is idempotent. ObjectFreeRequest → Empty.
	MethodObjectFree = "Obj.Free"
)

// MaxFreeKeys is the most keys one ObjectFreeRequest may name.
const MaxFreeKeys = 4096

// ObjectFreeRequest names objects (store keys, job ID / object ID) to
// delete from a node's store, at most MaxFreeKeys. FromNode marks a request
// a node passed on to a holder of secondary copies (not passed on again).
type ObjectFreeRequest struct {
	Keys     []string
	FromNode bool
}

// ObjectLoc names a large object's primary copy: its store key (job ID /
// object ID), the node holding it, and its size in bytes.
type ObjectLoc struct {
	Key      string
	NodeAddr string
	Size     int64
}

// ObjectCreateRequest allocates Size bytes under Key.
type ObjectCreateRequest struct {
	Key  string
	Size int64
	// Owner is the object's owner's RPC address and CallSite what made it
	// (a task's name, "put"), shown by `nodeup memory`; optional.
	Owner    string `msgpack:",omitempty"`
	CallSite string `msgpack:",omitempty"`
}

// ObjectKey names an object in a node's store.
type ObjectKey struct{ Key string }

// ObjectLocation is where an object lies in the node's arena file (bytes).
type ObjectLocation struct {
	Offset int64
	Size   int64
}

// ObjectLocateRequest asks a node to hold Loc's object locally.
type ObjectLocateRequest struct{ Loc ObjectLoc }

// MaxWriteChunk is the most bytes one ObjectWriteRequest carries.
const MaxWriteChunk = 16 << 20

// ObjectWriteRequest writes Data (at most MaxWriteChunk bytes) into the
// unsealed object Key from byte Offset.
type ObjectWriteRequest struct {
	Key    string
	Offset int64
	Data   []byte
}

// ObjectReadRequest asks for Length bytes of a sealed object from Offset
// (the server caps a chunk at 16 MiB); the answer is shorter only where the
// object ends. Puller is the RPC address of the node pulling a secondary
// copy (empty from older nodes): the serving node remembers it, from the
// chunk at Offset 0, to pass an Obj.Free on to it.
type ObjectReadRequest struct {
	Key    string
	Offset int64
	Length int64
	Puller string
}

// Methods served by every core worker (drivers and worker processes).
const (
	// MethodPushTask: owner → leased worker. PushTaskRequest → PushTaskReply (when the task ends).
	MethodPushTask = "Task.Push"
	// MethodLeaseRevoke: node → its task worker process: the leases named
	// may start no further task (their placement-group bundle was
	// returned). LeaseRevokeRequest → Empty.
	MethodLeaseRevoke = "Task.RevokeLeases"
	// MethodObjectGet: borrower → owner: wait for an object and return it. ObjectGetRequest → ObjectGetReply.
	MethodObjectGet = "Object.Get"
	// MethodObjectGetMany: borrower → owner: wait until any of several
	// objects is ready and return every ready one. ObjectGetManyRequest →
	// ObjectGetManyReply.
	MethodObjectGetMany = "Object.GetMany"
	// MethodObjectRefRemoved: borrower → owner: the borrower let go of
	// objects it reported as Borrowed in a task's reply (Ray's
	// WaitForRefRemoved answer). ObjectRefRemovedRequest → Empty.
	MethodObjectRefRemoved = "Object.RefRemoved"
	// MethodObjectBorrowed: borrower → owner: at the end of a task, the
	// worker process still holds refs to these objects of an owner other
	// than the task's, which it found nested in another object (a task
	// result that contains them): the owner keeps each until the borrower
	// sends Object.RefRemoved for it. Sent before the task's reply, while
	// the outer object, held by the task, still keeps them.
	// ObjectRefRemovedRequest (IDs) → Empty.
	MethodObjectBorrowed = "Object.Borrowed"
	// MethodObjectRecover: borrower → owner: the borrower could not read
	// the large object's copy at the location the owner gave; the owner
	// rebuilds it from its lineage once that node is declared dead, and
	// answers as Object.Get with the new copy's location (Ray's object
	// recovery). ObjectRecoverRequest → ObjectGetReply.
	MethodObjectRecover = "Object.Recover"
)

// ObjectRecoverRequest names an object whose copy on the node at NodeAddr
// (under store key Key) a borrower could not read; the owner answers
// within WaitMillis (NotReady past it: ask again).
type ObjectRecoverRequest struct {
	ID         string
	Key        string
	NodeAddr   string
	WaitMillis int64
}

// ObjectRefRemovedRequest names objects (at most MaxFreeKeys) whose
// borrower let go of them, once per Borrowed report.
type ObjectRefRemovedRequest struct {
	IDs []string
}

// Empty is the body of calls that carry nothing.
type Empty struct{}

// JobRegisterRequest announces a driver. BinaryPath is the driver's own
// executable (same machine as the node), which the node copies into its
// content-addressed cache under BinaryHash (hex sha256).
type JobRegisterRequest struct {
	JobID      string
	BinaryHash string
	BinaryPath string
	DriverPID  int
	// Language is the job's language: "" (LanguageGo) for a Go driver whose
	// binary is the worker, LanguagePython for a Python driver, whose
	// workers are `<python> -m nodeup.worker` and which sends no binary
	// (BinaryHash and BinaryPath empty). CheckLanguage lists what is accepted.
	Language string `msgpack:",omitempty"`
}

// Job languages (JobRegisterRequest.Language, LeaseRequest.Language).
const (
	LanguageGo     = ""       // the job's binary is its worker
	LanguagePython = "python" // the node runs `<python> -m nodeup.worker`
)

// CheckLanguage returns an error naming lang unless it is LanguageGo or
// LanguagePython; with LanguagePython, hash must be empty (a Python job
// has no binary), otherwise it must pass CheckHash.
func CheckLanguage(lang, hash string) error {
	switch lang {
	case LanguageGo:
		return CheckHash("binary hash", hash)
	case LanguagePython:
		if hash != "" {
			return fmt.Errorf("a %s job has no binary, but binary hash %q was given", lang, hash)
		}
		return nil
	}
	return fmt.Errorf("job language %q is not one of \"\" (Go) and %q", lang, LanguagePython)
}

// JobRegisterReply tells the driver where its node is.
type JobRegisterReply struct {
	NodeID    string
	NodeName  string
	NodeAddr  string // RPC address other nodes use for this node
	BindIP    string // IP the driver's own RPC server should listen on
	ArenaPath string // the node's object store file, mapped for zero-copy reads
	ClusterID string
	// ClusterName was misspelled ClusterNam before protocol version 2. The
	// InlineMax field of version 1 is gone: InlineMax is a protocol
	// constant, since a job's worker processes never see this reply and
	// must split values where its driver does.
	ClusterName string
	// JobToken is the job's token (role submit, for this job only), which
	// the driver's core worker presents on every connection it opens and
	// requires of every connection to its port; revoked when the job ends.
	// "" on an --insecure cluster.
	JobToken string
}

// JobFinishRequest ends a job: its workers stop and its objects are freed.
// The driver's node passes it on to every other node with FromNode set.
type JobFinishRequest struct {
	JobID    string
	FromNode bool
}

// BinaryFetchRequest asks for Length bytes of a cached binary from Offset.
type BinaryFetchRequest struct {
	Hash   string
	Offset int64
	Length int64
}

// BinaryFetchReply carries a chunk; Size is the whole binary's size in bytes.
type BinaryFetchReply struct {
	Data []byte
	Size int64
}

// Strategy kinds, as Ray's scheduling strategies.
const (
	StrategyDefault      = ""              // hybrid: local first, spill when busy
	StrategySpread       = "SPREAD"        // prefer the least-loaded feasible node
	StrategyNodeAffinity = "NODE_AFFINITY" // NodeID, hard or soft
)

// Strategy is a task's or actor's scheduling strategy.
type Strategy struct {
	Kind   string
	NodeID string // NODE_AFFINITY target
	Soft   bool   // NODE_AFFINITY: fall back to other nodes when the target cannot run it
	// Labels are hard conditions on node labels that hold with any Kind
	// (Ray's label_selector): only matching nodes run the work.
	Labels sched.LabelSelector `msgpack:",omitempty"`
	// SoftLabels are preferred node labels, with the DEFAULT Kind only
	// (Ray's NodeLabelSchedulingStrategy soft): matching nodes first, any
	// node Labels allow when none matches or has room.
	SoftLabels sched.LabelSelector `msgpack:",omitempty"`
}

// LeaseRequest asks a node for a worker with Resources reserved for it (Ray's
// RequestWorkerLease). Spilled is set on a request another node sent here, so
// it is queued rather than spilled again.
type LeaseRequest struct {
	JobID        string
	BinaryHash   string
	BinaryNode   string // RPC address of a node that has the binary
	Env          []string
	Resources    sched.ResourceSet
	Strategy     Strategy
	Spilled      bool
	TaskName     string // for logs and pending-demand listings
	NoQueueIfNot bool   // reply Busy instead of queueing (used by spread probes)
	// EnvVars are the task's runtime env vars (Ray's runtime_env env_vars,
	// already merged with its parent's): the node runs the lease in a worker
	// process started with exactly these variables (and Env), one per
	// distinct set. Keys must pass ValidateEnvVar.
	EnvVars map[string]string `msgpack:",omitempty"`
	// Language is the job's language (JobRegisterRequest.Language): with
	// LanguagePython, BinaryHash and BinaryNode are empty and the node
	// starts its Python interpreter instead of fetching a binary.
	Language string `msgpack:",omitempty"`
}

// LeaseReply grants a lease, redirects the request (Spillback: retry at that
// node's address), or says no node can ever run it (Infeasible, its
// reason naming what is missing).
type LeaseReply struct {
	LeaseID    uint64
	WorkerAddr string
	WorkerID   string
	// WorkerPID is the leased worker process's PID (0 when unknown), for
	// the owner's task events.
	WorkerPID  int `msgpack:",omitempty"`
	NodeID     string
	NodeName   string
	NodeAddr   string
	Spillback  string
	Infeasible *Infeasible `msgpack:",omitempty"`
	Busy       bool
}

// LeaseReturnRequest gives a lease's resources back.
type LeaseReturnRequest struct {
	LeaseID uint64
}

// LeaseRevokeRequest names leases of the worker that may start no further
// task, and why (the worker refuses their pushes with code
// lease_revoked and that reason).
type LeaseRevokeRequest struct {
	LeaseIDs []uint64
	Reason   string
}

// BlockedRequest names the lease whose task waits in Get.
type BlockedRequest struct {
	LeaseID uint64
}

// WorkerRegisterRequest announces a worker process's RPC address.
type WorkerRegisterRequest struct {
	WorkerID string
	Addr     string
	PID      int
}

// NodeInfo is one node as the scheduler sees it.
type NodeInfo struct {
	NodeID    string
	NodeName  string
	Addr      string
	Alive     bool
	State     string
	Total     sched.ResourceSet
	Available sched.ResourceSet
	Labels    map[string]string
	// Ineligible: the policy places no new work here (the node's
	// eligibility is disabled or it drains); Draining: it drains.
	Ineligible bool
	Draining   bool
}

// ClusterView is every node with total and available resources.
type ClusterView struct {
	Nodes []NodeInfo
}

// PendingDemand is work waiting for resources, for `nodeup status`.
type PendingDemand struct {
	Resources sched.ResourceSet
	Count     int
	Reason    string
	TaskName  string
}

// Arg is one task argument: an inline msgpack value, or a reference to an
// object owned by Owner (the owner's RPC address).
type Arg struct {
	Inline []byte
	RefID  string
	Owner  string
	IsRef  bool
}

// TaskSpec describes one task invocation.
type TaskSpec struct {
	TaskID     string
	JobID      string
	Name       string // user-visible name (Options Name, else the function name)
	Function   string // registered function name
	Args       []Arg
	NumReturns int
	Owner      string // owner's RPC address, for nested refs
	Attempt    int
	// Code is the function itself, serialized in the job's language, for
	// languages that ship functions rather than register them: a Python
	// job sends the cloudpickled function here and leaves Function as its
	// qualified name, for messages only. Go sends nothing.
	Code []byte `msgpack:",omitempty"`
	// KwargNames name keyword arguments: the last len(KwargNames) Args are
	// passed by these names (Python); empty for Go.
	KwargNames []string `msgpack:",omitempty"`
	// Resources is the demand the task was leased with (fixed-point, as
	// LeaseRequest.Resources), for the worker's runtime context (Ray's
	// get_assigned_resources); the Python SDK sends it, Go sends nothing.
	Resources sched.ResourceSet `msgpack:",omitempty"`
	// ConcurrencyGroup names the concurrency group an actor call runs in
	// (Ray's concurrency_group option of an actor method); "" is the
	// method's own group, else the default one. Python only.
	ConcurrencyGroup string `msgpack:",omitempty"`
}

// PushTaskRequest runs Spec on the worker under LeaseID.
type PushTaskRequest struct {
	LeaseID uint64
	Spec    TaskSpec
	// Pipelined marks a task sent while another task of the same lease may
	// still run. The worker starts it only after that one ends, and only if
	// that one has neither blocked in Get or Wait nor run longer than the
	// worker's pipeline wait (10 ms); otherwise it answers NotRun at once,
	// and the owner runs the task on another lease. A task that is not
	// pipelined waits for the lease's running task, however long.
	Pipelined bool `msgpack:",omitempty"`
}

// PushTaskReply returns the task's results (msgpack values) or its error.
// A result over the inline limit is in the worker node's object store
// instead: Stored[i] is set and Returns[i] is empty.
type PushTaskReply struct {
	Returns [][]byte
	Stored  []*ObjectLoc
	Error   *TaskFailure
	// NotRun: the worker did not start the task (a Pipelined push behind a
	// task that blocked or ran long); nothing of it ran, and the owner may
	// send it anywhere without counting an attempt.
	NotRun bool `msgpack:",omitempty"`
	// RunNanos is how long the task ran in the worker, in nanoseconds,
	// arguments and results included; the owner pipelines only tasks of a
	// shape known to be short.
	RunNanos int64 `msgpack:",omitempty"`
	// Borrowed are objects of the task's owner that the worker process
	// still holds refs to when the task returns (refs nested in its
	// arguments, kept): the owner keeps each until the worker sends
	// Object.RefRemoved for it (Ray's borrower protocol). An object the
	// worker passed on to other processes is never removed.
	Borrowed []string `msgpack:",omitempty"`
	// Contained are, per result (same order as Returns, or empty), the
	// objects of the worker process (owned by ContainedOwner, its address)
	// whose refs are nested in that result (Ray's "contained in"
	// references): the worker counts the task's owner as a borrower of
	// each, and the owner sends Object.RefRemoved for each once it frees
	// the result. Empty for results that hold no refs.
	Contained      [][]string `msgpack:",omitempty"`
	ContainedOwner string     `msgpack:",omitempty"`
}

// TaskFailure is an application error or panic raised by a task.
type TaskFailure struct {
	Message  string
	Stack    string
	Panic    bool
	NodeID   string
	NodeName string
	PID      int
	// Payload is the error itself, serialized in the job's language, so an
	// owner can raise it again with its own type (Python: the cloudpickled
	// exception, as Ray's RayTaskError carries its cause); empty for Go or
	// when it could not be serialized.
	Payload []byte `msgpack:",omitempty"`
}

// ObjectGetRequest asks the owner for an object, waiting up to WaitMillis
// (0: do not wait) for it to be ready.
type ObjectGetRequest struct {
	ID         string
	WaitMillis int64
}

// ObjectGetManyRequest asks the owner for several objects at once, waiting
// up to WaitMillis (milliseconds) until at least one is ready. MaxBytes caps
// the reply's values (bytes; 0: the owner's default of 8 MiB); objects past
// the cap come back NotReady and are asked for again.
type ObjectGetManyRequest struct {
	IDs        []string
	WaitMillis int64
	MaxBytes   int64
}

// ObjectGetManyReply holds one ObjectGetReply per requested ID, in the
// request's order.
type ObjectGetManyReply struct {
	Objects []ObjectGetReply
}

// ObjectGetReply is the object's value, its failure, or NotReady.
type ObjectGetReply struct {
	Value    []byte
	Loc      *ObjectLoc // set instead of Value for a large object
	Error    *TaskFailure
	TaskName string
	NotReady bool
	Lost     string // non-empty: the object is gone, and why
	// Freed is set with Lost when the owner freed the object (no reference
	// to it was left, or worker.Free): the borrower's Get reports an
	// ObjectFreedError rather than a loss.
	Freed bool
}
