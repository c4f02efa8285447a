package worker

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// pipelineWait is how long a task pipelined behind a running task of its
// lease may wait: a running task older than this is not short, and work
// queued behind it goes back to its owner for another lease (NotRun). A
// variable for tests.
var pipelineWait = 10 * time.Millisecond

// leaseSlots serialises the tasks pushed under one lease: a lease holds one
// task's resources, so at most one of its tasks runs at a time, while tasks
// of different leases run concurrently as goroutines. A pipelined task
// never waits behind a task that blocked (its resources stay held: only
// CPU is lent) or that ran longer than pipelineWait: it is answered NotRun.
type leaseSlots struct {
	mu      sync.Mutex
	slots   map[uint64]*leaseSlot
	revoked map[uint64]string // leases the node revoked, and why (lease IDs are the node's, never reused)
	// revokedOrder holds revoked's keys oldest first; past maxRevoked the
	// oldest are forgotten (a push under a lease revoked that long ago has
	// long arrived).
	revokedOrder []uint64
	// anyRevoked is set once a lease was revoked: until then (the common
	// case: no placement group removed under this process) whyRevoked
	// answers without the lock.
	anyRevoked atomic.Bool
}

// maxRevoked is how many revoked leases a worker process remembers.
const maxRevoked = 4096

// leaseSlot is one lease's state; every field is guarded by leaseSlots.mu.
type leaseSlot struct {
	refs    int          // pushes holding or waiting for the slot
	running bool         // a task of the lease runs
	started time.Time    // when it started
	gen     uint64       // counts the tasks that ran under the lease
	kicked  bool         // the running task blocked or outran pipelineWait
	waiters []slotWaiter // pushes waiting for the running task, in arrival order
	timer   *time.Timer  // kicks pipelined waiters when the running task grows old
	armed   uint64       // gen the timer is armed for (0: none)
}

// slotWaiter is a push waiting for its lease's slot: its channel receives
// true when the slot is handed to it, false when it is sent away.
type slotWaiter struct {
	ch        chan bool
	pipelined bool
}

// acquire waits until the lease's slot is free and takes it. A pipelined
// push gives up (ok false) once the running task blocks or is older than
// pipelineWait; any push gives up when ctx ends. The slot passes from a
// task to the next waiter directly, in arrival order.
func (ls *leaseSlots) acquire(ctx context.Context, id uint64, pipelined bool) (*leaseSlot, bool) {
	ls.mu.Lock()
	s := ls.slots[id]
	if s == nil {
		s = &leaseSlot{}
		ls.slots[id] = s
	}
	s.refs++
	if !s.running {
		s.running = true
		s.startLocked()
		ls.mu.Unlock()
		return s, true
	}
	if pipelined && (s.kicked || time.Since(s.started) >= pipelineWait) {
		ls.kickLocked(s)
		ls.dropLocked(id, s)
		ls.mu.Unlock()
		return nil, false
	}
	w := slotWaiter{ch: make(chan bool, 1), pipelined: pipelined}
	s.waiters = append(s.waiters, w)
	if pipelined {
		ls.armLocked(s)
	}
	ls.mu.Unlock()
	select {
	case handed := <-w.ch:
		if handed {
			return s, true
		}
	case <-ctx.Done():
		ls.mu.Lock()
		s.waiters = slices.DeleteFunc(s.waiters, func(x slotWaiter) bool { return x.ch == w.ch })
		ls.mu.Unlock()
		select {
		case handed := <-w.ch:
			if handed {
				ls.release(id, s) // handed over meanwhile: pass it on
				return nil, false
			}
		default:
		}
	}
	ls.mu.Lock()
	ls.dropLocked(id, s)
	ls.mu.Unlock()
	return nil, false
}

// startLocked marks a new task of the lease as running now.
func (s *leaseSlot) startLocked() {
	s.gen++
	s.started = time.Now()
	s.kicked = false
}

// armLocked makes sure the slot's timer kicks the pipelined waiters once
// the running task has run pipelineWait.
func (ls *leaseSlots) armLocked(s *leaseSlot) {
	if s.armed == s.gen {
		return
	}
	s.armed = s.gen
	d := pipelineWait - time.Since(s.started)
	if s.timer == nil {
		s.timer = time.AfterFunc(d, func() { ls.expire(s) })
	} else {
		s.timer.Reset(d)
	}
}

// expire runs when a slot's timer fires: once the running task has run
// pipelineWait the pipelined waiters go; a task that started later (the
// slot was handed on) gets the timer re-armed while pipelined waiters
// remain.
func (ls *leaseSlots) expire(s *leaseSlot) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	s.armed = 0
	if !s.running || !slices.ContainsFunc(s.waiters, func(w slotWaiter) bool { return w.pipelined }) {
		return
	}
	if time.Since(s.started) >= pipelineWait {
		ls.kickLocked(s)
		return
	}
	ls.armLocked(s)
}

// kickLocked sends the pipelined pushes waiting behind s's running task
// away; pushes that are not pipelined keep waiting.
func (ls *leaseSlots) kickLocked(s *leaseSlot) {
	s.kicked = true
	s.waiters = slices.DeleteFunc(s.waiters, func(w slotWaiter) bool {
		if w.pipelined {
			w.ch <- false
		}
		return w.pipelined
	})
}

// block marks s's running task as blocked in Get or Wait: tasks pipelined
// behind it must not run on the resources it still holds.
func (ls *leaseSlots) block(s *leaseSlot) {
	ls.mu.Lock()
	ls.kickLocked(s)
	ls.mu.Unlock()
}

// release ends the running task of lease id and hands the slot to the
// first waiter, if any.
func (ls *leaseSlots) release(id uint64, s *leaseSlot) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(s.waiters) > 0 {
		w := s.waiters[0]
		s.waiters = s.waiters[1:]
		s.startLocked()
		w.ch <- true
	} else {
		s.running = false
	}
	ls.dropLocked(id, s)
}

func (ls *leaseSlots) dropLocked(id uint64, s *leaseSlot) {
	if s.refs--; s.refs == 0 {
		if s.timer != nil {
			s.timer.Stop()
		}
		delete(ls.slots, id)
	}
}

// revoke records leases the node revoked, and why.
func (ls *leaseSlots) revoke(ids []uint64, reason string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.anyRevoked.Store(true)
	for _, id := range ids {
		if _, ok := ls.revoked[id]; !ok {
			ls.revokedOrder = append(ls.revokedOrder, id)
		}
		ls.revoked[id] = reason
	}
	if over := len(ls.revokedOrder) - maxRevoked; over > 0 {
		for _, id := range ls.revokedOrder[:over] {
			delete(ls.revoked, id)
		}
		ls.revokedOrder = append(ls.revokedOrder[:0:0], ls.revokedOrder[over:]...)
	}
}

// whyRevoked says why lease id was revoked ("" if it was not).
func (ls *leaseSlots) whyRevoked(id uint64) string {
	if !ls.anyRevoked.Load() {
		return ""
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.revoked[id]
}

var slots = &leaseSlots{slots: map[uint64]*leaseSlot{}, revoked: map[uint64]string{}}

// handleLeaseRevoke takes the node's word that leases may start no further
// task (their placement-group bundle was returned).
func (cw *coreWorker) handleLeaseRevoke(ctx context.Context, req *wire.LeaseRevokeRequest) (*wire.Empty, error) {
	slots.revoke(req.LeaseIDs, req.Reason)
	return &wire.Empty{}, nil
}

// handlePushTask runs a task pushed by its owner and replies when it ends,
// or with NotRun when a pipelined task cannot start soon (acquire) or its
// owner cancelled it before it started (Task.Cancel). A task under a
// revoked lease is refused with wire.CodeLeaseRevoked when its turn comes
// (pipelined tasks queued behind a running one too).
func (cw *coreWorker) handlePushTask(ctx context.Context, req *wire.PushTaskRequest) (*wire.PushTaskReply, error) {
	ctx, done, ok := runs.start(ctx, req.Spec.TaskID)
	defer done()
	if !ok {
		return &wire.PushTaskReply{NotRun: true}, nil
	}
	s, ok := slots.acquire(ctx, req.LeaseID, req.Pipelined)
	if !ok {
		return &wire.PushTaskReply{NotRun: true}, nil
	}
	defer slots.release(req.LeaseID, s)
	if !runs.begin(ctx, req.Spec.TaskID) {
		return &wire.PushTaskReply{NotRun: true}, nil
	}
	if why := slots.whyRevoked(req.LeaseID); why != "" {
		return nil, &rpc.Error{Code: wire.CodeLeaseRevoked, Message: fmt.Sprintf("lease %d was revoked: %s", req.LeaseID, why)}
	}
	start := time.Now()
	ctx = context.WithValue(ctx, taskRunKey{}, &taskRun{lease: req.LeaseID, slot: s})
	rep := cw.execute(ctx, &req.Spec)
	rep.RunNanos = int64(time.Since(start))
	return rep, nil
}

func (cw *coreWorker) execute(ctx context.Context, spec *wire.TaskSpec) (rep *wire.PushTaskReply) {
	fn := lookup(spec.Function)
	if fn == nil {
		return cw.failure(fmt.Sprintf("function %s is not registered in this binary: register remote functions at package level (var f = worker.Register1(...))", spec.Function), "", false)
	}
	return cw.run(ctx, spec, fn.numArgs, fn.invoke)
}

// failure builds a task failure reply stamped with this process.
func (cw *coreWorker) failure(msg, stack string, panicked bool) *wire.PushTaskReply {
	return &wire.PushTaskReply{Error: cw.taskFailure(msg, stack, panicked)}
}

func (cw *coreWorker) taskFailure(msg, stack string, panicked bool) *wire.TaskFailure {
	return &wire.TaskFailure{Message: msg, Stack: stack, Panic: panicked, NodeID: cw.nodeID, NodeName: cw.nodeName, PID: os.Getpid()}
}

// resolveArgs returns each argument's msgpack value, fetching refs. A
// large argument is a view of the node's arena: call release (never nil)
// once the arguments are decoded, so the node may spill them again.
func (cw *coreWorker) resolveArgs(ctx context.Context, in []wire.Arg) (_ [][]byte, release func(), _ error) {
	args := make([][]byte, len(in))
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	cw.prefetch(len(in), func(i int) (string, string) {
		if !in[i].IsRef {
			return "", "" // not a ref: nothing to fetch
		}
		return in[i].RefID, in[i].Owner
	})
	for i, a := range in {
		if !a.IsRef {
			args[i] = a.Inline
			continue
		}
		b, rel, err := cw.getValue(ctx, a.RefID, a.Owner)
		if err != nil {
			release()
			return nil, func() {}, fmt.Errorf("argument %d (%s): %v", i, a.RefID, err)
		}
		releases = append(releases, rel)
		args[i] = b
	}
	return args, release, nil
}

// run resolves spec's arguments, invokes inv (recovering a panic) and
// stores results over the inline limit in the node's object store.
func (cw *coreWorker) run(ctx context.Context, spec *wire.TaskSpec, numArgs int, inv invoker) (rep *wire.PushTaskReply) {
	defer func() {
		// Runs last: refs of the owner this process still holds (an actor
		// keeping refs from its arguments) are reported, as Ray's borrowers.
		if rep != nil {
			if rep.Error != nil {
				cw.executorTaskEvent(spec, wire.TaskFailed, rep.Error)
			} else {
				cw.executorTaskEvent(spec, wire.TaskFinished, nil)
			}
			if rep.Borrowed = cw.borrows.report(spec.Owner); len(rep.Borrowed) > 0 {
				cw.collectSoon()
			}
			cw.tellOtherOwners(spec.Owner) // none, for a task that decoded no ref
		}
		cw.dropArgs(spec.Args)
	}()
	fail := cw.failure
	if len(spec.Args) != numArgs {
		return fail(fmt.Sprintf("%s takes %d arguments, got %d", spec.Function, numArgs, len(spec.Args)), "", false)
	}
	args, release, err := cw.resolveArgs(ctx, spec.Args)
	if err != nil {
		return fail(err.Error(), "", false)
	}
	defer release() // decoded by the task (msgpack copies), but a panic may come first
	cw.executorTaskEvent(spec, wire.TaskRunning, nil)
	defer func() {
		if p := recover(); p != nil {
			rep = fail(fmt.Sprint(p), string(debug.Stack()), true)
		}
	}()
	vals, err := inv(ctx, args)
	if err != nil {
		return fail(err.Error(), string(debug.Stack()), false)
	}
	out, nested, err := encodeResults(vals)
	if err != nil {
		return fail(err.Error(), "", false)
	}
	rep = &wire.PushTaskReply{Returns: out}
	for i, b := range out {
		if len(b) <= inlineMax {
			continue
		}
		loc, err := cw.storeLarge(ctx, returnID(spec.TaskID, i), spec.Owner, spec.Name, b)
		if err != nil {
			return fail(fmt.Sprintf("result %d: %v", i, err), "", false)
		}
		if rep.Stored == nil {
			rep.Stored = make([]*wire.ObjectLoc, len(out))
		}
		rep.Stored[i], rep.Returns[i] = loc, nil
	}
	if nested != nil {
		// This process owns refs nested in the results: the task's owner
		// borrows each while it holds the result (Ray's "contained in"
		// references), counted before the task's own Refs go.
		all := make([]string, 0, len(vals))
		for _, ids := range nested {
			all = append(all, ids...)
		}
		cw.objects.addBorrowed(all)
		rep.Contained, rep.ContainedOwner = nested, cw.addr
		cw.collectSoon()
	}
	runtime.KeepAlive(vals)
	return rep
}

// blocked tells the node that the task on ctx's lease waits in Get, so its
// CPU is lent to other work, and sends the tasks pipelined behind it on the
// lease back to their owner (they may be the very tasks it waits for, and
// must not run on the resources it keeps). The returned call takes the CPU
// back. Goroutines of one task may block at once: the first to block lends
// the task's CPU and the last to wake takes it back.
func (cw *coreWorker) blocked(ctx context.Context) func() {
	tr, _ := ctx.Value(taskRunKey{}).(*taskRun)
	if !cw.isWorker || tr == nil || tr.lease == 0 {
		return func() {}
	}
	call := func(method string) {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := cw.pool.Call(c, cw.nodeAddr, method, &wire.BlockedRequest{LeaseID: tr.lease}, nil); err != nil {
			cw.logger.Warn("tell node about blocked task", "method", method, "err", err)
		}
	}
	// tr.mu is held across each transition so that a goroutine blocking
	// while another wakes never takes back CPU the task did not lend.
	tr.mu.Lock()
	if tr.n++; tr.n == 1 {
		slots.block(tr.slot)
		call(wire.MethodBlocked)
	}
	tr.mu.Unlock()
	return func() {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if tr.n--; tr.n == 0 {
			call(wire.MethodUnblocked)
		}
	}
}

// taskRun is what a pushed task's context carries for blocked: its lease,
// the lease's slot, and how many of the task's goroutines wait in Get or
// Wait (n, guarded by mu): one context value, set per task and looked up
// once by blocked.
type taskRun struct {
	lease uint64
	slot  *leaseSlot
	mu    sync.Mutex
	n     int
}

type taskRunKey struct{}
