package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// taskListPeerTimeout bounds how long a cluster-wide task listing waits
// for each node.
const taskListPeerTimeout = 10 * time.Second

// taskListBytes bounds the approximate encoded size of one TaskEventsList
// (well under rpc.MaxFrameSize); tasks past it are counted as left out.
const taskListBytes = 48 << 20

func (n *Node) taskEventEndpoints() {
	n.taskRecord = newTaskRing(taskRingSize)
	rpc.Handle(n.rpcServer, wire.MethodTaskEventsReport, n.taskEventsReport)
	rpc.Handle(n.rpcServer, wire.MethodTaskEventsList, n.taskEventsList)
	rpc.Handle(n.rpcServer, wire.MethodWorkerList, n.workerList)
}

// taskEventsReport answers TaskEvents.Report: a batch is taken whole or,
// with any bad event or past MaxTaskEventBatch, refused whole.
func (n *Node) taskEventsReport(ctx context.Context, r *wire.TaskEventsReport) (*wire.Empty, error) {
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
		n.taskRecord.add(&r.Events[i])
	}
	if r.Dropped > 0 {
		n.taskRecord.noteDropped(r.Dropped)
	}
	return &wire.Empty{}, nil
}

// taskEventsList answers TaskEvents.List: with Local, this node's record
// (filtered by job, name and actor only); else every alive node's, merged
// by task ID, then filtered by state and node, ordered and limited.
func (n *Node) taskEventsList(ctx context.Context, r *wire.TaskEventsListRequest) (*wire.TaskEventsList, error) {
	if err := wire.CheckTaskEventsListRequest(r); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	if r.Local {
		return n.localTaskList(r), nil
	}
	merged := map[string]*wire.TaskEvent{}
	out := &wire.TaskEventsList{}
	peer := &wire.TaskEventsListRequest{TaskID: r.TaskID, JobID: r.JobID, Name: r.Name, ActorID: r.ActorID, Local: true}
	askNodes(ctx, n.aliveTargets(), taskListPeerTimeout,
		func() (*wire.TaskEventsList, error) { return n.localTaskList(peer), nil },
		remoteCall[wire.TaskEventsList](n.pool.Call, wire.MethodTaskEventsList, peer),
		func(t nodeTarget, part *wire.TaskEventsList, err error) {
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
func (n *Node) localTaskList(r *wire.TaskEventsListRequest) *wire.TaskEventsList {
	tasks, total, lost := n.taskRecord.list(func(ev *wire.TaskEvent) bool {
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
