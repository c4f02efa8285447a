package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// gapTimeout bounds how long a call waits for an earlier call of its
// session that never arrives (lost with a broken connection whose caller
// moved on), so one lost message cannot stall an actor's later calls.
const gapTimeout = 5 * time.Second

// actorInstance is the actor a dedicated worker process runs.
type actorInstance struct {
	id          string
	incarnation int
	class       string
	value       any
	exec        sync.Mutex    // MaxConcurrency 1: one call at a time
	sem         chan struct{} // MaxConcurrency > 1
	mu          sync.Mutex
	sessions    map[string]*callSession
}

// callSession orders one caller's calls by sequence number.
type callSession struct {
	next    uint64
	waiting map[uint64]chan struct{}
}

// handleActorConstruct runs the actor's constructor in this (fresh) worker.
func (cw *coreWorker) handleActorConstruct(ctx context.Context, req *wire.ActorConstructRequest) (rep *wire.ActorConstructReply, _ error) {
	fail := func(msg, stack string, panicked bool) *wire.ActorConstructReply {
		return &wire.ActorConstructReply{Error: cw.taskFailure(msg, stack, panicked)}
	}
	c := lookupCtor(req.Constructor)
	if c == nil {
		return fail(fmt.Sprintf("actor constructor %s is not registered in this binary: register actors at package level (var A = worker.RegisterActor1(...))", req.Constructor), "", false), nil
	}
	if len(req.Args) != c.numArgs {
		return fail(fmt.Sprintf("constructor %s takes %d arguments, got %d", req.Constructor, c.numArgs, len(req.Args)), "", false), nil
	}
	args, err := cw.resolveArgs(ctx, req.Args)
	if err != nil {
		return fail(err.Error(), "", false), nil
	}
	defer func() {
		if p := recover(); p != nil {
			rep = fail(fmt.Sprint(p), string(debug.Stack()), true)
		}
	}()
	v, err := c.construct(ctx, args)
	if err != nil {
		return fail(err.Error(), "", false), nil
	}
	inst := &actorInstance{id: req.ActorID, incarnation: req.Incarnation, class: c.class, value: v, sessions: map[string]*callSession{}}
	if req.MaxConcurrency > 1 {
		inst.sem = make(chan struct{}, req.MaxConcurrency)
	}
	currentMu.Lock()
	cw.actor = inst
	currentMu.Unlock()
	return &wire.ActorConstructReply{}, nil
}

// handleActorCall runs one method call on this worker's actor.
func (cw *coreWorker) handleActorCall(ctx context.Context, req *wire.ActorCallRequest) (*wire.PushTaskReply, error) {
	currentMu.RLock()
	inst := cw.actor
	currentMu.RUnlock()
	if inst == nil || inst.id != req.ActorID {
		return nil, &rpc.Error{Code: "wrong_actor", Message: fmt.Sprintf("this worker does not run actor %s", req.ActorID)}
	}
	m := lookupMethod(req.Spec.Function)
	if m == nil {
		return cw.failure(fmt.Sprintf("method %s is not registered in this binary: register methods at package level (var M = worker.RegisterMethod1(...))", req.Spec.Function), "", false), nil
	}
	inv := func(ctx context.Context, args [][]byte) ([][]byte, error) { return m.invoke(inst.value, ctx, args) }
	if inst.sem != nil {
		inst.sem <- struct{}{}
		defer func() { <-inst.sem }()
		return cw.run(ctx, &req.Spec, m.numArgs, inv), nil
	}
	inst.waitTurn(ctx, req.Session, req.Seq)
	inst.exec.Lock()
	// The next call of the session may queue on exec now: it runs after this
	// one, and other sessions interleave in arrival order.
	inst.done(req.Session, req.Seq)
	defer inst.exec.Unlock()
	return cw.run(ctx, &req.Spec, m.numArgs, inv), nil
}

// waitTurn returns once every earlier call of the session has started (or
// gapTimeout passed waiting for a missing one).
func (a *actorInstance) waitTurn(ctx context.Context, session string, seq uint64) {
	a.mu.Lock()
	s := a.sessions[session]
	if s == nil {
		s = &callSession{waiting: map[uint64]chan struct{}{}}
		a.sessions[session] = s
	}
	if seq <= s.next {
		a.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	s.waiting[seq] = ch
	a.mu.Unlock()
	t := time.NewTimer(gapTimeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		a.mu.Lock()
		if s.next < seq {
			s.next = seq
		}
		delete(s.waiting, seq)
		a.mu.Unlock()
	case <-ctx.Done():
	}
}

// done lets the session's next call go.
func (a *actorInstance) done(session string, seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[session]
	if s == nil || seq < s.next {
		return
	}
	s.next = seq + 1
	if ch := s.waiting[s.next]; ch != nil {
		delete(s.waiting, s.next)
		close(ch)
	}
}
