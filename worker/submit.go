package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// Tuning of the submitter (Ray's direct task submitter): how many tasks one
// lease may have in flight when its key's tasks are known to be short and
// there is a backlog, how long a task may run and still count as short, how
// many lease requests one scheduling key keeps outstanding, and how long an
// idle lease is kept for the next task of the same shape.
const (
	maxPipeline      = 8
	shortTask        = 5 * time.Millisecond
	maxLeaseRequests = 10
	leaseLinger      = 50 * time.Millisecond
	maxSpillHops     = 4
	// maxDeadWorkers bounds the worker IDs remembered as crashed.
	maxDeadWorkers = 1024
)

// submitter queues tasks per scheduling key (resources + strategy), leases
// workers for them from the local node (following spillbacks), and pushes
// tasks straight to the leased workers: no leader, no Raft on this path.
type submitter struct {
	cw     *coreWorker
	mu     sync.Mutex
	queues map[queueKey]*keyQueue
	// deadWorkers holds worker processes seen to crash (by worker ID): a
	// lease on one of them is never used, whichever queue holds it.
	deadWorkers map[string]bool
	// localDownSince is when calls to this process's node started failing
	// (zero while it answers); localLost is set once that lasted
	// localNodeTimeout, and fails every task from then on.
	localDownSince time.Time
	localLost      *NodeDiedError
	// peers are the other nodes' RPC addresses as last seen in the
	// cluster view, for ending the job when the local node is gone.
	peers []string
	// spillReqs are the lease requests out to spillback targets, by the
	// target's RPC address: loseDeadNodes cancels those to a node declared
	// dead, whose silent connection would hold them until the TCP timeout.
	spillReqs map[*spillReq]struct{}
}

// spillReq is a lease request in flight to another node.
type spillReq struct {
	addr   string
	cancel context.CancelFunc
}

// localNodeTimeout is how long a process keeps retrying its own node before
// failing its tasks with NodeDiedError (a variable for tests).
var localNodeTimeout = 30 * time.Second

// queueKey is a task's queue: its scheduling key and the key of its
// handle's own runtime env vars (WithRuntimeEnv), both derived once per
// handle. Tasks with different runtime envs must not share a lease (the node
// runs each env in worker processes of its own); the process's env, which
// every task here inherits, is the same for all.
type queueKey struct{ sched, env string }

type pendingTask struct {
	ctxWatch   // its Remote's ctx: cancels it when that ends first
	sub        *submitter
	spec       wire.TaskSpec
	ids        []string // its return objects' IDs (returnID), as submit gave them out
	opts       taskOptions
	crashes    int // worker or node deaths so far (and rebuilds: lineage.go)
	appRetries int
	lin        *lineage // kept by its return objects, to rebuild them
	// crashedIn holds the worker IDs whose crash killed an attempt of the
	// task: a retry never goes to them.
	crashedIn []string
	// Where it is, for Cancel (guarded by submitter.mu): its queue once
	// enqueued, the lease it is pushed on while in flight, and whether it
	// was cancelled (then it is never queued or retried again).
	q         *keyQueue
	lease     *heldLease
	cancelled bool
}

type keyQueue struct {
	res        sched.ResourceSet
	strategy   wire.Strategy
	tasks      []*pendingTask
	leases     []*heldLease
	requesting int
	warned     bool
	gpu        bool              // GPU demand: one task per lease at a time (gpus.go)
	spread     bool              // SPREAD: one task per lease, each lease placed anew
	short      bool              // the key's last task ran under shortTask: it may be pipelined
	envVars    map[string]string // effective runtime env vars every lease of this queue is for
}

// pipelines reports whether q's tasks may queue several to a lease: only
// tasks known to be short (Ray grants a lease per task in flight), never
// GPU or SPREAD tasks, and only while there are more tasks than leases.
func (q *keyQueue) pipelines() bool {
	return q.short && !q.gpu && !q.spread && len(q.tasks) > len(q.leases)
}

type heldLease struct {
	rep      wire.LeaseReply
	inflight int
	dead     bool
	gen      int
	// ctx carries the lease's pushes; cancel ends them when the cluster
	// declares the lease's node dead (lost), since a frozen node's
	// connections stay open and would hold its tasks forever.
	ctx     context.Context
	cancel  context.CancelFunc
	lost    bool
	revoked bool // its node revoked it: returned once no push on it is in flight
}

func newSubmitter(cw *coreWorker) *submitter {
	return &submitter{cw: cw, queues: map[queueKey]*keyQueue{}, deadWorkers: map[string]bool{}}
}

// submit builds a task from f's registration and options and queues it; it
// returns the IDs of its return objects and the owner address.
func submit(ctx context.Context, f remote, numReturns int, args ...any) ([]string, string, error) {
	ids := make([]string, numReturns)
	if f.err != nil {
		return ids, "", f.err // a bad option, returned by Options already
	}
	cw, err := current()
	if err != nil {
		return ids, "", err
	}
	taskID := cw.newTaskID()
	for i := range ids {
		ids[i] = returnID(taskID, i)
	}
	fail := func(err error) ([]string, string, error) {
		cw.objects.failAll(ids, err)
		return ids, cw.addr, err
	}
	opts := f.opts
	name := opts.name
	if name == "" {
		name = shortName(f.name)
	}
	spec := wire.TaskSpec{TaskID: taskID, JobID: cw.jobID, Name: name, Function: f.name, NumReturns: numReturns, Owner: cw.addr}
	if ctx.Err() != nil {
		return fail(cancelledErr(&spec, context.Cause(ctx)))
	}
	wargs, nested, err := cw.encodeArgs(ctx, "submit", name, args)
	if err != nil {
		return fail(err)
	}
	cw.freeOnce.Do(func() {
		cw.objects.setOnFree(cw.queueFree, cw.noteStored, cw.innerFreed, func(ids []string) { go cw.releaseBorrows(ids) })
	})
	spec.Args = wargs
	t := &pendingTask{sub: cw.sub, ids: ids, opts: opts, spec: spec}
	// Refs this process owns that were not ready to inline: wait for them.
	var deps []int
	for i, a := range args {
		if r, ok := a.(ObjectRef); ok && r.Owner() == cw.addr && wargs[i].IsRef {
			deps = append(deps, i)
		}
	}
	t.lin = newLineage(spec, opts, ids, deps)
	cw.objects.pendingFor(ids, t, append(cw.ownedArgs(wargs), nested...), t.lin, cw.addr)
	runtime.KeepAlive(args) // their handles held the objects until the task did
	cw.sub.watchCtx(ctx, t)
	if len(deps) > 0 {
		cw.sub.noteTask(t, wire.TaskPendingArgsAvail)
	}
	if len(deps) == 0 {
		cw.sub.enqueue(t)
	} else {
		go cw.sub.resolveThenEnqueue(t, deps)
	}
	return ids, cw.addr, nil
}

// encodeArgs turns call arguments into wire form: refs stay refs (a ready
// one this process owns travels inline), values are msgpack-encoded, and
// values over the inline limit go to the object store and travel as refs.
// Errors begin with verb and name ("submit square: ..."), built only then.
// nested are the IDs of refs this process owns found inside the values.
func (cw *coreWorker) encodeArgs(ctx context.Context, verb, name string, args []any) (out []wire.Arg, nested []string, err error) {
	out = make([]wire.Arg, len(args))
	for i, a := range args {
		if r, ok := a.(interface{ released() bool }); ok && r.released() {
			return nil, nil, fmt.Errorf("%s %s: argument %d: %w", verb, name, i,
				&ObjectFreedError{ObjectID: a.(ObjectRef).ID(), Owner: a.(ObjectRef).Owner(), Reason: reasonReleased})
		}
		if r, ok := a.(ObjectRef); ok {
			if o := cw.objects.get(r.ID()); o != nil && o.ready() && o.err == nil && o.loc == nil {
				out[i] = wire.Arg{Inline: o.value}
				continue
			}
			out[i] = wire.Arg{IsRef: true, RefID: r.ID(), Owner: r.Owner()}
			continue
		}
		b, in, err := marshalArg(a)
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: encode argument %d (%T): %w", verb, name, i, a, err)
		}
		nested = append(nested, in...)
		if len(b) > inlineMax {
			id := cw.newObjectID("a")
			loc, err := cw.storeLarge(ctx, id, cw.addr, "argument of "+name, b)
			if err != nil {
				return nil, nil, fmt.Errorf("%s %s: argument %d: %w", verb, name, i, err)
			}
			cw.objects.completeLoc(id, loc)
			out[i] = wire.Arg{IsRef: true, RefID: id, Owner: cw.addr}
			continue
		}
		out[i] = wire.Arg{Inline: b}
	}
	return out, nested, nil
}

// ownedArgs returns the IDs of the objects of this process that wargs pass
// by ref: the task holds them until it finishes.
func (cw *coreWorker) ownedArgs(wargs []wire.Arg) []string {
	var ids []string
	for _, a := range wargs {
		if a.IsRef && a.Owner == cw.addr {
			ids = append(ids, a.RefID)
		}
	}
	return ids
}

// resolveThenEnqueue waits for arguments this process owns and inlines their
// values (Ray's LocalDependencyResolver); a failed argument fails the task.
func (s *submitter) resolveThenEnqueue(t *pendingTask, deps []int) {
	for _, i := range deps {
		a := &t.spec.Args[i]
		o := s.cw.objects.get(a.RefID)
		if o == nil {
			continue // unknown here: the executor asks the owner (and reports it lost)
		}
		if err := o.wait(s.cw.ctx); err != nil {
			return
		}
		if o.err != nil {
			s.failTask(t, fmt.Errorf("argument %d of task %s failed: %w", i, t.spec.Name, o.err))
			return
		}
		if o.loc == nil { // large objects stay refs: the executor reads them from the store
			*a = wire.Arg{Inline: o.value}
		}
	}
	s.enqueue(t)
}

func (s *submitter) enqueue(t *pendingTask) {
	key := queueKey{t.opts.key, t.opts.envKey}
	// Recorded before the queue takes it, outside the submitter's lock,
	// which every submission and lease of this process contends for.
	s.noteTask(t, wire.TaskPendingNodeAssignment)
	s.mu.Lock()
	if t.cancelled {
		s.mu.Unlock()
		return
	}
	if lost := s.localLost; lost != nil {
		s.mu.Unlock()
		s.failTask(t, lost)
		return
	}
	q := s.queues[key]
	if q == nil {
		q = &keyQueue{res: t.opts.demandSet(), strategy: t.opts.strategy, gpu: demandsGPU(t.opts.res),
			spread: t.opts.strategy.Kind == wire.StrategySpread, envVars: s.cw.envFor(t.opts.envVars)}
		s.queues[key] = q
	}
	t.q = q
	q.tasks = append(q.tasks, t)
	s.pumpLocked(q)
	s.mu.Unlock()
}

// pumpLocked pushes queued tasks onto leases with room and asks for more
// leases while a backlog remains. A lease has one task in flight, or up to
// maxPipeline when the key pipelines; the worker sends a pipelined task
// back (NotRun) rather than let it wait behind a slow or blocked one.
func (s *submitter) pumpLocked(q *keyQueue) {
	for len(q.tasks) > 0 {
		limit := 1
		if q.pipelines() {
			limit = maxPipeline
		}
		t := q.tasks[0]
		var best *heldLease
		for _, l := range q.leases {
			if !l.dead && l.inflight < limit && (best == nil || l.inflight < best.inflight) && !slices.Contains(t.crashedIn, l.rep.WorkerID) {
				best = l
			}
		}
		if best == nil {
			break
		}
		q.tasks[0] = nil
		q.tasks = q.tasks[1:]
		pipelined := best.inflight > 0
		t.lease = best
		best.inflight++
		best.gen++
		go s.push(q, best, t, pipelined)
	}
	for q.requesting < min(len(q.tasks), maxLeaseRequests) {
		q.requesting++
		go s.requestLease(q)
	}
}

// requestLease asks the local node for a lease, following spillbacks.
func (s *submitter) requestLease(q *keyQueue) {
	cw := s.cw
	addr, spilled := cw.nodeAddr, false
	backoff := 100 * time.Millisecond
	for hops := 0; ; {
		s.mu.Lock()
		if len(q.tasks) == 0 || cw.ctx.Err() != nil {
			q.requesting--
			s.mu.Unlock()
			return
		}
		name := q.tasks[0].spec.Name
		s.mu.Unlock()
		req := &wire.LeaseRequest{JobID: cw.jobID, BinaryHash: cw.binHash, BinaryNode: cw.nodeAddr, Resources: q.res,
			Strategy: q.strategy, Spilled: spilled || hops >= maxSpillHops, TaskName: name, Env: cw.workerEnv, EnvVars: q.envVars}
		var rep wire.LeaseReply
		err := s.callLease(addr, req, &rep)
		if err == nil && addr == cw.nodeAddr {
			s.localUp()
		}
		switch {
		case err != nil:
			if cw.ctx.Err() != nil {
				s.mu.Lock()
				q.requesting--
				s.mu.Unlock()
				return
			}
			if addr == cw.nodeAddr && rpc.IsTransport(err) && s.localDown(q, err) {
				return
			}
			if errors.Is(err, ErrRuntimeEnvSetupFailed) {
				s.envSetupFailed(q, addr, err)
				return
			}
			cw.logger.Warn("lease request failed; retrying", "node", addr, "task", name, "err", err)
			// A spillback target that cannot be reached: ask the local node
			// again, marked spilled so it does not send us back there.
			spilled = addr != cw.nodeAddr
			addr = cw.nodeAddr
			sleepCtx(cw.ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		case rep.Spillback != "":
			addr, spilled = rep.Spillback, true
			hops++
			continue
		case rep.Infeasible != nil:
			s.infeasible(q, rep.Infeasible.Why())
			addr, spilled = cw.nodeAddr, false
			sleepCtx(cw.ctx, time.Second)
			continue
		}
		s.mu.Lock()
		q.requesting--
		l := &heldLease{rep: rep}
		l.ctx, l.cancel = context.WithCancel(cw.ctx)
		if len(q.tasks) == 0 || s.deadWorkers[rep.WorkerID] {
			// Nothing to run, or granted on a process this submitter saw
			// crash (the node had not noticed yet): give it back.
			s.pumpLocked(q)
			s.mu.Unlock()
			s.returnLease(l)
			return
		}
		q.leases = append(q.leases, l)
		s.pumpLocked(q)
		s.mu.Unlock()
		return
	}
}

// localDown notes a failed call to this process's node. Once calls have
// failed for localNodeTimeout it fails q's tasks (and every later task)
// with NodeDiedError, ends this lease request and reports true.
func (s *submitter) localDown(q *keyQueue, err error) bool {
	s.mu.Lock()
	now := time.Now()
	if s.localDownSince.IsZero() {
		s.localDownSince = now
	}
	if s.localLost == nil && now.Sub(s.localDownSince) >= localNodeTimeout {
		s.localLost = &NodeDiedError{NodeAddr: s.cw.nodeAddr, Since: s.localDownSince, Cause: err.Error()}
		s.cw.logger.Error("this process's node does not answer: failing its tasks", "node", s.cw.nodeAddr, "since", s.localDownSince, "err", err)
	}
	lost := s.localLost
	if lost == nil {
		s.mu.Unlock()
		return false
	}
	q.requesting--
	var failed []*pendingTask
	for _, qq := range s.queues {
		failed = append(failed, qq.tasks...)
		qq.tasks = nil
	}
	s.mu.Unlock()
	for _, t := range failed {
		s.failTask(t, lost)
	}
	return true
}

// envSetupFailed fails q's queued tasks with err, a node's answer that
// their runtime env cannot be set up there (their working dir refused or
// held by no node), and ends this lease request: as Ray fails a task with
// RuntimeEnvSetupError rather than retrying it.
func (s *submitter) envSetupFailed(q *keyQueue, addr string, err error) {
	s.mu.Lock()
	q.requesting--
	failed := q.tasks
	q.tasks = nil
	s.mu.Unlock()
	s.cw.logger.Warn("runtime env setup failed: failing the tasks that need it", "node", addr, "tasks", len(failed), "err", err)
	for _, t := range failed {
		s.failTask(t, fmt.Errorf("task %s: %w", t.spec.Name, err))
	}
}

// localUp notes that this process's node answered.
func (s *submitter) localUp() {
	s.mu.Lock()
	s.localDownSince = time.Time{}
	s.mu.Unlock()
}

// infeasible logs a demand no node can satisfy (once per key, on the driver,
// naming the missing resource) and fails the tasks that asked for that.
func (s *submitter) infeasible(q *keyQueue, reason string) {
	s.mu.Lock()
	var failed []*pendingTask
	kept := q.tasks[:0]
	for _, t := range q.tasks {
		if t.opts.failIfInfeasible {
			failed = append(failed, t)
		} else {
			kept = append(kept, t)
		}
	}
	q.tasks = kept
	warn := !q.warned && len(kept) > 0
	q.warned = true
	s.mu.Unlock()
	for _, t := range failed {
		s.failTask(t, &InfeasibleError{TaskName: t.spec.Name, Reason: reason})
	}
	if warn {
		s.cw.logger.Warn("task is infeasible: no node in the cluster can run it; it waits for a node that can (see nodeup status)",
			"task", kept[0].spec.Name, "demand", q.res.String(), "reason", reason)
	}
}

// push runs one task on a leased worker and records its outcome.
func (s *submitter) push(q *keyQueue, l *heldLease, t *pendingTask, pipelined bool) {
	t.spec.Attempt = t.crashes + t.appRetries
	s.noteOnLease(t, l, t.spec.Attempt, wire.TaskSubmittedToWorker, nil, 0)
	var rep wire.PushTaskReply
	err := s.cw.pool.Call(l.ctx, l.rep.WorkerAddr, wire.MethodPushTask,
		&wire.PushTaskRequest{LeaseID: l.rep.LeaseID, Spec: t.spec, Pipelined: pipelined}, &rep)
	if err == nil && len(rep.Borrowed) > 0 {
		// Before the arguments are released below: the object never drops
		// to zero while the worker holds it.
		s.cw.objects.addBorrowed(rep.Borrowed)
	}
	s.mu.Lock()
	t.lease = nil
	l.inflight--
	if l.dead && l.inflight == 0 {
		l.cancel() // nothing more will run on it
	}
	if l.lost && err == nil {
		// A reply that raced the node's death: the task is already being
		// retried elsewhere, so this outcome must not count twice.
		err = errNodeLost
	}
	// The outcome, recorded once s.mu is released: failed, succeeded, or
	// neither (the task went back on the queue).
	var failed error
	succeeded := false
	switch {
	case err != nil && s.cw.ctx.Err() != nil:
		s.mu.Unlock()
		return
	case leaseRevoked(err):
		// Its placement-group bundle was returned before the task started:
		// the task goes back on the queue, no attempt used, for a new lease
		// (which a removed group's bundle cannot get: it is infeasible).
		if !l.dead {
			l.dead = true
			s.dropLeaseLocked(q, l)
		}
		l.revoked = true
		s.requeueLocked(q, t, true)
	case err != nil && l.lost:
		failed = s.crashedLocked(q, t, l, fmt.Sprintf("node %s was declared dead", l.rep.NodeName))
	case err != nil && !rpc.IsTransport(err):
		// The worker answered, but not with a result (e.g. it could not
		// decode the request): retrying elsewhere would fail the same way.
		failed = fmt.Errorf("task %s: worker %s refused it: %w", t.spec.Name, l.rep.WorkerAddr, err)
	case err != nil:
		s.workerDiedLocked(l.rep.WorkerID)
		failed = s.crashedLocked(q, t, l, err.Error())
	case rep.NotRun:
		// Sent back unstarted from behind a slow or blocked task: the
		// key is not short, and the task goes first to another lease.
		q.short = false
		s.requeueLocked(q, t, true)
	default:
		// It ran: its run time says whether the key may be pipelined.
		q.short = rep.RunNanos < int64(shortTask)
		switch {
		case rep.Error != nil && t.opts.retryExceptions && (t.opts.maxRetries < 0 || t.appRetries < t.opts.maxRetries):
			t.appRetries++
			s.requeueLocked(q, t, false)
		case rep.Error != nil:
			failed = taskErrorFrom(t.spec.Name, rep.Error)
		default:
			succeeded = true
		}
	}
	// A lease is given back once nothing is in flight on it when its node
	// revoked it, or when it is SPREAD's (every SPREAD task is placed
	// anew: a lease is not reused).
	giveBack := l.revoked && l.inflight == 0
	if giveBack {
		l.revoked = false
	}
	if q.spread && !l.dead && l.inflight == 0 {
		l.dead, giveBack = true, true
		s.dropLeaseLocked(q, l)
	}
	s.pumpLocked(q)
	if !l.dead && l.inflight == 0 && len(q.tasks) == 0 {
		gen := l.gen
		time.AfterFunc(leaseLinger, func() { s.maybeReturn(q, l, gen) })
	}
	s.mu.Unlock()
	if giveBack {
		go s.returnLease(l)
	}
	switch {
	case failed != nil:
		s.noteOnLease(t, l, t.spec.Attempt, wire.TaskFailed, failed, rep.RunNanos)
		s.cw.objects.failAll(t.ids, failed)
	case succeeded:
		s.noteOnLease(t, l, t.spec.Attempt, wire.TaskFinished, nil, rep.RunNanos)
		if t.lin != nil {
			t.lin.used.Store(int32(t.crashes + t.appRetries))
		}
		s.cw.objects.finishContained(t.spec.Name, t.ids, rep.Returns, rep.Stored, rep.Contained, rep.ContainedOwner)
	default:
		s.cw.dropContained(&rep) // an outcome not taken: its results hold nothing
	}
}

// crashedLocked counts an attempt of t lost with the worker process of l
// (it crashed, or its node was declared dead): t goes back to the head of
// q, never to run in that process again, while MaxRetries allows; else the
// WorkerCrashedError to fail it with is returned.
func (s *submitter) crashedLocked(q *keyQueue, t *pendingTask, l *heldLease, cause string) error {
	t.crashes++
	t.crashedIn = append(t.crashedIn, l.rep.WorkerID)
	if t.cancelled {
		return nil // its objects hold the cancellation already
	}
	if t.opts.maxRetries >= 0 && t.crashes > t.opts.maxRetries {
		return &WorkerCrashedError{TaskName: t.spec.Name, Attempts: t.crashes, Cause: cause}
	}
	s.cw.logger.Warn("task's worker process or node was lost; retrying in another worker process", "task", t.spec.Name,
		"node", l.rep.NodeName, "worker", l.rep.WorkerID, "attempt", t.crashes, "cause", cause)
	s.requeueLocked(q, t, true)
	return nil
}

// workerDiedLocked drops every lease held on the worker process id, in
// every queue: a crash kills all of its leases, and pushing to one the
// submitter has not tried yet would only fail again and spend a retry.
func (s *submitter) workerDiedLocked(id string) {
	if len(s.deadWorkers) >= maxDeadWorkers {
		clear(s.deadWorkers)
	}
	s.deadWorkers[id] = true
	for _, q := range s.queues {
		q.leases = slices.DeleteFunc(q.leases, func(l *heldLease) bool {
			if l.rep.WorkerID == id {
				l.dead = true
				if l.inflight == 0 {
					l.cancel()
				}
			}
			return l.dead
		})
	}
}

// errNodeLost stands for a push whose node the cluster declared dead.
var errNodeLost = errors.New("node declared dead")

// nodeCheckInterval is how often a submitter with tasks in flight on other
// nodes asks its own node which nodes the cluster declared dead.
const nodeCheckInterval = time.Second

// watchNodes (started once the process knows its node) ends the pushes on
// nodes the cluster declares dead (gossip's
// failure detector, through the local node's view), so their tasks are
// retried elsewhere: a frozen node never breaks its connections, and its
// tasks would otherwise wait for it forever. It runs until the submitter's
// process shuts down.
func (s *submitter) watchNodes() {
	t := time.NewTicker(nodeCheckInterval)
	defer t.Stop()
	ticks := 0
	for {
		select {
		case <-s.cw.ctx.Done():
			return
		case <-t.C:
		}
		ticks++
		if !s.remoteInFlight() && !s.cw.actors.inflightElsewhere(s.cw.nodeID) && ticks%peerRefreshTicks != 1 {
			continue
		}
		var v wire.ClusterView
		ctx, cancel := context.WithTimeout(s.cw.ctx, nodeCheckInterval)
		err := s.cw.pool.Call(ctx, s.cw.nodeAddr, wire.MethodClusterView, &wire.Empty{}, &v)
		cancel()
		if err == nil {
			s.notePeers(v.Nodes)
			s.loseDeadNodes(v.Nodes)
		}
	}
}

// callLease sends a lease request to addr; one to another node is tracked
// in spillReqs while it is out, so a node declared dead cancels it.
func (s *submitter) callLease(addr string, req *wire.LeaseRequest, rep *wire.LeaseReply) error {
	cw := s.cw
	if addr == cw.nodeAddr {
		return cw.pool.Call(cw.ctx, addr, wire.MethodLease, req, rep)
	}
	cw.dialer.markNode(addr)
	ctx, cancel := context.WithCancel(cw.ctx)
	defer cancel()
	r := &spillReq{addr: addr, cancel: cancel}
	s.mu.Lock()
	if s.spillReqs == nil {
		s.spillReqs = map[*spillReq]struct{}{}
	}
	s.spillReqs[r] = struct{}{}
	s.mu.Unlock()
	err := cw.pool.Call(ctx, addr, wire.MethodLease, req, rep)
	s.mu.Lock()
	delete(s.spillReqs, r)
	s.mu.Unlock()
	if err != nil && ctx.Err() != nil && cw.ctx.Err() == nil {
		return fmt.Errorf("lease request to %s: its node was declared dead: %w", addr, err)
	}
	return err
}

// peerRefreshTicks: with nothing in flight elsewhere, the view (and with it
// the peers) is still refreshed every this many nodeCheckIntervals.
const peerRefreshTicks = 10

// notePeers keeps the alive nodes' addresses other than this process's own.
func (s *submitter) notePeers(view []wire.NodeInfo) {
	var peers []string
	for _, nd := range view {
		s.cw.dialer.markNode(nd.Addr)
		if nd.Alive && nd.Addr != s.cw.nodeAddr {
			peers = append(peers, nd.Addr)
		}
	}
	s.mu.Lock()
	s.peers = peers
	s.mu.Unlock()
}

// knownPeers returns the other nodes last seen alive.
func (s *submitter) knownPeers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.peers)
}

// remoteInFlight reports whether a push or a lease request is in flight on
// another node.
func (s *submitter) remoteInFlight() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.spillReqs) > 0 {
		return true
	}
	for _, q := range s.queues {
		for _, l := range q.leases {
			if l.inflight > 0 && l.rep.NodeID != s.cw.nodeID {
				return true
			}
		}
	}
	return false
}

// loseDeadNodes cancels the pushes on every lease whose node view lists as
// not alive; push then retries their tasks (nodes absent from view, e.g.
// just joined, are left alone).
func (s *submitter) loseDeadNodes(view []wire.NodeInfo) {
	dead := map[string]bool{}
	deadAddrs := map[string]bool{}
	for _, nd := range view {
		if !nd.Alive {
			dead[nd.NodeID], deadAddrs[nd.Addr] = true, true
		}
	}
	if len(dead) == 0 {
		return
	}
	s.cw.actors.loseDeadNodes(dead)
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.spillReqs {
		if deadAddrs[r.addr] {
			r.cancel()
		}
	}
	for _, q := range s.queues {
		for _, l := range q.leases {
			if dead[l.rep.NodeID] && !l.lost {
				l.lost, l.dead = true, true
				l.cancel()
			}
		}
		q.leases = slices.DeleteFunc(q.leases, func(l *heldLease) bool { return l.lost })
	}
}

// leaseRevoked reports whether a push failed because the worker's node
// revoked the lease (wire.CodeLeaseRevoked).
func leaseRevoked(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == wire.CodeLeaseRevoked
}

// maybeReturn gives back a lease that stayed idle for leaseLinger.
func (s *submitter) maybeReturn(q *keyQueue, l *heldLease, gen int) {
	s.mu.Lock()
	if l.dead || l.inflight > 0 || l.gen != gen {
		s.mu.Unlock()
		return
	}
	l.dead = true
	s.dropLeaseLocked(q, l)
	s.mu.Unlock()
	s.returnLease(l)
}

func (s *submitter) dropLeaseLocked(q *keyQueue, l *heldLease) {
	for i, x := range q.leases {
		if x == l {
			q.leases = append(q.leases[:i], q.leases[i+1:]...)
			return
		}
	}
}

func (s *submitter) returnLease(l *heldLease) {
	l.cancel()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.cw.ctx), 5*time.Second)
	defer cancel()
	s.cw.dialer.markNode(l.rep.NodeAddr)
	if err := s.cw.pool.Call(ctx, l.rep.NodeAddr, wire.MethodLeaseReturn, &wire.LeaseReturnRequest{LeaseID: l.rep.LeaseID}, nil); err != nil && !rpc.IsTransport(err) {
		s.cw.logger.Debug("return lease", "lease", l.rep.LeaseID, "err", err)
	}
}

// returnAll gives back every held lease (Shutdown).
func (s *submitter) returnAll() {
	s.mu.Lock()
	var all []*heldLease
	for _, q := range s.queues {
		for _, l := range q.leases {
			if !l.dead {
				l.dead = true
				all = append(all, l)
			}
		}
		q.leases = nil
		q.tasks = nil
	}
	s.mu.Unlock()
	for _, l := range all {
		s.returnLease(l)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// shortName drops the package path from a registered function name.
func shortName(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	return name
}
