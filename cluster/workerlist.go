package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/nodeup/nodeup/cluster/observe"
	"github.com/nodeup/nodeup/internal/fanout"
	"github.com/nodeup/nodeup/wire"
)

// workerList answers Worker.List: this node's worker processes with
// Local, else every alive node's.
func (n *Node) workerList(ctx context.Context, r *wire.WorkerListRequest) (*wire.WorkerList, error) {
	if r.Local {
		return n.localWorkers(), nil
	}
	out := &wire.WorkerList{}
	fanout.Ask(ctx, n.aliveTargets(), observe.TaskListPeerTimeout,
		func() (*wire.WorkerList, error) { return n.localWorkers(), nil },
		fanout.RemoteCall[wire.WorkerList](n.pool.Call, wire.MethodWorkerList, &wire.WorkerListRequest{Local: true}),
		func(t fanout.Target, part *wire.WorkerList, err error) {
			if err != nil {
				out.Unreachable = append(out.Unreachable, fmt.Sprintf("%s: %v", t, err))
				return
			}
			if len(part.Workers) > wire.MaxWorkerList { // a peer's answer is bounded as ours
				part.LeftOut += len(part.Workers) - wire.MaxWorkerList
				part.Workers = part.Workers[:wire.MaxWorkerList]
			}
			out.Workers = append(out.Workers, part.Workers...)
			out.LeftOut += part.LeftOut
		})
	slices.Sort(out.Unreachable)
	slices.SortFunc(out.Workers, func(a, b wire.WorkerInfo) int {
		if c := cmp.Compare(a.NodeName, b.NodeName); c != 0 {
			return c
		}
		return cmp.Compare(a.WorkerID, b.WorkerID)
	})
	return out, nil
}

// localWorkers lists this node's worker processes, at most
// wire.MaxWorkerList.
func (n *Node) localWorkers() *wire.WorkerList {
	out := &wire.WorkerList{}
	if n.workers == nil {
		return out
	}
	p := n.workers
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, w := range p.byID {
		if len(out.Workers) >= wire.MaxWorkerList {
			out.LeftOut++
			continue
		}
		info := wire.WorkerInfo{WorkerID: id, JobID: w.job, NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, Addr: w.addr, ActorID: w.actor}
		if w.proc != nil {
			info.PID = w.proc.Pid()
		}
		out.Workers = append(out.Workers, info)
	}
	return out
}
