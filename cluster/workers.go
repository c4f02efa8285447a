package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// envEntries returns vars as KEY=VALUE entries sorted by key.
func envEntries(vars map[string]string) []string {
	out := make([]string, 0, len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		out = append(out, k+"="+vars[k])
	}
	return out
}

// workerStartTimeout bounds how long a new worker process may take to register.
const workerStartTimeout = 30 * time.Second

// workerPool runs the worker processes of jobs on this node: one CPU worker
// process per job, running its tasks as goroutines (DESIGN: "a CPU worker
// process may run many tasks at once"), started on the first lease and
// restarted on the next lease after it dies.
type workerPool struct {
	host    workerHost
	cfg     workerPoolConfig
	mu      sync.Mutex
	workers map[string]*workerProc // task workers by procSpec.poolKey (job, devices for GPU workers, environment)
	byID    map[string]*workerProc
	actors  map[string]*actorProc // dedicated actor workers by actor ID
	// finished holds jobs that ended here (and when), so a lease request
	// still in flight when its driver finished cannot start a worker whose
	// lease nobody would ever return. Every actor incarnation's end adds
	// one too, so it is bounded: finishedJobMemory, maxFinishedJobs.
	finished *expiringSet
	// logs records the worker log files and how they rotate (workerlogs.go).
	logs *workerLogs
	// stopped is set by stopAll: the node is shutting down, so no worker
	// process may start (it would outlive the node, and write its log into
	// a data dir being removed).
	stopped bool
	binMu   sync.Mutex
}

// finishedJobMemory is how long a finished job's ID is remembered, and
// maxFinishedJobs how many at most (the oldest are forgotten first).
const (
	finishedJobMemory = time.Hour
	maxFinishedJobs   = 10_000
)

type workerProc struct {
	id       string
	job      string
	key      string // procSpec.poolKey for a task worker
	actor    string // actor ID for an actor's dedicated worker, else empty
	proc     process
	addr     string
	token    string        // its job's token (EnvJobToken), "" for none
	ready    chan struct{} // closed once registered or dead
	readyOne sync.Once
	dead     chan struct{} // closed when the process exited
	handled  chan struct{} // closed once its exit is handled (leases released; an actor's cleanup done)
	err      error
	stopping atomic.Bool // the node is ending it (job end): its exit is expected
	// reserved counts leases handed this Python worker whose lease is not
	// tied to it in the local scheduler yet (p.mu): it is busy meanwhile.
	reserved int
	// release unpins its runtime env's working dir once it exited (nil:
	// none).
	release func()
}

func newWorkerPool(host workerHost, cfg workerPoolConfig) *workerPool {
	if cfg.spawn == nil {
		cfg.spawn = execSpawn
	}
	return &workerPool{host: host, cfg: cfg, workers: map[string]*workerProc{}, byID: map[string]*workerProc{}, actors: map[string]*actorProc{},
		finished: newExpiringSet(finishedJobMemory, maxFinishedJobs),
		logs:     newWorkerLogs(cfg.logDir, cfg.logMaxBytes, cfg.logBackups, cfg.logRetention)}
}

// worker returns the job's registered worker process for a lease holding
// devices as (nil: none), starting one if needed.
func (p *workerPool) worker(ctx context.Context, req *wire.LeaseRequest, as *gpu.Assignment) (*workerProc, error) {
	p.mu.Lock()
	done := p.finished.has(req.JobID)
	p.mu.Unlock()
	if done {
		return nil, fmt.Errorf("job %s has finished", req.JobID)
	}
	if req.Language == wire.LanguageGo {
		if err := p.ensureBinary(ctx, req.JobID, req.BinaryHash, req.BinaryNode); err != nil {
			return nil, err
		}
	}
	token, err := p.jobToken(ctx, req.JobID)
	if err != nil {
		return nil, err
	}
	dir, release, err := p.workingDir(ctx, req.JobID, req.EnvVars)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.finished.has(req.JobID) {
		p.mu.Unlock()
		release()
		return nil, fmt.Errorf("job %s has finished", req.JobID)
	}
	spec := procSpec{job: req.JobID, lang: req.Language, binHash: req.BinaryHash, env: req.Env, envVars: req.EnvVars, gpus: as, token: token, dir: dir, release: release}
	var w *workerProc
	if spec.lang == wire.LanguagePython {
		w = p.idlePythonWorker(spec.poolKey())
	} else {
		w = p.workers[spec.poolKey()]
	}
	if w != nil {
		select {
		case <-w.dead:
			w = nil
		default:
		}
	}
	if w == nil {
		var err error
		if w, err = p.start(spec); err != nil {
			p.mu.Unlock()
			release()
			return nil, err
		}
	} else {
		release() // the running process holds the dir already
	}
	if spec.lang == wire.LanguagePython {
		w.reserved++
	}
	p.mu.Unlock()
	if err := w.awaitReady(ctx); err != nil {
		p.unreserve(w)
		return nil, fmt.Errorf("worker for job %s %w", req.JobID, err)
	}
	return w, nil
}

// idlePythonWorker returns a live Python worker process of pool key key
// that serves no lease, or nil; p.mu must be held. A Python process runs
// one lease at a time, as Ray's workers run one task at a time: threads of
// one interpreter would share its lock, so CPU-bound tasks of concurrent
// leases get processes of their own.
func (p *workerPool) idlePythonWorker(key string) *workerProc {
	for k, w := range p.workers {
		if !strings.HasPrefix(k, key+"#") || w.reserved > 0 {
			continue
		}
		select {
		case <-w.dead:
			continue
		default:
		}
		if p.host.workerLeases(w.id) == 0 {
			return w
		}
	}
	return nil
}

// unreserve ends the reservation worker made for a lease: the lease is
// tied to w in the local scheduler now, or was never granted.
func (p *workerPool) unreserve(w *workerProc) {
	p.mu.Lock()
	if w.reserved > 0 {
		w.reserved--
	}
	p.mu.Unlock()
}

// awaitReady waits until w has registered, at most workerStartTimeout; the
// error says it did not in time, exited instead, or ctx ended (wrapping
// ctx.Err()). A pooled worker's lease costs no timer: it is ready already.
func (w *workerProc) awaitReady(ctx context.Context) error {
	select {
	case <-w.ready:
	default:
		t := time.NewTimer(workerStartTimeout)
		defer t.Stop()
		select {
		case <-w.ready:
		case <-ctx.Done():
			return fmt.Errorf("waiting to register: %w", ctx.Err())
		case <-t.C:
			return fmt.Errorf("did not register within %s", workerStartTimeout)
		}
	}
	select {
	case <-w.dead:
		return fmt.Errorf("exited at start: %v", w.err)
	default:
		return nil
	}
}

// procSpec says what worker process to start: a job's task worker, or an
// actor's dedicated one (actor set; then job is the actor's own job ID, so
// its objects and nested task workers are freed with the actor).
type procSpec struct {
	job     string
	actor   string
	binHash string
	lang    string            // the job's language (wire.LanguageGo or wire.LanguagePython)
	env     []string          // extra KEY=VALUE entries (LeaseRequest.Env)
	envVars map[string]string // runtime env vars (validated)
	gpus    *gpu.Assignment   // the devices it may see (nil: none)
	// token is the job token the process gets (EnvJobToken): that of the
	// driver's job, also for an actor's worker, whose job is its own
	// (actorJobID). "" for none.
	token string
	// dir is the unpacked runtime env working dir the process starts in
	// ("": the node's own); release unpins it, and a started process owns
	// it (called once it exited), else the caller calls it.
	dir     string
	release func()
	// driverJob is an actor's creating job (job is its own, actorJobID)
	// and class its class name: what its log listing shows.
	driverJob, class string
}

// poolKey is the key under which a task worker started from this spec is
// pooled: taskPoolKey (job, devices) plus every environment entry the spec
// adds, so a process is only ever reused for leases that would have
// started it with the same environment.
func (spec procSpec) poolKey() string {
	key := taskPoolKey(spec.job, spec.gpus)
	if spec.lang != wire.LanguageGo {
		key += "|lang:" + spec.lang
	}
	if len(spec.env) == 0 && len(spec.envVars) == 0 {
		return key
	}
	// Keys hold no '=' or NUL and values no NUL (ValidateEnvVar), so the
	// NUL-joined entries are unambiguous.
	return key + "|env:" + strings.Join(spec.env, "\x00") + "|vars:" + strings.Join(envEntries(spec.envVars), "\x00")
}

// userEnv is the part of the process environment spec adds before the
// node's own variables: LeaseRequest.Env, the runtime env vars, and
// EnvRuntimeEnv describing them.
func (spec procSpec) userEnv() []string {
	out := append([]string(nil), spec.env...)
	if len(spec.envVars) == 0 {
		return out
	}
	out = append(out, envEntries(spec.envVars)...)
	b, _ := json.Marshal(spec.envVars) // a map[string]string always encodes
	return append(out, wire.EnvRuntimeEnv+"="+string(b))
}

// start launches a worker process; p.mu must be held.
func (p *workerPool) start(spec procSpec) (*workerProc, error) {
	if p.stopped {
		return nil, fmt.Errorf("start worker for job %s: the node is shutting down", spec.job)
	}
	argv, extraEnv, err := p.command(spec)
	if err != nil {
		return nil, fmt.Errorf("start worker for job %s: %w", spec.job, err)
	}
	// The IDs name the log file: no path may hide in them.
	if err := wire.CheckID("job ID", spec.job); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	if spec.actor != "" {
		if err := wire.CheckID("actor ID", spec.actor); err != nil {
			return nil, fmt.Errorf("start worker: %w", err)
		}
	}
	w := &workerProc{id: newID()[:16], job: spec.job, key: spec.poolKey(), actor: spec.actor, token: spec.token, ready: make(chan struct{}), dead: make(chan struct{}),
		handled: make(chan struct{})}
	if spec.lang == wire.LanguagePython && spec.actor == "" {
		w.key += "#" + w.id // several per key: one per concurrent lease (idlePythonWorker)
	}
	// The output goes through a pipe into a rotated file named once the
	// pid is known (workerlogs.go).
	pl, err := p.logs.newPipe()
	if err != nil {
		return nil, fmt.Errorf("start worker for job %s: %w", spec.job, err)
	}
	// The node's own variables come last, so they win over anything before.
	env := append(append(append(append(os.Environ(), extraEnv...), spec.userEnv()...), gpuEnv(spec.gpus)...), p.cfg.nodeEnv...)
	env = append(env, wire.EnvWorkerMode+"=1", wire.EnvJobID+"="+spec.job, wire.EnvWorkerID+"="+w.id,
		wire.EnvActorID+"="+spec.actor, wire.EnvBinaryHash+"="+spec.binHash, wire.EnvJobToken+"="+spec.token)
	proc, err := p.cfg.spawn(argv, env, spec.dir, pl.w)
	if err != nil {
		pl.abort()
		return nil, fmt.Errorf("start worker for job %s: %w", spec.job, err)
	}
	logName, logJob := logName{kind: logKindWorker, id: spec.job, worker: w.id, pid: proc.Pid()}, spec.job
	if spec.actor != "" {
		logName.kind, logName.id = logKindActor, spec.actor
		if spec.driverJob != "" {
			logJob = spec.driverJob
		}
	}
	pl.start(logName, logJob, spec.class, p.host.log().Warn)
	w.proc, w.release = proc, spec.release
	if spec.actor == "" {
		p.workers[w.key] = w
	}
	p.byID[w.id] = w
	p.host.log().Debug("started worker", "job", spec.job, "actor", spec.actor, "worker", w.id, "pid", proc.Pid())
	wait := func() {
		defer close(w.handled)
		w.err = proc.Wait()
		pl.finish()
		close(w.dead)
		if w.release != nil {
			w.release()
		}
		p.mu.Lock()
		w.markReady()
		if p.workers[w.key] == w {
			delete(p.workers, w.key)
		}
		delete(p.byID, w.id)
		p.mu.Unlock()
		n := p.host.releaseWorkerLeases(w.id)
		if w.actor != "" {
			p.actorExited(w)
			return
		}
		if w.stopping.Load() || p.host.lifetime().Err() != nil {
			p.host.log().Debug("worker stopped", "job", w.job, "worker", w.id, "leases_released", n)
		} else {
			p.host.log().Warn("worker exited", "job", w.job, "worker", w.id, "pid", proc.Pid(), "status", w.err, "leases_released", n)
		}
	}
	if !p.host.goFunc("worker-wait", wait) {
		// The node stopped while this worker started: it goes too.
		_ = proc.Kill()
		wait()
	}
	return w, nil
}

// workingDir returns the unpacked dir of the runtime env working dir in
// vars (wire.EnvWorkingDir) and its release; "" and a no-op without one.
// The error names the job and the ref.
func (p *workerPool) workingDir(ctx context.Context, job string, vars map[string]string) (string, func(), error) {
	ref := vars[wire.EnvWorkingDir]
	if ref == "" {
		return "", func() {}, nil
	}
	dir, release, err := p.host.workingDir(ctx, ref)
	if err != nil {
		err = fmt.Errorf("start worker for job %s: runtime env working dir %s: %w", job, ref, err)
		if runtimeEnvRefused(err) {
			err = fmt.Errorf("%w: %w", errRuntimeEnvSetup, err)
		}
		return "", nil, err
	}
	return dir, release, nil
}

// registered marks a worker ready once its RPC server is up.
func (p *workerPool) registered(req *wire.WorkerRegisterRequest) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.byID[req.WorkerID]
	if !ok {
		return fmt.Errorf("unknown worker %q", req.WorkerID)
	}
	w.addr = req.Addr
	w.markReady()
	return nil
}

// jobToken returns the token job's worker processes get (cfg.jobToken),
// "" for none; an error names the job.
func (p *workerPool) jobToken(ctx context.Context, job string) (string, error) {
	if p.cfg.jobToken == nil {
		return "", nil
	}
	tok, err := p.cfg.jobToken(ctx, job)
	if err != nil {
		return "", fmt.Errorf("start worker for job %s: %w", job, err)
	}
	return tok, nil
}

// tokenOfAddr returns the job token of the worker process serving at
// addr, "" when none serves there (the node presents it calling the
// worker).
func (p *workerPool) tokenOfAddr(addr string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.byID {
		if w.addr == addr {
			return w.token
		}
	}
	return ""
}

// markReady wakes lease requests waiting for the worker (registered or dead).
func (w *workerProc) markReady() { w.readyOne.Do(func() { close(w.ready) }) }

// stopJob ends a job's task worker processes (one, plus one per device
// set its GPU leases used).
func (p *workerPool) stopJob(job string) {
	p.mu.Lock()
	p.finished.add(job, time.Now())
	var ws []*workerProc
	for k, w := range p.workers {
		if w.job == job {
			ws = append(ws, w)
			delete(p.workers, k)
		}
	}
	p.mu.Unlock()
	for _, w := range ws {
		if w.proc != nil {
			w.stopping.Store(true)
			_ = w.proc.Kill()
			<-w.dead
		}
	}
}

// revokeLeases tells each task worker serving one of leases to refuse
// further tasks under it, with reason, and returns once each has answered
// (at most pgPhaseTimeout). A worker that cannot be reached has exited, and
// its leases with it.
func (p *workerPool) revokeLeases(leases []revokedLease, reason string) {
	byWorker := map[string][]uint64{}
	for _, l := range leases {
		if l.workerID != "" {
			byWorker[l.workerID] = append(byWorker[l.workerID], l.id)
		}
	}
	addrs := map[string]string{}
	p.mu.Lock()
	for id := range byWorker {
		if w := p.byID[id]; w != nil && w.actor == "" && w.addr != "" {
			addrs[id] = w.addr
		}
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(p.host.lifetime(), pgPhaseTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for id, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &wire.LeaseRevokeRequest{LeaseIDs: byWorker[id], Reason: reason}
			if err := p.host.callWorker(ctx, addr, wire.MethodLeaseRevoke, req, nil); err != nil && !rpc.IsTransport(err) {
				p.host.log().Warn("revoke leases", "worker", id, "leases", req.LeaseIDs, "err", err)
			}
		}()
	}
	wg.Wait()
}

// stopTaskWorkers ends every task worker process (not actors'), returning
// once each has exited and its leases are released, and returns their
// count. Unlike stopJob the jobs may start workers here again.
func (p *workerPool) stopTaskWorkers() int {
	p.mu.Lock()
	ws := make([]*workerProc, 0, len(p.workers))
	for k, w := range p.workers {
		ws = append(ws, w)
		delete(p.workers, k)
	}
	p.mu.Unlock()
	for _, w := range ws {
		if w.proc != nil {
			w.stopping.Store(true)
			_ = w.proc.Kill()
			<-w.dead
		}
	}
	return len(ws)
}

// stopAll ends every worker process (node shutdown).
func (p *workerPool) stopAll() {
	p.mu.Lock()
	p.stopped = true
	var jobs, actors []string
	for _, w := range p.workers {
		jobs = append(jobs, w.job)
	}
	for a := range p.actors {
		actors = append(actors, a)
	}
	p.mu.Unlock()
	for _, j := range jobs {
		p.stopJob(j)
	}
	for _, a := range actors {
		p.stopActor(a)
	}
}

func splitHost(addr string) (string, error) {
	h, _, err := net.SplitHostPort(addr)
	return h, err
}
