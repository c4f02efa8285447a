package cluster

import (
	"context"
	"errors"
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
	if err := checkJob(req.JobID, req.Language, req.BinaryHash); err != nil {
		return nil, err
	}
	if err := wire.CheckID("actor ID", req.ActorID); err != nil {
		return nil, badInputErr(err)
	}
	p := n.workers
	self := func(w *workerProc) *wire.ActorStartReply {
		return &wire.ActorStartReply{WorkerAddr: w.addr, WorkerID: w.id, PID: w.proc.Pid(),
			NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, NodeAddr: n.rpcAddr, NodeIncarnation: n.id.Incarnation}
	}
	if w, err := p.runningActor(ctx, req.ActorID, req.Incarnation); err != nil || w != nil {
		if err != nil {
			return nil, err
		}
		return self(w), nil
	}
	if err := checkNonNegative(req.Resources); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("actor %s: %v", req.ActorID, err)}
	}
	if err := wire.ValidateEnvVars(req.EnvVars); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("actor %s: runtime env: %v", req.ActorID, err)}
	}
	if reason := n.gpuInfeasible(req.Resources); reason != "" {
		return &wire.ActorStartReply{Infeasible: &wire.Infeasible{Reason: "GPU devices: " + strings.TrimSpace(reason)}}, nil
	}
	l := n.local.tryGrant(req.Resources)
	if l == nil {
		return &wire.ActorStartReply{Busy: true}, nil
	}
	if req.Language == wire.LanguageGo {
		if err := p.ensureBinary(ctx, req.JobID, req.BinaryHash, req.BinaryNode); err != nil {
			n.local.release(l.id)
			return nil, &rpc.Error{Code: wire.CodeWorkerFailed, Message: err.Error()}
		}
	}
	var env []string
	if req.JobNamespace != "" {
		env = []string{wire.EnvNamespace + "=" + req.JobNamespace}
	}
	token, err := p.jobToken(ctx, req.JobID)
	if err != nil {
		n.local.release(l.id)
		return nil, &rpc.Error{Code: wire.CodeWorkerFailed, Message: err.Error()}
	}
	dir, release, err := p.workingDir(ctx, req.JobID, req.EnvVars)
	if err != nil {
		n.local.release(l.id)
		code := wire.CodeWorkerFailed
		if errors.Is(err, errRuntimeEnvSetup) {
			code = wire.CodeRuntimeEnvSetupFailed
		}
		return nil, &rpc.Error{Code: code, Message: fmt.Sprintf("actor %s: %v", req.ActorID, err)}
	}
	spec := procSpec{job: actorJobID(req.ActorID, req.Incarnation), actor: req.ActorID, lang: req.Language, binHash: req.BinaryHash, env: env, envVars: req.EnvVars, gpus: l.gpus, token: token,
		dir: dir, release: release, driverJob: req.JobID, class: req.Class}
	w, err := p.startActor(spec, req.Incarnation, l.id)
	if err != nil {
		release()
		n.local.release(l.id)
		return nil, &rpc.Error{Code: wire.CodeWorkerFailed, Message: err.Error()}
	}
	// A bundle returned meanwhile is the leader's to handle: it ends actors
	// of a removed group once their start returns (tryNode).
	n.local.setWorker(l.id, w.id)
	fail := func(code string, err error) (*wire.ActorStartReply, error) {
		p.stopActor(req.ActorID)
		return nil, &rpc.Error{Code: code, Message: fmt.Sprintf("actor %s: %v", req.ActorID, err)}
	}
	if err := w.awaitReady(ctx); err != nil {
		return fail(wire.CodeWorkerFailed, fmt.Errorf("worker %w", err))
	}
	var crep wire.ActorConstructReply
	err = n.localPool.Call(ctx, w.addr, wire.MethodActorConstruct, &wire.ActorConstructRequest{ActorID: req.ActorID, Incarnation: req.Incarnation,
		Class: req.Class, Constructor: req.Constructor, Args: req.Args, MaxConcurrency: req.MaxConcurrency, Code: req.Code}, &crep)
	switch {
	case err != nil && ctx.Err() == nil && rpc.IsTransport(err):
		// The worker process died while it ran the constructor (the
		// actor's creation task).
		return fail(wire.CodeWorkerCrashed, fmt.Errorf("its worker (pid %d) crashed running the constructor: %w", w.proc.Pid(), err))
	case err != nil:
		return fail(wire.CodeWorkerFailed, fmt.Errorf("run constructor: %w", err))
	}
	if crep.Error != nil {
		p.stopActor(req.ActorID)
		return &wire.ActorStartReply{Error: crep.Error}, nil
	}
	n.logger.Debug("actor started", "actor", req.ActorID, "class", req.Class, "incarnation", req.Incarnation, "pid", w.proc.Pid())
	return self(w), nil
}

// runningActor returns the worker of actor id's incarnation inc once it
// has registered, so a repeated start answers with it again; nil when none
// runs here. An older incarnation still here is stopped first.
func (p *workerPool) runningActor(ctx context.Context, id string, inc int) (*workerProc, error) {
	p.mu.Lock()
	ap := p.actors[id]
	p.mu.Unlock()
	if ap == nil {
		return nil, nil
	}
	if ap.incarnation == inc {
		select {
		case <-ap.w.ready:
			return ap.w, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	p.stopActor(id)
	return nil, nil
}

// startActor starts the dedicated worker of spec.actor's incarnation inc,
// which holds its resources under lease for its whole life.
func (p *workerPool) startActor(spec procSpec, inc int, lease uint64) (*workerProc, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, err := p.start(spec)
	if err != nil {
		return nil, err
	}
	p.actors[spec.actor] = &actorProc{id: spec.actor, incarnation: inc, lease: lease, w: w}
	return w, nil
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
	_ = ap.w.proc.Kill()
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
	p.host.releaseLease(ap.lease)
	if ap.stale && ap.jobLives {
		return // the incarnation lives on elsewhere, with its job
	}
	// The actor's own objects and nested task workers go with it.
	job := actorJobID(ap.id, ap.incarnation)
	p.stopJob(job)
	p.host.actorJobEnded(job)
	if p.host.lifetime().Err() != nil || ap.stale {
		// Node shutdown: the leader learns it from gossip. Stale: the
		// leader has moved on, there is no death to report.
		return
	}
	cause := fmt.Sprintf("its worker process (pid %d) on node %s exited: %v", w.proc.Pid(), p.cfg.nodeName, w.err)
	if ap.stopped {
		cause = fmt.Sprintf("it was killed (worker pid %d on node %s)", w.proc.Pid(), p.cfg.nodeName)
	} else {
		p.host.log().Warn("actor worker exited", "actor", ap.id, "pid", w.proc.Pid(), "status", w.err)
	}
	p.host.goFunc("actor-died-report", func() {
		p.host.reportActorDied(&wire.ActorDiedRequest{ActorID: ap.id, Incarnation: ap.incarnation, Cause: cause})
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
