package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// actorProc is an actor instance running in its own worker process on this
// node, holding its resources under a lease for its whole life.
type actorProc struct {
	id          string
	incarnation int
	lease       uint64
	w           *workerProc
	stopped     bool // Stop asked for it: the exit is expected (still reported)
	// stale: the leader said the cluster has moved past it (StaleActor), so
	// its exit is not reported as a death; jobLives: nor is its job ended,
	// here or on peers.
	stale, jobLives bool
}

// actorJobID is the job under which an actor's worker stores objects and
// runs nested tasks, so they live as long as the actor, not its creator.
// Each incarnation is a job of its own: a restarted actor starts fresh, and
// the node's memory of the old incarnation's finished job cannot refuse it.
func actorJobID(actorID string, incarnation int) string {
	return fmt.Sprintf("a-%s-%d", actorID, incarnation)
}

// actorStart runs an actor here (the leader chose this node): reserve its
// resources, start its dedicated worker process, run its constructor. A
// repeated request for the running incarnation answers with it again, so a
// new leader finishing an old leader's placement cannot start a second copy.
func (n *Node) actorStart(ctx context.Context, req *wire.ActorStartRequest) (*wire.ActorStartReply, error) {
	if err := checkJobAndHash(req.JobID, req.BinaryHash); err != nil {
		return nil, err
	}
	if err := wire.CheckID("actor ID", req.ActorID); err != nil {
		return nil, badInputErr(err)
	}
	p := n.workers
	self := func(w *workerProc) *wire.ActorStartReply {
		return &wire.ActorStartReply{WorkerAddr: w.addr, WorkerID: w.id, PID: w.cmd.Process.Pid,
			NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, NodeAddr: n.rpcAddr, NodeIncarnation: n.id.Incarnation}
	}
	p.mu.Lock()
	if ap := p.actors[req.ActorID]; ap != nil {
		p.mu.Unlock()
		if ap.incarnation == req.Incarnation {
			select {
			case <-ap.w.ready:
				return self(ap.w), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		// An older incarnation still here: end it before starting the new one.
		p.stopActor(req.ActorID)
		p.mu.Lock()
	}
	p.mu.Unlock()
	if err := checkNonNegative(req.Resources); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("actor %s: %v", req.ActorID, err)}
	}
	if err := wire.ValidateEnvVars(req.EnvVars); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("actor %s: runtime env: %v", req.ActorID, err)}
	}
	if reason := n.gpuInfeasible(req.Resources); reason != "" {
		return &wire.ActorStartReply{Infeasible: "GPU devices: " + strings.TrimSpace(reason)}, nil
	}
	l := n.local.tryGrant(req.Resources)
	if l == nil {
		return &wire.ActorStartReply{Busy: true}, nil
	}
	job := actorJobID(req.ActorID, req.Incarnation)
	if err := p.ensureBinary(ctx, req.JobID, req.BinaryHash, req.BinaryNode); err != nil {
		n.local.release(l.id)
		return nil, &rpc.Error{Code: wire.CodeWorkerFailed, Message: err.Error()}
	}
	p.mu.Lock()
	var env []string
	if req.JobNamespace != "" {
		env = []string{wire.EnvNamespace + "=" + req.JobNamespace}
	}
	w, err := p.start(procSpec{job: job, actor: req.ActorID, binHash: req.BinaryHash, env: env, envVars: req.EnvVars, gpus: l.gpus})
	if err != nil {
		p.mu.Unlock()
		n.local.release(l.id)
		return nil, &rpc.Error{Code: wire.CodeWorkerFailed, Message: err.Error()}
	}
	ap := &actorProc{id: req.ActorID, incarnation: req.Incarnation, lease: l.id, w: w}
	p.actors[req.ActorID] = ap
	p.mu.Unlock()
	// A bundle returned meanwhile is the leader's to handle: it ends actors
	// of a removed group once their start returns (tryNode).
	n.local.setWorker(l.id, w.id)
	fail := func(err error) (*wire.ActorStartReply, error) {
		p.stopActor(req.ActorID)
		return nil, &rpc.Error{Code: wire.CodeWorkerFailed, Message: fmt.Sprintf("actor %s: %v", req.ActorID, err)}
	}
	if err := w.awaitReady(ctx); err != nil {
		return fail(fmt.Errorf("worker %w", err))
	}
	var crep wire.ActorConstructReply
	err = n.localPool.Call(ctx, w.addr, wire.MethodActorConstruct, &wire.ActorConstructRequest{ActorID: req.ActorID, Incarnation: req.Incarnation,
		Class: req.Class, Constructor: req.Constructor, Args: req.Args, MaxConcurrency: req.MaxConcurrency}, &crep)
	if err != nil {
		return fail(fmt.Errorf("run constructor: %w", err))
	}
	if crep.Error != nil {
		p.stopActor(req.ActorID)
		return &wire.ActorStartReply{Error: crep.Error}, nil
	}
	n.logger.Debug("actor started", "actor", req.ActorID, "class", req.Class, "incarnation", req.Incarnation, "pid", w.cmd.Process.Pid)
	return self(w), nil
}

// stopActor ends an actor's worker process and waits for it to exit and
// for the exit to be handled (its lease released, its nested task workers
// stopped), so no call reaches it and its resources are free once it
// returns.
func (p *workerPool) stopActor(actorID string) {
	p.mu.Lock()
	ap := p.actors[actorID]
	if ap != nil {
		ap.stopped = true
	}
	p.mu.Unlock()
	if ap == nil {
		return
	}
	ap.w.stopping.Store(true)
	_ = ap.w.cmd.Process.Kill()
	<-ap.w.handled
}

// heldActors lists the actor incarnations running here, for the heartbeat.
func (p *workerPool) heldActors() []wire.ActorHeld {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]wire.ActorHeld, 0, len(p.actors))
	for _, ap := range p.actors {
		out = append(out, wire.ActorHeld{ID: ap.id, Incarnation: ap.incarnation})
	}
	return out
}

// stopStale ends an actor process the leader says the cluster has moved
// past, if it still runs that incarnation. Its exit is not reported as a
// death (the leader has decided already; a report about an incarnation alive
// elsewhere would restart that one).
func (p *workerPool) stopStale(s wire.StaleActor) {
	p.mu.Lock()
	ap := p.actors[s.ID]
	if ap == nil || ap.incarnation != s.Incarnation {
		p.mu.Unlock()
		return
	}
	ap.stale, ap.jobLives = true, s.JobLives
	p.mu.Unlock()
	p.stopActor(s.ID)
}

// actorExited cleans up after an actor's worker process and tells the
// leader, which restarts the actor or records it dead.
func (p *workerPool) actorExited(w *workerProc) {
	p.mu.Lock()
	ap := p.actors[w.actor]
	if ap == nil || ap.w != w {
		p.mu.Unlock()
		return
	}
	delete(p.actors, w.actor)
	p.mu.Unlock()
	n := p.n
	n.local.release(ap.lease)
	if ap.stale && ap.jobLives {
		return // the incarnation lives on elsewhere, with its job
	}
	// The actor's own objects and nested task workers go with it.
	job := actorJobID(ap.id, ap.incarnation)
	n.workers.stopJob(job)
	n.objects.DeletePrefix(job + "/")
	if n.ctx.Err() != nil {
		return // node shutdown: the leader learns it from gossip
	}
	for _, addr := range n.peerAddrs() {
		if addr != n.rpcAddr {
			n.notifyJobFinished(n.ctx, addr, job)
		}
	}
	if ap.stale {
		return // the leader has moved on: no death to report
	}
	cause := fmt.Sprintf("its worker process (pid %d) on node %s exited: %v", w.cmd.Process.Pid, n.cfg.NodeName, w.err)
	if ap.stopped {
		cause = fmt.Sprintf("it was killed (worker pid %d on node %s)", w.cmd.Process.Pid, n.cfg.NodeName)
	} else {
		n.logger.Warn("actor worker exited", "actor", ap.id, "pid", w.cmd.Process.Pid, "status", w.err)
	}
	n.group.goFunc("actor-died-report", func() {
		n.reportActorDied(&wire.ActorDiedRequest{ActorID: ap.id, Incarnation: ap.incarnation, Cause: cause})
	})
}

// reportActorDied tells the leader; forward waits through leader changes,
// here for up to a minute.
func (n *Node) reportActorDied(req *wire.ActorDiedRequest) {
	ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
	defer cancel()
	if err := n.forward(ctx, wire.MethodActorDied, req, nil); err != nil {
		n.logger.Warn("report actor death", "actor", req.ActorID, "err", err)
	}
}

func (n *Node) actorNodeEndpoints() {
	rpc.Handle(n.rpcServer, wire.MethodActorStart, n.actorStart)
	rpc.Handle(n.rpcServer, wire.MethodActorStop, func(ctx context.Context, r *wire.ActorStopRequest) (*wire.Empty, error) {
		n.workers.stopActor(r.ActorID)
		return &wire.Empty{}, nil
	})
}
