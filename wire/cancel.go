package wire

// MethodTaskCancel: owner → the worker process it pushed a task to: cancel
// the task (Ray's CancelTask, sent by the owner to the executing worker).
// TaskCancelRequest → Empty. Served by task worker processes only.
const MethodTaskCancel = "Task.Cancel"

// TaskCancelRequest names a task the owner cancelled. The worker cancels
// the context the task function runs with; a task that has not started
// yet (waiting behind another task of its lease, or not arrived) is never
// started and its push is answered NotRun. With Force, a task that is
// running makes its worker process exit at once, as Ray's force=True
// kills the worker (every task of that process is lost with it).
type TaskCancelRequest struct {
	TaskID string
	Force  bool `msgpack:",omitempty"`
}

// MethodOwnerCancel: any client (`nodeup cancel`) → a task's owner (the
// core worker that submitted it, TaskEvent.Owner): cancel the task as the
// owner's own worker.Cancel would (Ray's `ray.cancel`, asked of the
// owner). TaskCancelRequest → Empty; CodeNotFound when the owner holds no
// unfinished task of that ID (finished, its refs dropped, or another
// process's), CodeBadInput for a malformed ID; an error as Cancel's (Force
// on an actor call, a worker that could not be told) otherwise.
// Submit role, and on a core worker's port only its own job's token or an
// admin token.
const MethodOwnerCancel = "Owner.CancelTask"
