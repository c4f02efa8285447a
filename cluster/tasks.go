package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// taskEndpoints registers the local scheduler's RPC methods. None of them
// touches Raft: the per-task path stays on this node (and, on spillback, the
// node it is sent to).
func (n *Node) taskEndpoints() {
	rpc.Handle(n.rpcServer, wire.MethodJobRegister, n.jobRegister)
	rpc.Handle(n.rpcServer, wire.MethodJobFinish, n.jobFinish)
	rpc.Handle(n.rpcServer, wire.MethodBinaryFetch, n.binaryFetch)
	rpc.Handle(n.rpcServer, wire.MethodLease, n.leaseWorker)
	rpc.Handle(n.rpcServer, wire.MethodLeaseReturn, n.leaseReturn)
	rpc.Handle(n.rpcServer, wire.MethodBlocked, func(ctx context.Context, r *wire.BlockedRequest) (*wire.Empty, error) {
		n.local.block(r.LeaseID)
		return &wire.Empty{}, nil
	})
	rpc.Handle(n.rpcServer, wire.MethodUnblocked, func(ctx context.Context, r *wire.BlockedRequest) (*wire.Empty, error) {
		n.local.unblock(r.LeaseID)
		return &wire.Empty{}, nil
	})
	rpc.Handle(n.rpcServer, wire.MethodWorkerRegister, func(ctx context.Context, r *wire.WorkerRegisterRequest) (*wire.Empty, error) {
		if err := n.workers.registered(r); err != nil {
			return nil, &rpc.Error{Code: wire.CodeNotFound, Message: err.Error()}
		}
		return &wire.Empty{}, nil
	})
	rpc.Handle(n.rpcServer, wire.MethodClusterView, func(ctx context.Context, _ *wire.Empty) (*wire.ClusterView, error) {
		return &wire.ClusterView{Nodes: n.clusterView()}, nil
	})
}

func (n *Node) jobRegister(ctx context.Context, req *wire.JobRegisterRequest) (*wire.JobRegisterReply, error) {
	if err := checkJobAndHash(req.JobID, req.BinaryHash); err != nil {
		return nil, err
	}
	if err := n.workers.cacheLocal(req.BinaryPath, req.BinaryHash); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("job %s: %v (the driver must run on the same machine as the node it connects to)", req.JobID, err)}
	}
	host, _ := splitHost(n.rpcAddr)
	n.logger.Info("job started", "job", req.JobID, "driver_pid", req.DriverPID)
	return &wire.JobRegisterReply{NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, NodeAddr: n.rpcAddr, BindIP: host, ArenaPath: n.arenaPath(),
		ClusterID: n.id.ClusterID, ClusterName: n.id.ClusterName}, nil
}

func (n *Node) jobFinish(ctx context.Context, req *wire.JobFinishRequest) (*wire.Empty, error) {
	if !req.FromNode {
		n.logger.Info("job finished", "job", req.JobID)
		go func() {
			ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
			defer cancel()
			if err := n.forward(ctx, wire.MethodActorJobDone, &wire.JobFinishRequest{JobID: req.JobID}, nil); err != nil {
				n.logger.Warn("end the finished job's actors", "job", req.JobID, "err", err)
			}
		}()
		for _, addr := range n.peerAddrs() {
			if addr != n.rpcAddr {
				go n.pool.Call(context.WithoutCancel(ctx), addr, wire.MethodJobFinish, &wire.JobFinishRequest{JobID: req.JobID, FromNode: true}, nil)
			}
		}
	}
	n.workers.stopJob(req.JobID)
	if k := n.objects.DeletePrefix(req.JobID + "/"); k > 0 {
		n.logger.Debug("freed job objects", "job", req.JobID, "objects", k)
	}
	return &wire.Empty{}, nil
}

func (n *Node) binaryFetch(ctx context.Context, req *wire.BinaryFetchRequest) (*wire.BinaryFetchReply, error) {
	path, err := n.workers.binPath(req.Hash)
	if err != nil {
		return nil, badInputErr(err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("binary %s not on this node", req.Hash)}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	length := min(max(req.Length, 0), 8<<20)
	buf := make([]byte, length)
	k, err := f.ReadAt(buf, req.Offset)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return &wire.BinaryFetchReply{Data: buf[:k], Size: st.Size()}, nil
}

func (n *Node) leaseReturn(ctx context.Context, req *wire.LeaseReturnRequest) (*wire.Empty, error) {
	n.local.release(req.LeaseID)
	return &wire.Empty{}, nil
}

// leaseWorker grants a worker lease here, redirects the request to a better
// node (spillback), queues it until resources free up, or reports it
// infeasible with the missing resource named.
func (n *Node) leaseWorker(ctx context.Context, req *wire.LeaseRequest) (*wire.LeaseReply, error) {
	if err := checkJobAndHash(req.JobID, req.BinaryHash); err != nil {
		return nil, err
	}
	rep, l, err := n.decideLease(ctx, req)
	if err != nil || l == nil {
		return rep, err
	}
	w, err := n.workers.worker(ctx, req, l.gpus)
	if err != nil {
		n.local.release(l.id)
		return nil, &rpc.Error{Code: wire.CodeWorkerFailed, Message: err.Error()}
	}
	if !n.local.setWorker(l.id, w.id) {
		// Its placement-group bundle was returned while the worker started.
		n.local.release(l.id)
		return &wire.LeaseReply{Infeasible: errUnfit.Error()}, nil
	}
	// A worker that died before the lease was tied to it (its job finished
	// meanwhile) released its leases without this one.
	select {
	case <-w.dead:
		n.local.release(l.id)
		return nil, &rpc.Error{Code: wire.CodeWorkerFailed, Message: fmt.Sprintf("worker for job %s exited", req.JobID)}
	default:
	}
	return &wire.LeaseReply{LeaseID: l.id, WorkerAddr: w.addr, WorkerID: w.id, NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, NodeAddr: n.rpcAddr}, nil
}

// decideLease is leaseWorker's scheduling decision: a reply (spillback,
// infeasible, busy) or a lease granted here (its resources reserved, no
// worker yet), waiting in the local queue when the request must stay here.
func (n *Node) decideLease(ctx context.Context, req *wire.LeaseRequest) (*wire.LeaseReply, *lease, error) {
	if err := checkNonNegative(req.Resources); err != nil {
		return nil, nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	if err := wire.ValidateEnvVars(req.EnvVars); err != nil {
		return nil, nil, &rpc.Error{Code: wire.CodeBadInput, Message: "runtime env: " + err.Error()}
	}
	sel := req.Strategy.Labels
	if err := sel.Validate(); err != nil {
		return nil, nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	// The view is copied only when a decision needs other nodes: a lease
	// granted here straight away never builds it.
	view := sync.OnceValue(n.clusterView)
	self := n.id.NodeID
	// A soft-affinity request that already went to its target and came back
	// (the target was unreachable) is scheduled like any other here.
	if st := req.Strategy; st.Kind == wire.StrategyNodeAffinity && st.NodeID != self && !(st.Soft && req.Spilled) {
		for _, nd := range view() {
			if nd.NodeID == st.NodeID && nd.Alive && nd.Total.Covers(req.Resources) && labelsMatch(sel, &nd) {
				return n.spillTo(&nd, req), nil, nil
			}
		}
		if !st.Soft {
			reason := fmt.Sprintf("node affinity: node %s is not alive, lacks %s, or does not match labels %s", st.NodeID, req.Resources, sel)
			n.local.noteInfeasible(req.TaskName, req.Resources, reason)
			return &wire.LeaseReply{Infeasible: reason}, nil, nil
		}
	}
	if ok, _ := sel.Matches(n.cfg.Labels); !ok {
		t := pickNode(view(), req.Resources, self, true, sel)
		if t == nil {
			t = pickNode(view(), req.Resources, self, false, sel)
		}
		if t != nil {
			return n.spillTo(t, req), nil, nil
		}
		reason := noLabelMatch(view(), sel)
		n.local.noteInfeasible(req.TaskName, req.Resources, reason)
		return &wire.LeaseReply{Infeasible: reason}, nil, nil
	}
	if !n.local.covers(req.Resources) {
		if pg, idx, ok := sched.PlacementGroupOf(req.Resources); ok {
			rep, err := n.leaseInBundle(ctx, req, pg, idx)
			return rep, nil, err
		}
		if t := pickNode(view(), req.Resources, self, false, sel); t != nil {
			return n.spillTo(t, req), nil, nil
		}
		reason := infeasibleReason(view(), req.Resources)
		if reason == "" {
			reason = fmt.Sprintf("no alive node can satisfy %s", req.Resources)
		}
		n.local.noteInfeasible(req.TaskName, req.Resources, reason)
		return &wire.LeaseReply{Infeasible: reason}, nil, nil
	}
	if reason := n.gpuInfeasible(req.Resources); reason != "" {
		if t := pickNode(view(), req.Resources, self, false, sel); t != nil && !req.Spilled {
			return n.spillTo(t, req), nil, nil
		}
		return noteGPUInfeasible(n, req, reason), nil, nil
	}
	// placed: the strategy chose this node; the request stays here even if
	// it must queue.
	placed := false
	if req.Strategy.Kind == wire.StrategySpread && !req.Spilled {
		t := n.spread.pick(view(), req.Resources, sel)
		if t != nil && t.NodeID != self {
			return n.spillTo(t, req), nil, nil
		}
		placed = t != nil
	}
	var l *lease
	if req.Strategy.Kind == wire.StrategyDefault && !req.Spilled {
		// Hybrid policy: take it here while this node is below the spread
		// threshold (checked and granted under one lock), else prefer a
		// node still below it.
		if l = n.local.tryGrantBelow(req.Resources, SpreadThreshold); l == nil && n.othersInView() {
			if t := hybridTarget(view(), req.Resources, self, sel); t != nil {
				return n.spillTo(t, req), nil, nil
			}
		}
	}
	if l == nil {
		l = n.local.tryGrant(req.Resources)
	}
	if l == nil && !req.Spilled && !placed {
		// Hybrid policy: this node is full; spill to a node with room now.
		if t := pickNode(view(), req.Resources, self, true, sel); t != nil {
			return n.spillTo(t, req), nil, nil
		}
	}
	if l == nil && req.NoQueueIfNot {
		return &wire.LeaseReply{Busy: true}, nil, nil
	}
	if l == nil {
		return n.waitOrSpill(ctx, req, sel)
	}
	return nil, l, nil
}

// waitOrSpill queues req here until it is granted. While it waits, each new
// view from the leader that shows another node with room for it (and this
// node still without) sends it there (spillback), so a queued request does
// not wait for this node while another could run it: Ray's raylet
// re-schedules its queued work on every resource update the same way.
// Requests that must run here stay: hard node affinity, and placement-group
// bundle demand.
func (n *Node) waitOrSpill(ctx context.Context, req *wire.LeaseRequest, sel sched.LabelSelector) (*wire.LeaseReply, *lease, error) {
	l, w := n.local.enqueue(req.Resources)
	if l != nil {
		return nil, l, nil
	}
	_, _, inBundle := sched.PlacementGroupOf(req.Resources)
	movable := !inBundle && !(req.Strategy.Kind == wire.StrategyNodeAffinity && !req.Strategy.Soft)
	for {
		views := n.viewUpdates.next()
		if !movable {
			views = nil
		}
		select {
		case l := <-w.grant:
			if l == nil {
				return &wire.LeaseReply{Infeasible: errUnfit.Error()}, nil, nil
			}
			return nil, l, nil
		case <-ctx.Done():
			if l := n.local.withdraw(w); l != nil {
				n.local.release(l.id)
			}
			return nil, nil, ctx.Err()
		case <-views:
			t := pickNode(n.clusterView(), req.Resources, n.id.NodeID, true, sel)
			if t == nil {
				continue
			}
			if l := n.local.withdraw(w); l != nil {
				return nil, l, nil // granted here meanwhile
			}
			return n.spillTo(t, req), nil, nil
		}
	}
}

// spillTo answers a lease request with spillback to t, remembering the
// demand sent there until the next view (see spillLedger).
func (n *Node) spillTo(t *wire.NodeInfo, req *wire.LeaseRequest) *wire.LeaseReply {
	n.spills.add(t.NodeID, req.Resources)
	return &wire.LeaseReply{Spillback: t.Addr}
}

// leaseInBundle routes a lease request for placement-group bundle
// resources this node does not have: to a node holding a matching bundle
// (spillback), or back as infeasible with the reason (the group is pending,
// removed or unknown; the submitter retries every second unless the task
// fails on infeasibility).
func (n *Node) leaseInBundle(ctx context.Context, req *wire.LeaseRequest, pg string, idx int) (*wire.LeaseReply, error) {
	nodes, reason, _ := n.bundleNodes(ctx, pg, idx)
	here := false
	for _, b := range nodes {
		if b.NodeID != n.id.NodeID && b.NodeAddr != "" {
			return &wire.LeaseReply{Spillback: b.NodeAddr}, nil
		}
		here = here || b.NodeID == n.id.NodeID
	}
	if here {
		// The bundle is here: the demand is larger than the bundle (or its
		// commit has not arrived yet).
		reason = fmt.Sprintf("placement group %s: demand %s does not fit in the bundle on node %s", pg, req.Resources, n.cfg.NodeName)
	}
	n.local.noteInfeasible(req.TaskName, req.Resources, reason)
	return &wire.LeaseReply{Infeasible: reason}, nil
}

// pickNode chooses a node for demand among alive nodes other than exclude
// whose totals cover it and whose labels match sel (with needFree, only
// those whose last reported free resources cover it too): the least
// CPU-loaded, the first in view of equals (so spillback spreads); nil if
// none.
func pickNode(view []wire.NodeInfo, demand sched.ResourceSet, exclude string, needFree bool, sel sched.LabelSelector) *wire.NodeInfo {
	var best *wire.NodeInfo
	var bestLoad float64
	for i := range view {
		nd := &view[i]
		if !nd.Alive || nd.NodeID == exclude || !nd.Total.Covers(demand) || !labelsMatch(sel, nd) {
			continue
		}
		if needFree && !nd.Available.Covers(demand) {
			continue
		}
		if l := cpuLoad(nd); best == nil || l < bestLoad {
			best, bestLoad = nd, l
		}
	}
	return best
}

func labelsMatch(sel sched.LabelSelector, nd *wire.NodeInfo) bool {
	ok, _ := sel.Matches(nd.Labels)
	return ok
}

// noLabelMatch says why no alive node matches sel: the selector, and each
// alive node's first failing condition (at most three named).
func noLabelMatch(view []wire.NodeInfo, sel sched.LabelSelector) string {
	var why []string
	for i := range view {
		if !view[i].Alive {
			continue
		}
		if ok, reason := sel.Matches(view[i].Labels); !ok && len(why) < 3 {
			why = append(why, fmt.Sprintf("node %s: %s", view[i].NodeName, reason))
		}
	}
	return fmt.Sprintf("no alive node matches labels %s (%s)", sel, strings.Join(why, "; "))
}

// cpuLoad is the share of a node's CPUs in use as last reported (1 for a
// node without CPUs, so it sorts last).
func cpuLoad(nd *wire.NodeInfo) float64 {
	t := nd.Total[sched.CPU]
	if t == 0 {
		return 1
	}
	return 1 - float64(nd.Available[sched.CPU])/float64(t)
}

// checkNonNegative rejects a demand with a negative amount (the first by
// name), or a GPU count above 1 that is not whole, naming it.
func checkNonNegative(r sched.ResourceSet) error {
	// Every lease request passes here: names are sorted only to report one.
	for _, q := range r {
		if q < 0 {
			return negativeAmount(r)
		}
	}
	return checkGPUDemand(r)
}

// negativeAmount names the first resource of r, by name, whose amount is
// negative.
func negativeAmount(r sched.ResourceSet) error {
	for _, name := range r.Names() {
		if r[name] < 0 {
			return fmt.Errorf("resource %q: negative amount %s", name, r[name])
		}
	}
	return nil
}

// clusterView is the node table with resources as this node last heard it
// from the leader, with this node's own free resources up to date.
func (n *Node) clusterView() []wire.NodeInfo {
	v, _ := n.view.Load().([]wire.NodeInfo)
	out := make([]wire.NodeInfo, 0, len(v)+1)
	found := false
	for _, nd := range v {
		if nd.NodeID == n.id.NodeID {
			nd.Available = n.local.available()
			nd.Alive = true
			found = true
		}
		out = append(out, nd)
	}
	if !found {
		out = append(out, wire.NodeInfo{NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, Addr: n.rpcAddr, Alive: true, State: "alive",
			Total: n.local.totals(), Available: n.local.available(), Labels: n.cfg.Labels})
	}
	n.spills.deduct(out)
	return out
}

// peerAddrs lists the RPC addresses of live members.
func (n *Node) peerAddrs() []string { return n.members.rpcAddrs(false) }
