package wire

import "github.com/nodeup/nodeup/sched"

// Actor methods. Create, Get, List, Kill, Died and JobDone are leader-only
// (any node forwards them); Start and Stop are served by the node the leader
// places an actor on; Construct and Call by the actor's worker process.
const (
	// MethodActorCreate: driver → any node → leader. ActorCreateRequest → ActorCreateReply.
	MethodActorCreate = "Actor.Create"
	// MethodActorGet: caller → leader, by ID or name, optionally waiting for a
	// state worth acting on. ActorGetRequest → ActorInfo.
	MethodActorGet = "Actor.Get"
	// MethodActorList: any → leader. Empty → ActorList.
	MethodActorList = "Actor.List"
	// MethodActorKill: any → leader. ActorKillRequest → Empty.
	MethodActorKill = "Actor.Kill"
	// MethodActorDied: node → leader when an actor's worker process exited. ActorDiedRequest → Empty.
	MethodActorDied = "Actor.Died"
	// MethodActorJobDone: node → leader when a driver finished: its actors
	// that are not detached die, its placement groups are removed, and its
	// job token is revoked. JobFinishRequest → Empty.
	MethodActorJobDone = "Actor.JobDone"
	// MethodActorStart: leader → node: reserve the actor's resources, start its
	// dedicated worker process and run its constructor. ActorStartRequest → ActorStartReply.
	MethodActorStart = "Actor.Start"
	// MethodActorStop: leader → node: end an actor's worker process. ActorStopRequest → Empty.
	MethodActorStop = "Actor.Stop"
	// MethodActorConstruct: node → the actor's worker. ActorConstructRequest → ActorConstructReply.
	MethodActorConstruct = "Actor.Construct"
	// MethodActorCall: caller → the actor's worker, directly. ActorCallRequest → PushTaskReply.
	MethodActorCall = "Actor.Call"
)

// ActorCreateRequest registers an actor (Ray's actor creation task). Args
// are the constructor's arguments; refs among them are resolved by the
// actor's worker when the constructor runs.
type ActorCreateRequest struct {
	ActorID        string // optional: an ID chosen by the creator (hex, 8–64 chars)
	JobID          string
	Class          string
	Name           string
	Namespace      string
	GetIfExists    bool
	Detached       bool
	MaxRestarts    int
	MaxTaskRetries int
	MaxConcurrency int
	Resources      sched.ResourceSet
	Strategy       Strategy
	Constructor    string
	Args           []Arg
	BinaryHash     string
	BinaryNode     string
	OwnerAddr      string
	// EnvVars are the actor's runtime env vars (Ray's runtime_env env_vars,
	// merged with its creator's): its worker process starts with them, at
	// every restart. Keys must pass ValidateEnvVar.
	EnvVars map[string]string `msgpack:",omitempty"`
	// JobNamespace is the creating job's namespace (empty: "default"),
	// which the actor's own GetActor calls default to, as in Ray.
	JobNamespace string `msgpack:",omitempty"`
	// Language is the creating job's language (JobRegisterRequest.Language):
	// with LanguagePython, BinaryHash and BinaryNode are empty, the actor's
	// worker is `<python> -m nodeup.worker`, and Code holds its class.
	Language string `msgpack:",omitempty"`
	// Code is the actor's class serialized in its language (Python: the
	// cloudpickled class); Go sends nothing.
	Code []byte `msgpack:",omitempty"`
}

// ActorCreateReply names the created actor, or the existing one a
// get-if-exists creation found.
type ActorCreateReply struct {
	ActorID  string
	Existing bool
}

// ActorGetRequest looks an actor up by ActorID, or by Namespace and Name
// when ActorID is empty. With WaitMillis > 0 the leader answers once the
// actor is ALIVE with an incarnation other than NotIncarnation (-1: any), or
// DEAD, or when WaitMillis pass (with the record as it is then). An ID not
// yet registered is waited for too (its creator may still be registering
// it); it is a not_found error only once WaitMillis pass.
type ActorGetRequest struct {
	ActorID        string
	Namespace      string
	Name           string
	WaitMillis     int64
	NotIncarnation int
}

// ActorInfo is one actor as callers and listings see it. Incarnation counts
// restarts (0 for the first instance).
type ActorInfo struct {
	ActorID        string
	JobID          string
	Class          string
	Name           string
	Namespace      string
	State          string
	DeathCause     string
	PendingReason  string
	Infeasible     *Infeasible `msgpack:",omitempty"` // no alive node can ever hold it; PendingReason says why too
	Detached       bool
	Incarnation    int
	MaxRestarts    int
	MaxTaskRetries int
	MaxConcurrency int
	Resources      sched.ResourceSet
	NodeID         string
	NodeName       string
	NodeAddr       string
	WorkerAddr     string
	PID            int
}

// ActorList is every actor the cluster remembers, in creation order.
type ActorList struct {
	Actors []ActorInfo
}

// ActorKillRequest ends an actor; with NoRestart it is DEAD at once,
// otherwise it restarts if it has restarts left (Ray's ray.kill).
type ActorKillRequest struct {
	ActorID   string
	NoRestart bool
}

// ActorDiedRequest reports that incarnation Incarnation of an actor lost its
// worker process, and why.
type ActorDiedRequest struct {
	ActorID     string
	Incarnation int
	Cause       string
}

// ActorStartRequest asks a node to run incarnation Incarnation of an actor.
type ActorStartRequest struct {
	ActorID        string
	Incarnation    int
	JobID          string
	Class          string
	Resources      sched.ResourceSet
	Constructor    string
	Args           []Arg
	MaxConcurrency int
	BinaryHash     string
	BinaryNode     string
	// EnvVars are the actor's runtime env vars (ActorCreateRequest.EnvVars).
	EnvVars map[string]string `msgpack:",omitempty"`
	// JobNamespace is ActorCreateRequest.JobNamespace.
	JobNamespace string `msgpack:",omitempty"`
	// Language and Code are ActorCreateRequest's.
	Language string `msgpack:",omitempty"`
	Code     []byte `msgpack:",omitempty"`
}

// ActorStartReply says where the actor runs, that the node has no room for
// it now (Busy), that the node can never hold it although its totals cover
// the demand (Infeasible, with the reason: e.g. gpu_memory above any one
// device's), or that its constructor failed (Error).
type ActorStartReply struct {
	Busy       bool
	Infeasible *Infeasible `msgpack:",omitempty"`
	WorkerAddr string
	WorkerID   string
	PID        int
	NodeID     string
	NodeName   string
	NodeAddr   string
	// NodeIncarnation is the incarnation of the node process that runs the
	// actor (cluster.Identity.Incarnation).
	NodeIncarnation uint64 `msgpack:",omitempty"`
	Error           *TaskFailure
}

// ActorStopRequest ends the actor's worker process on the node.
type ActorStopRequest struct {
	ActorID string
}

// ActorConstructRequest runs the constructor in a fresh actor worker.
type ActorConstructRequest struct {
	ActorID        string
	Incarnation    int
	Class          string
	Constructor    string
	Args           []Arg
	MaxConcurrency int
	// Code is ActorCreateRequest.Code (the class, for languages that ship it).
	Code []byte `msgpack:",omitempty"`
}

// ActorConstructReply carries the constructor's failure, if any.
type ActorConstructReply struct {
	Error *TaskFailure
}

// ActorCallRequest runs a method. Calls of one Session run in Seq order
// when the actor's MaxConcurrency is 1 (Ray's per-caller ordering); a
// caller starts a new session after any transport failure.
type ActorCallRequest struct {
	ActorID     string
	Incarnation int
	Session     string
	Seq         uint64
	Spec        TaskSpec
}

// ActorState is an actor's lifecycle state, as Ray's GCS actor table
// (PENDING_CREATION, ALIVE, RESTARTING, DEAD).
type ActorState string

const (
	// ActorPending means the actor is registered and waits for a node to
	// start it (none has room yet, or its start is under way).
	ActorPending ActorState = "PENDING"
	// ActorAlive means its worker process runs the actor and takes calls.
	ActorAlive ActorState = "ALIVE"
	// ActorRestarting means its worker died and it is being re-created
	// (its constructor runs again); calls wait.
	ActorRestarting ActorState = "RESTARTING"
	// ActorDead is final: calls fail with the recorded DeathCause.
	ActorDead ActorState = "DEAD"
)

// Valid reports whether s is one of the four actor states.
func (s ActorState) Valid() bool {
	switch s {
	case ActorPending, ActorAlive, ActorRestarting, ActorDead:
		return true
	}
	return false
}
