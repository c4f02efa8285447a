package worker

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// ErrNotInitialized is returned by SDK calls made before Init or after Shutdown.
var ErrNotInitialized = errors.New("nodeup: not initialized: call worker.Init first")

// CodeError is the sentinel of one protocol error code (wire.Code*):
// errors.Is(err, sentinel) holds for every error a node or worker answered
// with that code (an *rpc.Error, however wrapped), and for the SDK's typed
// errors of that kind (*ActorDiedError is ErrActorDied, ...). Compare with
// the sentinels below; docs/protocol.md lists the codes.
type CodeError struct{ Code string }

// Error names the code.
func (e *CodeError) Error() string { return "nodeup: " + e.Code }

// ErrorCode returns Code (what rpc.Error.Is matches on).
func (e *CodeError) ErrorCode() string { return e.Code }

// Sentinels for the protocol's error codes, as Ray's exception classes.
var (
	ErrNotFound         = &CodeError{wire.CodeNotFound}         // no such actor, group, key, object
	ErrAlreadyExists    = &CodeError{wire.CodeAlreadyExists}    // a named actor or group of that name lives
	ErrInfeasible       = &CodeError{wire.CodeInfeasible}       // also *InfeasibleError and sched.ErrInfeasible
	ErrNotLeader        = &CodeError{wire.CodeNotLeader}        // the node asked does not lead
	ErrNoLeader         = &CodeError{wire.CodeNoLeader}         // no leader within 15 s: retry later
	ErrBadInput         = &CodeError{wire.CodeBadInput}         // the message names the bad value
	ErrPermissionDenied = &CodeError{wire.CodePermissionDenied} // the message names the method and the role it needs: pass a token (Token, NODEUP_TOKEN)
	ErrObjectLost       = &CodeError{wire.CodeObjectLost}       // also *ObjectLostError
	ErrOwnerDied        = &CodeError{wire.CodeOwnerDied}        // the object's owner is gone
	ErrActorDied        = &CodeError{wire.CodeActorDied}        // also *ActorDiedError
	ErrStaleIncarnation = &CodeError{wire.CodeStaleIncarnation} // a newer incarnation replaced it
	ErrWorkerCrashed    = &CodeError{wire.CodeWorkerCrashed}    // also *WorkerCrashedError
	ErrWorkerFailed     = &CodeError{wire.CodeWorkerFailed}     // the job's worker could not start
	ErrTimeout          = &CodeError{wire.CodeTimeout}          // the server's own deadline passed
	ErrCancelled        = &CodeError{wire.CodeCancelled}        // also *TaskCancelledError; its Cause when Cancel did it
	ErrLeaseRevoked     = &CodeError{wire.CodeLeaseRevoked}     // the SDK retries these itself
	ErrObjectStoreFull  = &CodeError{wire.CodeObjectStoreFull}  // start the node with more --object-store-memory
	ErrOverloaded       = &CodeError{wire.CodeOverloaded}       // may be retried

	// ErrRuntimeEnvSetupFailed: the task's runtime env (its working dir)
	// could not be set up on a node, as Ray's RuntimeEnvSetupError; Get
	// of the task's refs returns it, naming what was refused or missing.
	ErrRuntimeEnvSetupFailed = &CodeError{wire.CodeRuntimeEnvSetupFailed}
)

// TaskError is a task's own failure (a returned error or a panic) as the
// caller's Get sees it, as Ray's RayTaskError: it names the task, the node it
// ran on, and carries the remote stack.
type TaskError struct {
	TaskName string // Options Name, else the registered function name
	NodeID   string
	NodeName string
	PID      int    // worker process ID
	Message  string // the error's text or the panic value
	Panic    bool   // the task panicked (the worker survived it)
	Stack    string // the worker goroutine's stack where it failed
}

// Error implements error.
func (e *TaskError) Error() string {
	what := "failed"
	if e.Panic {
		what = "panicked"
	}
	return fmt.Sprintf("task %s %s on node %s (pid %d): %s", e.TaskName, what, e.NodeName, e.PID, e.Message)
}

// InfeasibleError says no node in the cluster can ever satisfy a demand as
// the nodes are: a task's (Ray logs this and waits; nodeup does too, and
// returns this error to a Get only when the task was submitted with
// FailIfInfeasible), or a placement group's (PlacementGroup.Ready and Wait,
// once their time is up). It is the SDK's one infeasible type; the wire
// carries the same as *wire.Infeasible.
type InfeasibleError struct {
	TaskName       string // the task's name, for a task
	PlacementGroup string // the group's ID, for a placement group
	Reason         string // names what is missing (a resource, a label, a node)
}

// Error implements error.
func (e *InfeasibleError) Error() string {
	if e.PlacementGroup != "" {
		return fmt.Sprintf("placement group %s is infeasible: %s", e.PlacementGroup, e.Reason)
	}
	return fmt.Sprintf("task %s is infeasible: %s", e.TaskName, e.Reason)
}

// Is makes errors.Is(err, ErrInfeasible) and errors.Is(err,
// sched.ErrInfeasible) hold.
func (e *InfeasibleError) Is(target error) bool {
	return target == ErrInfeasible || target == sched.ErrInfeasible
}

// WorkerCrashedError says the worker (or node) running a task died and the
// task's retries (MaxRetries, default 3) are used up, as Ray's WorkerCrashedError.
type WorkerCrashedError struct {
	TaskName string
	Attempts int
	Cause    string
}

// Is makes errors.Is(err, ErrWorkerCrashed) hold.
func (e *WorkerCrashedError) Is(target error) bool { return target == ErrWorkerCrashed }

// Error implements error.
func (e *WorkerCrashedError) Error() string {
	return fmt.Sprintf("task %s: its worker died %d times, no retries left: %s", e.TaskName, e.Attempts, e.Cause)
}

// NodeDiedError says this process's own node (the one it submits through)
// has not answered for longer than the submitter waits (30 s), so a task
// could not be scheduled, as Ray's NodeDiedError for a driver whose raylet
// died. Every task queued then, and every later one, fails with it; tasks
// already running on other nodes still finish.
type NodeDiedError struct {
	NodeAddr string    // host:port of the node
	Since    time.Time // first failed call to it
	Cause    string    // the last transport error
}

// Error implements error.
func (e *NodeDiedError) Error() string {
	return fmt.Sprintf("this process's node %s has not answered since %s (%s): tasks cannot be scheduled; restart the program against a live node (NODEUP_ADDRESS)",
		e.NodeAddr, e.Since.Format(time.RFC3339), e.Cause)
}

// ObjectLostError says an object's value is gone while its owner lives,
// as Ray's ObjectLostError: every copy was on a node that died (a Put
// object, which has no lineage, or a task's return whose task may not run
// again: MaxRetries 0 or its retries used up), or the owner does not know
// it. Reason says which. errors.Is(err, ErrObjectLost) holds.
type ObjectLostError struct {
	ObjectID string
	Owner    string // the owner's RPC address, when known
	Node     string // the node (name, else address) that held its copy, when known
	Reason   string
	// holderLacks: the node answered that no node holds it (object_lost),
	// rather than failing to reach the holder.
	holderLacks bool
}

// Is makes errors.Is(err, ErrObjectLost) hold.
func (e *ObjectLostError) Is(target error) bool { return target == ErrObjectLost }

// Error implements error.
func (e *ObjectLostError) Error() string {
	msg := "object " + e.ObjectID
	if e.Owner != "" {
		msg += " (owner " + e.Owner + ")"
	}
	msg += " is lost"
	if e.Node != "" {
		msg += " with node " + e.Node
	}
	return msg + ": " + e.Reason
}

// OwnerDiedError says a borrowed object's owner process could not be
// reached, and the record of the object (its value or where its copy is)
// went with it, as Ray's OwnerDiedError. errors.Is(err, ErrOwnerDied) and
// errors.Is(err, ErrObjectLost) hold.
type OwnerDiedError struct {
	ObjectID string
	Owner    string // the owner's RPC address
	Reason   string // the transport error that reaching it gave
}

// Is makes errors.Is(err, ErrOwnerDied) and errors.Is(err, ErrObjectLost) hold.
func (e *OwnerDiedError) Is(target error) bool {
	return target == ErrOwnerDied || target == ErrObjectLost
}

// Error implements error.
func (e *OwnerDiedError) Error() string {
	return fmt.Sprintf("object %s is lost: its owner at %s died (unreachable: %s)", e.ObjectID, e.Owner, e.Reason)
}

// ActorDiedError is the error of a call to an actor that died: killed, its
// constructor failed, its owner finished, or its worker process or node died
// with no restarts left (or while the call ran, without MaxTaskRetries).
// Cause says which, as Ray's ActorDiedError.
type ActorDiedError struct {
	ActorID string
	Class   string
	Name    string
	Cause   string
}

// Is makes errors.Is(err, ErrActorDied) hold.
func (e *ActorDiedError) Is(target error) bool { return target == ErrActorDied }

// Error implements error.
func (e *ActorDiedError) Error() string {
	who := e.Class
	if e.Name != "" {
		who += " " + strconv.Quote(e.Name)
	}
	return fmt.Sprintf("actor %s (%s) died: %s", who, e.ActorID, e.Cause)
}
