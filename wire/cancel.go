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
