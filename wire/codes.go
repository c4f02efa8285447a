package wire

import "github.com/nodeup/nodeup/rpc"

// Error codes: the one enumerated set of machine-readable codes an error
// response carries in its code field (rpc.Error.Code). Meaning never hides
// in the message text; clients branch on the code alone. The Go SDK maps
// each code to an error users test with errors.Is or errors.As (package
// worker, errors.go); docs/protocol.md lists them for other languages.
// Codes are never renamed or reused.
const (
	// CodeNotFound: no such key, actor, placement group, node, binary,
	// worker or stored object.
	CodeNotFound = "not_found"
	// CodeAlreadyExists: a name is taken (a live named actor or placement
	// group of that namespace; an object key being created).
	CodeAlreadyExists = "already_exists"
	// CodeInfeasible: no alive node can ever satisfy the demand, as the
	// nodes are; the message names what is missing.
	CodeInfeasible = "infeasible"
	// CodeNotLeader: a leader-only method (Name@leader, LeaderSuffix)
	// reached a node that does not lead, or leadership was lost while the
	// write was being committed.
	CodeNotLeader = "not_leader"
	// CodeNoLeader: forwarding found no leader within its wait (15 s): the
	// cluster is electing one or lost quorum. Retry later.
	CodeNoLeader = "no_leader"
	// CodeBadInput: the request is invalid (empty or malformed field,
	// negative resource, bad env var); the message names the bad value.
	CodeBadInput = "bad_input"
	// CodePermissionDenied (set by package rpc): the connection's principal
	// may not call the method; the message names the method, the role it
	// needs (MethodRoles), the connection's role and what to do.
	CodePermissionDenied = rpc.CodePermissionDenied
	// CodeObjectLost: the object's value is gone (freed, or its node is).
	CodeObjectLost = "object_lost"
	// CodeOwnerDied: the object's owner process is gone, and with it the
	// record of the object.
	CodeOwnerDied = "owner_died"
	// CodeActorDied: the actor is DEAD (killed, out of restarts, its owner
	// finished); a change to it was refused.
	CodeActorDied = "actor_died"
	// CodeStaleIncarnation: the request names an actor or node incarnation
	// older than the one recorded; a newer one replaced it.
	CodeStaleIncarnation = "stale_incarnation"
	// CodeWorkerCrashed: the worker process running the work died.
	CodeWorkerCrashed = "worker_crashed"
	// CodeWorkerFailed: the job's worker process could not be started or
	// its binary fetched (Sched.Lease).
	CodeWorkerFailed = "worker_failed"
	// CodeRuntimeEnvSetupFailed: the work's runtime env could not be set
	// up on the node (Sched.Lease): its working dir was refused (a hostile
	// archive or manifest, over --max-working-dir) or no node of the
	// cluster has it. Not worth retrying, as Ray's RuntimeEnvSetupError.
	CodeRuntimeEnvSetupFailed = "runtime_env_setup_failed"
	// CodeTimeout: the server gave up waiting (a deadline of its own);
	// package rpc sets it for any handler error wrapping
	// context.DeadlineExceeded.
	CodeTimeout = rpc.CodeTimeout
	// CodeCancelled: the work was cancelled before it finished; package
	// rpc sets it for any handler error wrapping context.Canceled.
	CodeCancelled = rpc.CodeCancelled
	// CodeLeaseRevoked: a worker refuses a task pushed under a lease its
	// node revoked (the lease's placement-group bundle was returned); the
	// owner queues the task again, no attempt counted.
	CodeLeaseRevoked = "lease_revoked"
	// CodeObjectStoreFull: the object does not fit in the node's store,
	// even after evicting secondary copies.
	CodeObjectStoreFull = "object_store_full"
	// CodeOverloaded (set by package rpc): not run, the connection already
	// runs too many requests or bytes; it may be retried.
	CodeOverloaded = rpc.CodeOverloaded
	// CodeUnknownMethod (set by package rpc): no handler for the method.
	CodeUnknownMethod = rpc.CodeUnknownMethod
	// CodeBadRequest (set by package rpc): the body did not decode into the
	// method's request type.
	CodeBadRequest = rpc.CodeBadRequest
	// CodeInternal (set by package rpc): the handler panicked, or its result
	// could not be encoded or sent.
	CodeInternal = rpc.CodeInternal
)

// Codes lists every code above, for documentation checks and clients that
// enumerate them.
var Codes = []string{
	CodeNotFound, CodeAlreadyExists, CodeInfeasible, CodeNotLeader, CodeNoLeader,
	CodeBadInput, CodePermissionDenied, CodeObjectLost, CodeOwnerDied, CodeActorDied,
	CodeStaleIncarnation, CodeWorkerCrashed, CodeWorkerFailed, CodeRuntimeEnvSetupFailed, CodeTimeout, CodeCancelled,
	CodeLeaseRevoked, CodeObjectStoreFull, CodeOverloaded, CodeUnknownMethod,
	CodeBadRequest, CodeInternal,
}
