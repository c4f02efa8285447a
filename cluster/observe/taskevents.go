// Package observe is the node's observability subsystem: the record of
// the tasks its processes report (TaskEvents) and its cluster-wide
// listing. It asks of the node only what Host declares and imports
// neither the root package cluster nor another subsystem
// (internal/archtest checks it).
package observe

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nodeup/nodeup/internal/fanout"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// TaskListPeerTimeout bounds how long a cluster-wide task listing waits
// for each node.
const TaskListPeerTimeout = 10 * time.Second

// taskListBytes bounds the approximate encoded size of one TaskEventsList
// (well under rpc.MaxFrameSize); tasks past it are counted as left out.
const taskListBytes = 48 << 20

// Host is all the task-event record asks of its node: the alive nodes
// to merge a cluster-wide listing from, and calls to them. The root
// package's adapter implements it over the node.
type Host interface {
	// AliveTargets is every node alive in this node's view of the
	// cluster, this node marked Self.
	AliveTargets() []fanout.Target
	// Call calls method on the node at addr, decoding the answer into
	// resp.
	Call(ctx context.Context, addr, method string, req, resp any) error
}

// TaskEvents is the node's record of the tasks its processes report
// (TaskEvents.Report) and its listing, of this node or merged over every
// alive node (TaskEvents.List): Ray's task events in the GCS, kept per
// node. It holds at most taskRingSize tasks.
type TaskEvents struct {
	host   Host
	record *taskRing
}

// NewTaskEvents is an empty record on host.
func NewTaskEvents(host Host) *TaskEvents {
	return &TaskEvents{host: host, record: newTaskRing(taskRingSize)}
}

// Register registers TaskEvents.Report and TaskEvents.List on srv.
func (e *TaskEvents) Register(srv *rpc.Server) {
	rpc.Handle(srv, wire.MethodTaskEventsReport, e.Report)
	rpc.Handle(srv, wire.MethodTaskEventsList, e.List)
}

// Report answers TaskEvents.Report: a batch is taken whole or, with any
// bad event or past wire.MaxTaskEventBatch, refused whole (bad_input
// naming the event).
func (e *TaskEvents) Report(ctx context.Context, r *wire.TaskEventsReport) (*wire.Empty, error) {
	if r.Len() > wire.MaxTaskEventBatch {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("task events batch of %d events: the most accepted is %d", r.Len(), wire.MaxTaskEventBatch)}
	}
	if r.Dropped < 0 {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("task events report: dropped %d: want 0 or more", r.Dropped)}
	}
	for i := range r.Events {
		if err := wire.CheckTaskEvent(&r.Events[i]); err != nil {
			return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("task event %d of the batch: %v", i, err)}
		}
	}
	for i := range r.Events {
		e.record.add(&r.Events[i])
	}
	if r.Dropped > 0 {
		e.record.noteDropped(r.Dropped)
	}
	return &wire.Empty{}, nil
}

// List answers TaskEvents.List: with Local, this node's record
// (filtered by job, name and actor only); else every alive node's, merged
// by task ID, then filtered by state and node, ordered and limited
// (wire.MaxTaskEventList); nodes that did not answer are listed as
// Unreachable.
func (e *TaskEvents) List(ctx context.Context, r *wire.TaskEventsListRequest) (*wire.TaskEventsList, error) {
	if err := wire.CheckTaskEventsListRequest(r); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	if r.Local {
		return e.localTaskList(r), nil
	}
	merged := map[string]*wire.TaskEvent{}
	out := &wire.TaskEventsList{}
	peer := &wire.TaskEventsListRequest{TaskID: r.TaskID, JobID: r.JobID, Name: r.Name, ActorID: r.ActorID, Local: true}
	fanout.Ask(ctx, e.host.AliveTargets(), TaskListPeerTimeout,
		func() (*wire.TaskEventsList, error) { return e.localTaskList(peer), nil },
		fanout.RemoteCall[wire.TaskEventsList](e.host.Call, wire.MethodTaskEventsList, peer),
		func(t fanout.Target, part *wire.TaskEventsList, err error) {
			if err != nil {
				out.Unreachable = append(out.Unreachable, fmt.Sprintf("%s: %v", t, err))
				return
			}
			out.Dropped += part.Dropped + int64(part.LeftOut)
			for i := range part.Tasks {
				ev := &part.Tasks[i]
				if cur, ok := merged[ev.TaskID]; ok {
					wire.MergeTaskEvent(cur, ev)
				} else {
					merged[ev.TaskID] = ev
				}
			}
		})
	slices.Sort(out.Unreachable)
	matched := make([]*wire.TaskEvent, 0, len(merged))
	for _, ev := range merged {
		if (r.State == "" || ev.State == r.State) && (r.Node == "" || ev.NodeID == r.Node || ev.NodeName == r.Node) {
			matched = append(matched, ev)
		}
	}
	out.Total = len(matched)
	if r.Summary {
		out.Summary = summarizeTasks(matched)
		return out, nil
	}
	slices.SortFunc(matched, func(a, b *wire.TaskEvent) int {
		c := cmp.Or(cmp.Compare(a.Times.First(), b.Times.First()), cmp.Compare(a.TaskID, b.TaskID))
		if r.Newest {
			return -c
		}
		return c
	})
	limit := r.Limit
	if limit <= 0 || limit > wire.MaxTaskEventList {
		limit = wire.MaxTaskEventList
	}
	size := 0
	for _, ev := range matched {
		if len(out.Tasks) >= limit || size > taskListBytes {
			break
		}
		size += taskEventSize(ev)
		out.Tasks = append(out.Tasks, *ev)
	}
	out.LeftOut = out.Total - len(out.Tasks)
	return out, nil
}

// localTaskList is this node's record, filtered by r's job, name and
// actor, within MaxTaskEventList tasks and taskListBytes.
func (e *TaskEvents) localTaskList(r *wire.TaskEventsListRequest) *wire.TaskEventsList {
	tasks, total, lost := e.record.list(func(ev *wire.TaskEvent) bool {
		return (r.TaskID == "" || ev.TaskID == r.TaskID) && (r.JobID == "" || ev.JobID == r.JobID) && (r.Name == "" || ev.Name == r.Name) && (r.ActorID == "" || ev.ActorID == r.ActorID)
	}, wire.MaxTaskEventList)
	// Past the byte bound: cut (the cut counted in LeftOut).
	kept, s := 0, 0
	for kept < len(tasks) && s <= taskListBytes {
		s += taskEventSize(&tasks[kept])
		kept++
	}
	tasks = tasks[:kept]
	return &wire.TaskEventsList{Tasks: tasks, Total: total, LeftOut: total - len(tasks), Dropped: lost}
}

// taskEventSize approximates ev's encoded size in bytes.
func taskEventSize(ev *wire.TaskEvent) int {
	return 120 + len(ev.TaskID) + len(ev.JobID) + len(ev.Name) + len(ev.Function) + len(ev.Type) + len(ev.ActorID) + len(ev.State) +
		len(ev.NodeID) + len(ev.NodeName) + len(ev.WorkerID) + len(ev.Owner) + len(ev.Error)
}

// summarizeTasks counts tasks by name and state, ordered by name, then
// state in TaskStates' order.
func summarizeTasks(tasks []*wire.TaskEvent) []wire.TaskSummary {
	type key struct{ name, state string }
	counts := map[key]int{}
	for _, ev := range tasks {
		counts[key{ev.Name, ev.State}]++
	}
	out := make([]wire.TaskSummary, 0, len(counts))
	for k, c := range counts {
		out = append(out, wire.TaskSummary{Name: k.name, State: k.state, Count: c})
	}
	slices.SortFunc(out, func(a, b wire.TaskSummary) int {
		if c := cmp.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(wire.TaskStateRank(a.State), wire.TaskStateRank(b.State))
	})
	return out
}
