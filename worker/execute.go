package worker

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// leaseSlots serialises the tasks pushed under one lease: a lease holds one
// task's resources, so its pipelined tasks run one after another, while
// tasks of different leases run concurrently as goroutines.
type leaseSlots struct {
	mu      sync.Mutex
	slots   map[uint64]*leaseSlot
	revoked map[uint64]string // leases the node revoked, and why (lease IDs are the node's, never reused)
}

type leaseSlot struct {
	mu      sync.Mutex // held by the task running under the lease
	refs    int        // guarded by leaseSlots.mu
	blocked int        // tasks of this lease waiting in Get; guarded by leaseSlots.mu
}

// block marks one of the lease's tasks as waiting and reports whether it is
// the first, so only the first tells the node.
func (ls *leaseSlots) block(s *leaseSlot) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	s.blocked++
	return s.blocked == 1
}

// unblock reports whether no task of the lease waits any more.
func (ls *leaseSlots) unblock(s *leaseSlot) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	s.blocked--
	return s.blocked == 0
}

func (ls *leaseSlots) acquire(id uint64) *leaseSlot {
	ls.mu.Lock()
	s := ls.slots[id]
	if s == nil {
		s = &leaseSlot{}
		ls.slots[id] = s
	}
	s.refs++
	ls.mu.Unlock()
	s.mu.Lock()
	return s
}

func (ls *leaseSlots) release(id uint64, s *leaseSlot) {
	s.mu.Unlock()
	ls.mu.Lock()
	if s.refs--; s.refs == 0 {
		delete(ls.slots, id)
	}
	ls.mu.Unlock()
}

// revoke records leases the node revoked, and why.
func (ls *leaseSlots) revoke(ids []uint64, reason string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, id := range ids {
		ls.revoked[id] = reason
	}
}

// whyRevoked says why lease id was revoked ("" if it was not).
func (ls *leaseSlots) whyRevoked(id uint64) string {
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

// handlePushTask runs a task pushed by its owner and replies when it ends.
// A task under a revoked lease is refused with cluster.CodeLeaseRevoked
// when its turn comes (pipelined tasks queued behind a running one too).
func (cw *coreWorker) handlePushTask(ctx context.Context, req *wire.PushTaskRequest) (*wire.PushTaskReply, error) {
	s := slots.acquire(req.LeaseID)
	defer slots.release(req.LeaseID, s)
	if why := slots.whyRevoked(req.LeaseID); why != "" {
		return nil, &rpc.Error{Code: cluster.CodeLeaseRevoked, Message: fmt.Sprintf("lease %d was revoked: %s", req.LeaseID, why)}
	}
	ctx = context.WithValue(ctx, taskRunKey{}, &taskRun{lease: req.LeaseID, slot: s})
	return cw.execute(ctx, &req.Spec), nil
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

// resolveArgs returns each argument's msgpack value, fetching refs.
func (cw *coreWorker) resolveArgs(ctx context.Context, in []wire.Arg) ([][]byte, error) {
	args := make([][]byte, len(in))
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
		b, err := cw.getValue(ctx, a.RefID, a.Owner)
		if err != nil {
			return nil, fmt.Errorf("argument %d (%s): %v", i, a.RefID, err)
		}
		args[i] = b
	}
	return args, nil
}

// run resolves spec's arguments, invokes inv (recovering a panic) and
// stores results over the inline limit in the node's object store.
func (cw *coreWorker) run(ctx context.Context, spec *wire.TaskSpec, numArgs int, inv invoker) (rep *wire.PushTaskReply) {
	fail := cw.failure
	if len(spec.Args) != numArgs {
		return fail(fmt.Sprintf("%s takes %d arguments, got %d", spec.Function, numArgs, len(spec.Args)), "", false)
	}
	args, err := cw.resolveArgs(ctx, spec.Args)
	if err != nil {
		return fail(err.Error(), "", false)
	}
	defer func() {
		if p := recover(); p != nil {
			rep = fail(fmt.Sprint(p), string(debug.Stack()), true)
		}
	}()
	out, err := inv(ctx, args)
	if err != nil {
		return fail(err.Error(), string(debug.Stack()), false)
	}
	rep = &wire.PushTaskReply{Returns: out}
	for i, b := range out {
		if len(b) <= inlineMax {
			continue
		}
		loc, err := cw.storeLarge(ctx, returnID(spec.TaskID, i), b)
		if err != nil {
			return fail(fmt.Sprintf("result %d: %v", i, err), "", false)
		}
		if rep.Stored == nil {
			rep.Stored = make([]*wire.ObjectLoc, len(out))
		}
		rep.Stored[i], rep.Returns[i] = loc, nil
	}
	return rep
}

// blocked tells the node that the task on ctx's lease waits in Get, so its
// CPU is lent to other work, and lets the next task pipelined on the same
// lease run meanwhile (it may be the very task this one waits for). The
// returned call undoes both. Goroutines of one task may block at once: the
// first to block lends the task's share and the last to wake takes it back.
func (cw *coreWorker) blocked(ctx context.Context) func() {
	tr, _ := ctx.Value(taskRunKey{}).(*taskRun)
	if !cw.isWorker || tr == nil || tr.lease == 0 {
		return func() {}
	}
	s := tr.slot
	call := func(method string) {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := cw.pool.Call(c, cw.nodeAddr, method, &wire.BlockedRequest{LeaseID: tr.lease}, nil); err != nil {
			cw.logger.Warn("tell node about blocked task", "method", method, "err", err)
		}
	}
	// tr.mu is held across each transition so that a goroutine blocking
	// while another wakes never gives back a slot the task does not hold.
	tr.mu.Lock()
	if tr.n++; tr.n == 1 {
		if slots.block(s) {
			call(wire.MethodBlocked)
		}
		s.mu.Unlock()
	}
	tr.mu.Unlock()
	return func() {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if tr.n--; tr.n == 0 {
			if slots.unblock(s) {
				call(wire.MethodUnblocked)
			}
			s.mu.Lock()
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
