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
	id       string
	value    any
	sem      chan struct{} // MaxConcurrency > 1
	mu       sync.Mutex    // guards what follows
	sessions map[string]*callSession
	ready    []readyCall // MaxConcurrency 1: calls due, in arrival order
	running  bool        // a handler is executing due calls
}

// callSession orders one caller's calls by sequence number: next is the
// sequence number due, pending the calls that arrived ahead of it.
type callSession struct {
	next    uint64
	pending map[uint64]*queuedCall
}

// queuedCall is a call waiting for its turn; done is closed once it ran.
type queuedCall struct {
	run  func() *wire.PushTaskReply
	rep  *wire.PushTaskReply
	done chan struct{}
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
	args, release, err := cw.resolveArgs(ctx, req.Args)
	if err != nil {
		return fail(err.Error(), "", false), nil
	}
	defer release()
	defer func() {
		if p := recover(); p != nil {
			rep = fail(fmt.Sprint(p), string(debug.Stack()), true)
		}
	}()
	v, err := c.construct(ctx, args)
	if err != nil {
		return fail(err.Error(), "", false), nil
	}
	inst := &actorInstance{id: req.ActorID, value: v, sessions: map[string]*callSession{}}
	if req.MaxConcurrency > 1 {
		inst.sem = make(chan struct{}, req.MaxConcurrency)
	}
	cw.actor.Store(inst)
	return &wire.ActorConstructReply{}, nil
}

// handleActorCall runs one method call on this worker's actor.
func (cw *coreWorker) handleActorCall(ctx context.Context, req *wire.ActorCallRequest) (*wire.PushTaskReply, error) {
	inst := cw.actor.Load()
	if inst == nil || inst.id != req.ActorID {
		return nil, &rpc.Error{Code: "wrong_actor", Message: fmt.Sprintf("this worker does not run actor %s", req.ActorID)}
	}
	m := lookupMethod(req.Spec.Function)
	if m == nil {
		return cw.failure(fmt.Sprintf("method %s is not registered in this binary: register methods at package level (var M = worker.RegisterMethod1(...))", req.Spec.Function), "", false), nil
	}
	inv := func(ctx context.Context, args [][]byte) ([]any, error) { return m.invoke(inst.value, ctx, args) }
	if inst.sem != nil {
		inst.sem <- struct{}{}
		defer func() { <-inst.sem }()
		return cw.run(ctx, &req.Spec, m.numArgs, inv), nil
	}
	return inst.ordered(req.Session, req.Seq, func() *wire.PushTaskReply {
		return cw.run(ctx, &req.Spec, m.numArgs, inv)
	}), nil
}

// ordered runs a call of a MaxConcurrency 1 actor in its session's order.
// Whichever handler finds the actor idle becomes the executor and runs every
// call that is due, in arrival order across sessions, so calls do not hand
// the actor from goroutine to goroutine one at a time. A call whose
// predecessor never arrives runs after gapTimeout.
func (a *actorInstance) ordered(session string, seq uint64, run func() *wire.PushTaskReply) *wire.PushTaskReply {
	q := &queuedCall{run: run, done: make(chan struct{})}
	a.mu.Lock()
	s := a.sessions[session]
	if s == nil {
		s = &callSession{pending: map[uint64]*queuedCall{}}
		a.sessions[session] = s
	}
	if seq < s.next { // a late duplicate: run it in turn rather than never
		seq = s.next
		for s.pending[seq] != nil {
			seq++
		}
	}
	s.pending[seq] = q
	if seq == s.next {
		a.ready = append(a.ready, readyCall{s, seq})
	}
	a.execute()
	a.mu.Unlock()
	select {
	case <-q.done: // it was due and ran here, or another executor ran it
		return q.rep
	default:
	}
	t := time.NewTimer(gapTimeout)
	defer t.Stop()
	select {
	case <-q.done:
		return q.rep
	case <-t.C:
	}
	a.mu.Lock()
	if s.pending[seq] == q && s.next < seq {
		s.next = seq // skip the gap
		a.ready = append(a.ready, readyCall{s, seq})
		a.execute()
	}
	a.mu.Unlock()
	<-q.done
	return q.rep
}

// readyCall is a session whose call seq is due.
type readyCall struct {
	s   *callSession
	seq uint64
}

// execute runs due calls until none is left, unless another goroutine is
// already doing so; a.mu is held on entry and exit (released while a call runs).
func (a *actorInstance) execute() {
	if a.running {
		return
	}
	a.running = true
	for len(a.ready) > 0 {
		r := a.ready[0]
		a.ready = a.ready[1:]
		q := r.s.pending[r.seq]
		if q == nil || r.s.next != r.seq {
			continue
		}
		delete(r.s.pending, r.seq)
		a.mu.Unlock()
		q.rep = q.run()
		close(q.done)
		a.mu.Lock()
		r.s.next = r.seq + 1
		if _, ok := r.s.pending[r.s.next]; ok {
			a.ready = append(a.ready, readyCall{r.s, r.s.next})
		}
	}
	a.running = false
}
