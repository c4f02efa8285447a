package wire

import (
	"fmt"
	"slices"
)

// Task states, as Ray's TaskStatus in its state API (`ray list tasks`), in
// the order a task goes through them. FINISHED and FAILED are terminal.
const (
	TaskPendingArgsAvail      = "PENDING_ARGS_AVAIL"
	TaskPendingNodeAssignment = "PENDING_NODE_ASSIGNMENT"
	TaskSubmittedToWorker     = "SUBMITTED_TO_WORKER"
	TaskRunning               = "RUNNING"
	TaskFinished              = "FINISHED"
	TaskFailed                = "FAILED"
)

// TaskStates lists every task state in order (TaskStateRank's order).
var TaskStates = []string{TaskPendingArgsAvail, TaskPendingNodeAssignment, TaskSubmittedToWorker, TaskRunning, TaskFinished, TaskFailed}

// TaskStateRank is a state's place in TaskStates (0 for
// PENDING_ARGS_AVAIL up to 5 for FAILED), -1 for an unknown state. Of two
// events of one attempt the higher rank is the later state.
func TaskStateRank(s string) int { return slices.Index(TaskStates, s) }

// TaskStateTerminal reports whether s is FINISHED or FAILED.
func TaskStateTerminal(s string) bool { return s == TaskFinished || s == TaskFailed }

// Task types, as Ray's TaskType.
const (
	TaskTypeNormal        = "NORMAL_TASK"
	TaskTypeActor         = "ACTOR_TASK"
	TaskTypeActorCreation = "ACTOR_CREATION_TASK"
)

// Bounds on what a task event carries (CheckTaskEvent refuses more).
const (
	// MaxTaskEventName is the most bytes of a task's name or function.
	MaxTaskEventName = 256
	// MaxTaskEventError is the most bytes of an error text; reporters cut
	// longer ones (ClipTaskError).
	MaxTaskEventError = 1024
	// MaxTaskEventBatch is the most events one TaskEventsReport carries.
	MaxTaskEventBatch = 1000
)

// TaskTimes are the unix nanoseconds at which a task (its latest attempt)
// entered each state; 0 for a state not seen.
type TaskTimes struct {
	PendingArgsAvail      int64
	PendingNodeAssignment int64
	SubmittedToWorker     int64
	Running               int64
	Finished              int64
	Failed                int64
}

// At returns a pointer to the time of state s, nil for an unknown state.
func (t *TaskTimes) At(s string) *int64 {
	switch s {
	case TaskPendingArgsAvail:
		return &t.PendingArgsAvail
	case TaskPendingNodeAssignment:
		return &t.PendingNodeAssignment
	case TaskSubmittedToWorker:
		return &t.SubmittedToWorker
	case TaskRunning:
		return &t.Running
	case TaskFinished:
		return &t.Finished
	case TaskFailed:
		return &t.Failed
	}
	return nil
}

// First is the earliest time set (the task's creation as far as known),
// 0 if none.
func (t TaskTimes) First() int64 {
	var first int64
	for _, v := range []int64{t.PendingArgsAvail, t.PendingNodeAssignment, t.SubmittedToWorker, t.Running, t.Finished, t.Failed} {
		if v != 0 && (first == 0 || v < first) {
			first = v
		}
	}
	return first
}

// TaskEvent is one task's state as a process saw it, as a row of Ray's
// `ray list tasks`. The owner (the process that submitted the task)
// reports the pending states, the hand-over to a worker and the outcome;
// the executing worker reports RUNNING and the outcome. Node, worker and
// PID name where the task runs (empty while pending).
type TaskEvent struct {
	// Encoded by hand as an array (taskeventcodec.go), not a map of field
	// names: a node decodes an event per task its processes run.
	TaskID   string
	JobID    string
	Name     string // the task's name (its Options name, else the function's short name)
	Function string `msgpack:",omitempty"` // the registered function or method
	Type     string `msgpack:",omitempty"` // NORMAL_TASK, ACTOR_TASK, ACTOR_CREATION_TASK; "" is NORMAL_TASK
	ActorID  string `msgpack:",omitempty"` // an actor task's actor
	State    string
	Attempt  int    // 0 for the first attempt, as Ray's attempt_number
	NodeID   string `msgpack:",omitempty"`
	NodeName string `msgpack:",omitempty"`
	WorkerID string `msgpack:",omitempty"`
	PID      int    `msgpack:",omitempty"`
	// Owner is the owner's RPC address (the core worker that submitted
	// the task), when known.
	Owner string `msgpack:",omitempty"`
	// Error is a failed task's error text, at most MaxTaskEventError bytes.
	Error string    `msgpack:",omitempty"`
	Times TaskTimes // when the attempt entered each state
}

// MergeTaskEvent folds src into dst, two records of one task: the later
// attempt wins; within an attempt the later state (TaskStateRank)
// wins, each state's time is the earliest reported, and fields one side
// left empty (the owner knows no PID, the worker no owner's pending
// times) are taken from the other.
func MergeTaskEvent(dst, src *TaskEvent) {
	if src.Attempt < dst.Attempt {
		fillTaskIdentity(dst, src)
		return
	}
	if src.Attempt > dst.Attempt {
		old := *dst
		*dst = *src
		fillTaskIdentity(dst, &old)
		return
	}
	if TaskStateRank(src.State) > TaskStateRank(dst.State) {
		dst.State = src.State
		if src.Error != "" {
			dst.Error = src.Error
		}
	}
	for _, s := range TaskStates {
		d, v := dst.Times.At(s), *src.Times.At(s)
		if v != 0 && (*d == 0 || v < *d) {
			*d = v
		}
	}
	fillTaskIdentity(dst, src)
	fillEmpty(&dst.NodeID, src.NodeID)
	fillEmpty(&dst.NodeName, src.NodeName)
	fillEmpty(&dst.WorkerID, src.WorkerID)
	fillEmpty(&dst.Error, src.Error)
	if dst.PID == 0 {
		dst.PID = src.PID
	}
}

// fillTaskIdentity sets what names the task (not its attempt) where dst
// lacks it.
func fillTaskIdentity(dst, src *TaskEvent) {
	fillEmpty(&dst.JobID, src.JobID)
	fillEmpty(&dst.Name, src.Name)
	fillEmpty(&dst.Function, src.Function)
	fillEmpty(&dst.Type, src.Type)
	fillEmpty(&dst.ActorID, src.ActorID)
	fillEmpty(&dst.Owner, src.Owner)
}

func fillEmpty(dst *string, v string) {
	if *dst == "" {
		*dst = v
	}
}

// ClipTaskError cuts s to MaxTaskEventError bytes (marking the cut).
func ClipTaskError(s string) string {
	if len(s) <= MaxTaskEventError {
		return s
	}
	const mark = " [...]"
	cut := MaxTaskEventError - len(mark)
	for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return s[:cut] + mark
}

// CheckTaskEvent validates an event from the network: IDs as CheckID
// (JobID as CheckJobID), a known state and type, bounded names and error,
// non-negative attempt, PID and times. The error names the bad field and
// value.
func CheckTaskEvent(e *TaskEvent) error {
	if err := CheckID("task ID", e.TaskID); err != nil {
		return err
	}
	if !validJobID(e.JobID) {
		return fmt.Errorf("task %s: job ID %q: want 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", e.TaskID, clip(e.JobID))
	}
	for _, f := range []struct{ name, v string }{{"actor ID", e.ActorID}, {"node ID", e.NodeID}, {"worker ID", e.WorkerID}} {
		if f.v != "" {
			if err := CheckID(f.name, f.v); err != nil {
				return err
			}
		}
	}
	if TaskStateRank(e.State) < 0 {
		return fmt.Errorf("task %s: state %q: want one of %v", e.TaskID, clip(e.State), TaskStates)
	}
	switch e.Type {
	case "", TaskTypeNormal, TaskTypeActor, TaskTypeActorCreation:
	default:
		return fmt.Errorf("task %s: type %q: want %s, %s or %s", e.TaskID, clip(e.Type), TaskTypeNormal, TaskTypeActor, TaskTypeActorCreation)
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"name", e.Name, MaxTaskEventName}, {"function", e.Function, MaxTaskEventName}, {"node name", e.NodeName, MaxTaskEventName},
		{"owner", e.Owner, MaxTaskEventName}, {"error", e.Error, MaxTaskEventError}} {
		if len(f.v) > f.max {
			return fmt.Errorf("task %s: %s of %d bytes: the most accepted is %d", e.TaskID, f.name, len(f.v), f.max)
		}
	}
	if e.Attempt < 0 || e.Attempt > 1<<20 {
		return fmt.Errorf("task %s: attempt %d: want 0 to %d", e.TaskID, e.Attempt, 1<<20)
	}
	if e.PID < 0 {
		return fmt.Errorf("task %s: PID %d: want 0 or more", e.TaskID, e.PID)
	}
	t := e.Times
	for _, v := range []int64{t.PendingArgsAvail, t.PendingNodeAssignment, t.SubmittedToWorker, t.Running, t.Finished, t.Failed} {
		if v < 0 {
			return fmt.Errorf("task %s: a state time of %d: want unix nanoseconds, 0 or more", e.TaskID, v)
		}
	}
	return nil
}

// MethodTaskEventsReport: a core worker → its own node: a batch of task
// state changes (Ray's task events, which workers buffer and send to the
// GCS). TaskEventsReport → Empty. The node refuses a batch over
// MaxTaskEventBatch or with an invalid event (CodeBadInput, naming it)
// whole. Submit role.
const MethodTaskEventsReport = "TaskEvents.Report"

// TaskEventsReport is a batch of at most MaxTaskEventBatch events, oldest
// first, and Dropped, how many events the reporter dropped since its last
// report because its buffer was full (the node counts them).
type TaskEventsReport struct {
	Events  []TaskEvent
	Dropped int64 `msgpack:",omitempty"`
	count   int   // events the decoded report claimed (DecodeMsgpack); 0 if built here
}

// Len is how many events the report holds, or claimed when decoded: a
// decoded report keeps at most MaxTaskEventBatch+1 of them.
func (r *TaskEventsReport) Len() int {
	return max(r.count, len(r.Events))
}

// MethodTaskEventsList: any client → a node: the tasks as their latest
// states, merged by task ID, of every alive node (or, with Local, this
// node's only), filtered, for `nodeup list tasks` and `nodeup summary
// tasks` (Ray's `ray list tasks`, `ray summary tasks`).
// TaskEventsListRequest → TaskEventsList. Read role.
const MethodTaskEventsList = "TaskEvents.List"

// MaxTaskEventList is the most tasks one TaskEventsList carries (a node's
// whole ring: about 250 bytes each in msgpack, 25 MB, under
// rpc.MaxFrameSize). A larger or non-positive Limit is taken as this.
const MaxTaskEventList = 100_000

// TaskEventsListRequest filters tasks: each non-empty field must match
// exactly (Node matches a node ID or name). Limit is the most tasks
// returned (1 to MaxTaskEventList; others mean MaxTaskEventList). With
// Summary, Tasks is empty and Summary counts every matching task by name
// and state. Local asks this node's own record only, unmerged and
// unfiltered by State and Node (what a node asks its peers: a state there
// may be superseded by another node's).
type TaskEventsListRequest struct {
	TaskID  string `msgpack:",omitempty"`
	JobID   string `msgpack:",omitempty"`
	State   string `msgpack:",omitempty"`
	Name    string `msgpack:",omitempty"`
	Node    string `msgpack:",omitempty"`
	ActorID string `msgpack:",omitempty"`
	Limit   int    `msgpack:",omitempty"`
	Summary bool   `msgpack:",omitempty"`
	Local   bool   `msgpack:",omitempty"`
	// Newest keeps the most recently created tasks under Limit, listed
	// newest first (the dashboard's view); otherwise the oldest, oldest
	// first.
	Newest bool `msgpack:",omitempty"`
}

// CheckTaskEventsListRequest validates a request's filters: IDs as
// CheckID, a known state, bounded name and node.
func CheckTaskEventsListRequest(r *TaskEventsListRequest) error {
	if r.TaskID != "" {
		if err := CheckID("task ID", r.TaskID); err != nil {
			return err
		}
	}
	if r.JobID != "" && !validJobID(r.JobID) {
		return fmt.Errorf("job filter %q: want 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", clip(r.JobID))
	}
	if r.ActorID != "" {
		if err := CheckID("actor ID", r.ActorID); err != nil {
			return err
		}
	}
	if r.State != "" && TaskStateRank(r.State) < 0 {
		return fmt.Errorf("state filter %q: want one of %v", clip(r.State), TaskStates)
	}
	if len(r.Name) > MaxTaskEventName || len(r.Node) > MaxTaskEventName {
		return fmt.Errorf("name or node filter over %d bytes", MaxTaskEventName)
	}
	return nil
}

// TaskEventsList answers TaskEvents.List: Tasks, at most the limit, ordered
// by creation time then task ID; Total, how many tasks matched, and
// LeftOut, how many of those the limit kept out (never a silent cut).
// Dropped counts the task records the asked nodes' rings evicted and the
// events reporters dropped (the record is incomplete by that much).
// Unreachable names the nodes that did not answer, with why.
type TaskEventsList struct {
	Tasks       []TaskEvent
	Total       int
	LeftOut     int
	Summary     []TaskSummary `msgpack:",omitempty"`
	Dropped     int64         `msgpack:",omitempty"`
	Unreachable []string      `msgpack:",omitempty"`
}

// TaskSummary counts the tasks of one name in one state (a row of Ray's
// `ray summary tasks`).
type TaskSummary struct {
	Name  string
	State string
	Count int
}
