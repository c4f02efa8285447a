package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
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
	if err := checkJob(req.JobID, req.Language, req.BinaryHash); err != nil {
		return nil, err
	}
	if req.Language != wire.LanguageGo {
		if req.BinaryPath != "" {
			return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("job %s: a %s job has no binary, but binary path %q was given", req.JobID, req.Language, req.BinaryPath)}
		}
	} else if err := n.workers.cacheLocal(req.BinaryPath, req.BinaryHash); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("job %s: %v (the driver must run on the same machine as the node it connects to)", req.JobID, err)}
	}
	watched, err := n.drivers.watch(req.JobID, req.DriverPID)
	if err != nil {
		return nil, &rpc.Error{Code: wire.CodeOverloaded, Message: err.Error()}
	}
	if !watched {
		n.logger.Warn("driver process not visible from this node; its job ends only when it calls Shutdown", "job", req.JobID, "driver_pid", req.DriverPID)
	}
	var jobToken string
	if n.secure() {
		if jobToken, err = n.mintJobToken(ctx, req.JobID); err != nil {
			n.drivers.forget(req.JobID)
			return nil, fmt.Errorf("job %s: make its job token: %w", req.JobID, err)
		}
	}
	host, _ := splitHost(n.rpcAddr)
	n.logger.Info("job started", "job", req.JobID, "driver_pid", req.DriverPID, "language", cmp.Or(req.Language, "go"))
	return &wire.JobRegisterReply{NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, NodeAddr: n.rpcAddr, BindIP: host, ArenaPath: n.objects.Path(),
		ClusterID: n.id.ClusterID, ClusterName: n.id.ClusterName, JobToken: jobToken}, nil
}

func (n *Node) jobFinish(ctx context.Context, req *wire.JobFinishRequest) (*wire.Empty, error) {
	if req.FromNode {
		n.endJobHere(req.JobID)
	} else {
		n.endJob(req.JobID, "shutdown")
	}
	return &wire.Empty{}, nil
}

// endJob ends job cluster-wide, for the reason logged ("shutdown": its
// driver called Shutdown; "driver exited": fate-sharing, drivers.go): the
// leader ends its non-detached actors and placement groups and revokes its
// job token (Actor.JobDone), and every node
// stops its workers (which returns their leases) and frees its objects.
func (n *Node) endJob(job, reason string) {
	n.drivers.forget(job)
	n.logger.Info("job finished", "job", job, "reason", reason)
	n.group.goFunc("job-done-forward", func() {
		ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		defer cancel()
		if err := n.forward(ctx, wire.MethodActorJobDone, &wire.JobFinishRequest{JobID: job}, nil); err != nil {
			n.logger.Warn("end the finished job's actors", "job", job, "err", err)
		}
	})
	for _, addr := range n.peerAddrs() {
		if addr != n.rpcAddr {
			n.notifyJobFinished(n.ctx, addr, job)
		}
	}
	n.endJobHere(job)
}

// endJobHere stops job's workers on this node and frees its objects here.
func (n *Node) endJobHere(job string) {
	n.workers.stopJob(job)
	if k := n.objects.DropPrefix(job + "/"); k > 0 {
		n.logger.Debug("freed job objects", "job", job, "objects", k)
	}
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
	if err := checkJob(req.JobID, req.Language, req.BinaryHash); err != nil {
		return nil, err
	}
	rep, l, err := n.decideLease(ctx, req)
	if err != nil || l == nil {
		return rep, err
	}
	w, err := n.workers.worker(ctx, req, l.gpus)
	if err != nil {
		n.local.release(l.id)
		code := wire.CodeWorkerFailed
		if errors.Is(err, errRuntimeEnvSetup) {
			code = wire.CodeRuntimeEnvSetupFailed
		}
		return nil, &rpc.Error{Code: code, Message: err.Error()}
	}
	ok := n.local.setWorker(l.id, w.id)
	n.workers.unreserve(w)
	if !ok {
		// Its placement-group bundle was returned while the worker started.
		n.local.release(l.id)
		return &wire.LeaseReply{Infeasible: &wire.Infeasible{Reason: errUnfit.Error()}}, nil
	}
	// A worker that died before the lease was tied to it (its job finished
	// meanwhile) released its leases without this one.
	select {
	case <-w.dead:
		n.local.release(l.id)
		return nil, &rpc.Error{Code: wire.CodeWorkerFailed, Message: fmt.Sprintf("worker for job %s exited", req.JobID)}
	default:
	}
	granted := &wire.LeaseReply{LeaseID: l.id, WorkerAddr: w.addr, WorkerID: w.id, NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, NodeAddr: n.rpcAddr}
	if w.proc != nil {
		granted.WorkerPID = w.proc.Pid()
	}
	return granted, nil
}

// decideLease is leaseWorker's scheduling decision: a reply (spillback,
// infeasible, busy) or a lease granted here (its resources reserved, no
// worker yet), waiting in the local queue when the request must stay here.
// The decision is sched.Decide's; this gathers its inputs (the view, this
// node's device veto, where a placement-group bundle is) and carries it out.
func (n *Node) decideLease(ctx context.Context, req *wire.LeaseRequest) (*wire.LeaseReply, *lease, error) {
	r, err := leaseRequest(req)
	if err != nil {
		return nil, nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	view := n.clusterView()
	if pg, idx, ok := sched.PlacementGroupOf(req.Resources); ok && !n.local.covers(req.Resources) {
		// The bundle is elsewhere, or here but smaller than the demand.
		nodes, reason, _ := n.bundleNodes(ctx, pg, idx)
		view, r.Bundle = withBundleNodes(view, nodes)
		r.Bundle.Group, r.Bundle.Reason = pg, reason
		r.Veto = fmt.Sprintf("placement group %s: demand %s does not fit in the bundle on node %s", pg, req.Resources, n.cfg.NodeName)
	} else if reason := n.gpuInfeasible(req.Resources); reason != "" {
		r.Veto = "GPU devices: " + strings.TrimSpace(reason)
	}
	d, l, err := n.local.decide(snapshotOf(view, n.id.NodeID), r)
	switch {
	case err != nil:
		reason := noPlaceReason(err)
		n.local.noteInfeasible(req.TaskName, req.Resources, reason)
		return &wire.LeaseReply{Infeasible: &wire.Infeasible{Reason: reason}}, nil, nil
	case d.Node != n.id.NodeID:
		return n.spillTo(nodeInView(view, d.Node), req), nil, nil
	case l != nil:
		return nil, l, nil
	case req.NoQueueIfNot:
		return &wire.LeaseReply{Busy: true}, nil, nil
	}
	return n.waitOrSpill(ctx, req, r)
}

// leaseRequest is req in the policy's terms, or the error naming what in
// it is malformed (a negative amount, runtime env, strategy or labels).
func leaseRequest(req *wire.LeaseRequest) (sched.Request, error) {
	if err := checkNonNegative(req.Resources); err != nil {
		return sched.Request{}, err
	}
	if err := wire.ValidateEnvVars(req.EnvVars); err != nil {
		return sched.Request{}, fmt.Errorf("runtime env: %w", err)
	}
	st := policyStrategy(req.Strategy)
	if err := st.Validate(); err != nil {
		return sched.Request{}, err
	}
	return sched.Request{Demand: req.Resources, Strategy: st, Stay: req.Spilled}, nil
}

// waitOrSpill queues req here until it is granted. While it waits, each new
// view from the leader is offered to the policy (sched.MoveTarget), which
// sends it to another node with room for it now (spillback), so a queued
// request does not wait for this node while another could run it: Ray's
// raylet re-schedules its queued work on every resource update the same
// way. Pinned requests (hard node affinity, placement-group demand) stay.
func (n *Node) waitOrSpill(ctx context.Context, req *wire.LeaseRequest, r sched.Request) (*wire.LeaseReply, *lease, error) {
	l, w := n.local.enqueue(req.Resources)
	if l != nil {
		return nil, l, nil
	}
	for {
		views := n.viewUpdates.next()
		if r.Pinned() {
			views = nil
		}
		select {
		case l := <-w.grant:
			if l == nil {
				return &wire.LeaseReply{Infeasible: &wire.Infeasible{Reason: errUnfit.Error()}}, nil, nil
			}
			return nil, l, nil
		case <-ctx.Done():
			if l := n.local.withdraw(w); l != nil {
				n.local.release(l.id)
			}
			return nil, nil, ctx.Err()
		case <-views:
			view := n.clusterView()
			t, ok := sched.MoveTarget(snapshotOf(view, n.id.NodeID), r, newRand())
			if !ok {
				continue
			}
			if l := n.local.withdraw(w); l != nil {
				return nil, l, nil // granted here meanwhile
			}
			return n.spillTo(nodeInView(view, t), req), nil, nil
		}
	}
}

// spillTo answers a lease request with spillback to t, remembering the
// demand sent there until the next view (see spillLedger).
func (n *Node) spillTo(t *wire.NodeInfo, req *wire.LeaseRequest) *wire.LeaseReply {
	n.spills.add(t.NodeID, req.Resources)
	return &wire.LeaseReply{Spillback: t.Addr}
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
		_, labels := n.settings.get()
		out = append(out, wire.NodeInfo{NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, Addr: n.rpcAddr, Alive: true, State: "alive",
			Total: n.local.totals(), Available: n.local.available(), Labels: labels})
	}
	n.spills.deduct(out)
	return out
}

// peerAddrs lists the RPC addresses of live members.
func (n *Node) peerAddrs() []string { return n.members.rpcAddrs(false) }

// notifyJobFinished tells the node at addr, in the background, that job
// finished, so it ends the job's workers and objects there too.
func (n *Node) notifyJobFinished(ctx context.Context, addr, job string) {
	n.group.goFunc("job-finish-notify", func() {
		_ = n.pool.Call(ctx, addr, wire.MethodJobFinish, &wire.JobFinishRequest{JobID: job, FromNode: true}, nil)
	})
}
