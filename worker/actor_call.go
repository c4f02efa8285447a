package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Method0 is a registered remote method of actor type T with no arguments
// and one result.
type Method0[T, R any] struct{ name string }

// Method1 is a registered remote method of T with one argument.
type Method1[T, A, R any] struct{ name string }

// Method2 is a registered remote method of T with two arguments.
type Method2[T, A, B, R any] struct{ name string }

// Method3 is a registered remote method of T with three arguments.
type Method3[T, A, B, C, R any] struct{ name string }

// RegisterMethod0 registers a method of actor type T, given as a method
// expression: var Incr = worker.RegisterMethod0((*Counter).Incr). Call it at
// package level, as RegisterActor0.
func RegisterMethod0[T, R any](fn func(*T, context.Context) (R, error)) Method0[T, R] {
	return Method0[T, R]{registerMethod(fn, 0, func(inst any, ctx context.Context, _ [][]byte) ([]any, error) {
		return one(fn(inst.(*T), ctx))
	})}
}

// RegisterMethod1 registers a one-argument method; see RegisterMethod0.
func RegisterMethod1[T, A, R any](fn func(*T, context.Context, A) (R, error)) Method1[T, A, R] {
	return Method1[T, A, R]{registerMethod(fn, 1, func(inst any, ctx context.Context, args [][]byte) ([]any, error) {
		a, err := decodeArg[A](args[0], 0)
		if err != nil {
			return nil, err
		}
		return one(fn(inst.(*T), ctx, a))
	})}
}

// RegisterMethod2 registers a two-argument method; see RegisterMethod0.
func RegisterMethod2[T, A, B, R any](fn func(*T, context.Context, A, B) (R, error)) Method2[T, A, B, R] {
	return Method2[T, A, B, R]{registerMethod(fn, 2, func(inst any, ctx context.Context, args [][]byte) ([]any, error) {
		a, b, err := decode2[A, B](args)
		if err != nil {
			return nil, err
		}
		return one(fn(inst.(*T), ctx, a, b))
	})}
}

// RegisterMethod3 registers a three-argument method; see RegisterMethod0.
func RegisterMethod3[T, A, B, C, R any](fn func(*T, context.Context, A, B, C) (R, error)) Method3[T, A, B, C, R] {
	return Method3[T, A, B, C, R]{registerMethod(fn, 3, func(inst any, ctx context.Context, args [][]byte) ([]any, error) {
		a, b, c, err := decode3[A, B, C](args)
		if err != nil {
			return nil, err
		}
		return one(fn(inst.(*T), ctx, a, b, c))
	})}
}

// Remote calls the method on the actor h and returns a ref to its result.
// Calls go straight to the actor's worker; with MaxConcurrency 1 they run in
// the order this process made them. A call to a dead actor fails with
// *ActorDiedError (from the ref's Get).
func (m Method0[T, R]) Remote(ctx context.Context, h ActorHandle[T]) Ref[R] {
	return callActor[R](ctx, h.id, h.class, m.name)
}

// Remote calls the method with a plain argument; see Method0.Remote.
func (m Method1[T, A, R]) Remote(ctx context.Context, h ActorHandle[T], a A) Ref[R] {
	return callActor[R](ctx, h.id, h.class, m.name, a)
}

// RemoteArgs calls the method with an argument that may be a Ref[A].
func (m Method1[T, A, R]) RemoteArgs(ctx context.Context, h ActorHandle[T], a Arg[A]) Ref[R] {
	return callActor[R](ctx, h.id, h.class, m.name, argOf(a))
}

// Remote calls the method with plain arguments; see Method0.Remote.
func (m Method2[T, A, B, R]) Remote(ctx context.Context, h ActorHandle[T], a A, b B) Ref[R] {
	return callActor[R](ctx, h.id, h.class, m.name, a, b)
}

// RemoteArgs calls the method with arguments that may be refs.
func (m Method2[T, A, B, R]) RemoteArgs(ctx context.Context, h ActorHandle[T], a Arg[A], b Arg[B]) Ref[R] {
	return callActor[R](ctx, h.id, h.class, m.name, argOf(a), argOf(b))
}

// Remote calls the method with plain arguments; see Method0.Remote.
func (m Method3[T, A, B, C, R]) Remote(ctx context.Context, h ActorHandle[T], a A, b B, c C) Ref[R] {
	return callActor[R](ctx, h.id, h.class, m.name, a, b, c)
}

// RemoteArgs calls the method with arguments that may be refs.
func (m Method3[T, A, B, C, R]) RemoteArgs(ctx context.Context, h ActorHandle[T], a Arg[A], b Arg[B], c Arg[C]) Ref[R] {
	return callActor[R](ctx, h.id, h.class, m.name, argOf(a), argOf(b), argOf(c))
}

func callActor[R any](ctx context.Context, actorID, class, method string, args ...any) Ref[R] {
	cw, err := current()
	if err != nil {
		return Ref[R]{err: err}
	}
	if actorID == "" {
		return Ref[R]{err: fmt.Errorf("call %s: the actor handle is empty (create the actor with Remote or look it up with GetActor)", shortName(method))}
	}
	taskID := cw.newTaskID()
	id := returnID(taskID, 0)
	name := shortName(method)
	wargs, nested, err := cw.encodeArgs(ctx, "call", name, args)
	if err != nil {
		return Ref[R]{err: err}
	}
	call := &actorCall{conn: cw.actors.conn(actorID, class), ret: id, spec: wire.TaskSpec{TaskID: taskID, JobID: cw.jobID, Name: name,
		Function: method, Args: wargs, NumReturns: 1, Owner: cw.addr}}
	if ctx.Err() != nil {
		call.fail(cw, cancelledErr(&call.spec, context.Cause(ctx)))
		return ownedRef[R](cw, id)
	}
	cw.freeOnce.Do(func() {
		cw.objects.setOnFree(cw.queueFree, cw.noteStored, cw.innerFreed, func(ids []string) { go cw.releaseBorrows(ids) })
	})
	cw.objects.pendingFor([]string{id}, call, append(cw.ownedArgs(wargs), nested...), nil, cw.addr)
	runtime.KeepAlive(args) // their handles held the objects until the call did
	call.watch(ctx, func(cause error) { _ = call.cancel(cw.ctx, false, cause) })
	call.conn.enqueue(call)
	return ownedRef[R](cw, id)
}

// actorCaller holds this process's connections to the actors it calls.
type actorCaller struct {
	cw    *coreWorker
	mu    sync.Mutex
	conns map[string]*actorConn
}

func newActorCaller(cw *coreWorker) *actorCaller {
	return &actorCaller{cw: cw, conns: map[string]*actorConn{}}
}

func (c *actorCaller) conn(id, class string) *actorConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	ac := c.conns[id]
	if ac == nil {
		ac = &actorConn{cw: c.cw, id: id, class: class, staleInc: -1}
		c.conns[id] = ac
	}
	return ac
}

// actorConn sends one actor this process's calls in order: a single sender
// goroutine resolves where the actor lives (from the leader, waiting while
// it is pending or restarting), numbers the calls of the current session
// and pushes them pipelined, without waiting for replies (Ray's direct
// actor task submitter).
type actorConn struct {
	cw       *coreWorker
	id       string
	class    string
	mu       sync.Mutex
	name     string          // the actor's name, once resolved (for errors)
	info     *wire.ActorInfo // nil: resolve before sending
	staleInc int             // incarnation whose worker failed us (-1: none)
	session  string
	seq      uint64
	queue    []*actorCall
	sending  bool
	inflight int // calls sent and not answered
	// incCtx bounds the calls sent to the current incarnation: cancelled
	// when the node it runs on is declared dead (loseDeadNodes), whose
	// silent connections would otherwise hold the calls forever.
	incCtx    context.Context
	incCancel context.CancelFunc
	ctxInc    int // the incarnation incCtx belongs to
	// created is closed once a background registration of the actor (this
	// process created it unnamed) finished; createErr is its failure.
	created   chan struct{}
	createErr error
}

// waitCreated waits for this process's own registration of the actor.
func (c *actorConn) waitCreated(ctx context.Context) error {
	if c.created == nil {
		return nil
	}
	select {
	case <-c.created:
		return c.createErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxActorInflight bounds the calls one caller has outstanding at one actor:
// enough to keep the actor busy, few enough that the actor's process does
// not park a goroutine per queued call.
const maxActorInflight = 64

type actorCall struct {
	ctxWatch // its Remote's ctx: cancels it while queued here when that ends
	conn     *actorConn
	spec     wire.TaskSpec
	ret      string // its return object's ID (a method has one result)
	retries  int
	lost     error // set when a send failed after it may have reached the worker
}

// fail completes the call's return object with err.
func (call *actorCall) fail(cw *coreWorker, err error) { cw.objects.complete(call.ret, nil, err) }

func (c *actorConn) enqueue(call *actorCall) {
	c.mu.Lock()
	c.queue = append(c.queue, call)
	if !c.sending {
		c.sending = true
		go c.send()
	}
	c.mu.Unlock()
}

func (c *actorConn) send() {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 || (c.info != nil && c.inflight >= maxActorInflight) {
			c.sending = false // push restarts the sender when a reply frees room
			c.mu.Unlock()
			return
		}
		info := c.info
		c.mu.Unlock()
		if info == nil {
			var err error
			if info, err = c.resolve(); err != nil {
				c.failAll(err)
				continue
			}
		}
		c.mu.Lock()
		calls := c.queue
		c.queue = nil
		if info.State == string(wire.ActorDead) {
			c.mu.Unlock()
			for _, call := range calls {
				call.fail(c.cw, c.died(info.DeathCause))
			}
			continue
		}
		if n := max(maxActorInflight-c.inflight, 0); len(calls) > n {
			calls, c.queue = calls[:n:n], calls[n:]
		}
		session, callCtx := c.session, c.incCtx
		var send, lost []*actorCall
		for _, call := range calls {
			if call.lost != nil {
				// It may have run on the instance that died: resend only
				// while MaxTaskRetries allows (Ray's max_task_retries).
				if info.MaxTaskRetries >= 0 && call.retries >= info.MaxTaskRetries {
					lost = append(lost, call)
					continue
				}
				call.retries++
				call.lost = nil
			}
			send = append(send, call)
		}
		first := c.seq // the calls sent are numbered first, first+1, ...
		c.seq += uint64(len(send))
		c.inflight += len(send)
		c.mu.Unlock()
		for _, call := range lost {
			cause := fmt.Sprintf("its worker was lost while running call %s (%v)", call.spec.Name, call.lost)
			if info.DeathCause != "" {
				cause = fmt.Sprintf("%s while running call %s; it restarted, and MaxTaskRetries %d allows no retry", info.DeathCause, call.spec.Name, info.MaxTaskRetries)
			}
			call.fail(c.cw, c.died(cause))
		}
		for i, call := range send {
			go c.push(callCtx, info, session, first+uint64(i), call)
		}
	}
}

// resolve waits until the actor is ALIVE (in an incarnation other than the
// one that failed us) or DEAD. An actor that stays ALIVE in the failed
// incarnation for a whole wait is taken back as it is (the failure was the
// connection, not the actor).
func (c *actorConn) resolve() (*wire.ActorInfo, error) {
	cw := c.cw
	if err := c.waitCreated(cw.ctx); err != nil {
		return nil, c.died(err.Error())
	}
	c.mu.Lock()
	stale := c.staleInc
	c.mu.Unlock()
	backoff := 100 * time.Millisecond
	for {
		var info wire.ActorInfo
		ctx, cancel := context.WithTimeout(cw.ctx, 15*time.Second)
		err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodActorGet, &wire.ActorGetRequest{ActorID: c.id, WaitMillis: 5000, NotIncarnation: stale}, &info)
		cancel()
		if cw.ctx.Err() != nil {
			return nil, ErrNotInitialized
		}
		if err != nil {
			var re *rpc.Error
			if errors.As(err, &re) && re.Code == wire.CodeNotFound {
				return nil, &ActorDiedError{ActorID: c.id, Class: c.class, Cause: "the cluster does not know this actor: " + re.Message}
			}
			cw.logger.Warn("look up actor; retrying", "actor", c.id, "err", err)
			sleepCtx(cw.ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		if info.State == string(wire.ActorDead) || info.State == string(wire.ActorAlive) {
			c.mu.Lock()
			c.info, c.staleInc, c.name = &info, -1, info.Name
			c.incCtxLocked(info.Incarnation)
			c.session = randomHex(8)
			c.seq = 0
			c.mu.Unlock()
			return &info, nil
		}
	}
}

// incCtxLocked makes incCtx the context of the calls to incarnation inc:
// a new one for a new incarnation (calls still out to the old one cannot
// be answered, so its context ends), and a new one when loseDeadNodes
// ended it but the cluster still reports the actor alive in inc.
func (c *actorConn) incCtxLocked(inc int) {
	if c.incCancel != nil && c.ctxInc == inc && c.incCtx.Err() == nil {
		return
	}
	if c.incCancel != nil {
		c.incCancel()
	}
	c.incCtx, c.incCancel = context.WithCancel(c.cw.ctx)
	c.ctxInc = inc
}

func (c *actorConn) failAll(err error) {
	c.mu.Lock()
	calls := c.queue
	c.queue = nil
	c.mu.Unlock()
	for _, call := range calls {
		call.fail(c.cw, err)
	}
}

func (c *actorConn) died(cause string) error {
	c.mu.Lock()
	name := c.name
	c.mu.Unlock()
	return &ActorDiedError{ActorID: c.id, Class: c.class, Name: name, Cause: cause}
}

// push sends one call and records its outcome. On a transport failure, or
// when the actor's node is declared dead while the call is out (callCtx
// cancelled), the call goes back to the head of the queue, and the sender
// finds out where (and whether) the actor lives now: a call that never
// reached the worker (refused connection, or not sent before the
// cancellation) is simply resent; one that may have run is resent only
// while MaxTaskRetries allows, else it fails with *ActorDiedError.
func (c *actorConn) push(callCtx context.Context, info *wire.ActorInfo, session string, seq uint64, call *actorCall) {
	cw := c.cw
	var rep wire.PushTaskReply
	var err error
	unsent := callCtx.Err() != nil
	if unsent {
		err = callCtx.Err()
	} else {
		err = cw.pool.Call(callCtx, info.WorkerAddr, wire.MethodActorCall, &wire.ActorCallRequest{ActorID: c.id, Incarnation: info.Incarnation,
			Session: session, Seq: seq, Spec: call.spec}, &rep)
	}
	if err == nil && len(rep.Borrowed) > 0 {
		cw.objects.addBorrowed(rep.Borrowed) // before the call's arguments are released
	}
	nodeLost := err != nil && callCtx.Err() != nil
	c.mu.Lock()
	c.inflight--
	if !c.sending && len(c.queue) > 0 && c.inflight < maxActorInflight/2 {
		c.sending = true
		go c.send()
	}
	c.mu.Unlock()
	switch {
	case err == nil && rep.Error != nil:
		call.fail(cw, taskErrorFrom(call.spec.Name, rep.Error))
	case err == nil:
		cw.objects.finishContained(call.spec.Name, []string{call.ret}, rep.Returns, rep.Stored, rep.Contained, rep.ContainedOwner)
	case cw.ctx.Err() != nil:
	case !rpc.IsTransport(err) && !nodeLost:
		call.fail(cw, fmt.Errorf("call %s on actor %s: %w", call.spec.Name, c.id, err))
	default:
		switch {
		case unsent, errors.Is(err, syscall.ECONNREFUSED):
		case nodeLost:
			call.lost = fmt.Errorf("its node %s was declared dead", info.NodeName)
		default:
			call.lost = err
		}
		c.mu.Lock()
		if c.info != nil && c.info.Incarnation == info.Incarnation {
			c.info, c.staleInc = nil, info.Incarnation
		}
		c.queue = append([]*actorCall{call}, c.queue...)
		if !c.sending {
			c.sending = true
			go c.send()
		}
		c.mu.Unlock()
	}
}

// loseDeadNodes cancels the calls out to actors on nodes the cluster view
// declares dead, so they are resent to the actor's next incarnation (within
// MaxTaskRetries), as tasks on such nodes are retried; without it a call
// to a frozen node waits until the node resumes.
func (c *actorCaller) loseDeadNodes(dead map[string]bool) {
	c.mu.Lock()
	conns := slices.Collect(maps.Values(c.conns))
	c.mu.Unlock()
	for _, ac := range conns {
		ac.mu.Lock()
		if info := ac.info; info != nil && dead[info.NodeID] {
			ac.info, ac.staleInc = nil, info.Incarnation
			if ac.incCancel != nil {
				ac.incCancel()
			}
		}
		ac.mu.Unlock()
	}
}

// inflightElsewhere reports whether a call is out to an actor on a node
// other than local.
func (c *actorCaller) inflightElsewhere(local string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ac := range c.conns {
		ac.mu.Lock()
		out := ac.inflight > 0 && ac.info != nil && ac.info.NodeID != local
		ac.mu.Unlock()
		if out {
			return true
		}
	}
	return false
}
