package cluster

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// fakeProc is a worker process that lives until killed or told to exit.
type fakeProc struct {
	pid  int
	argv []string
	env  []string
	dir  string
	exit chan error // buffered 1: why it exits
}

func (p *fakeProc) Pid() int    { return p.pid }
func (p *fakeProc) Wait() error { return <-p.exit }
func (p *fakeProc) Kill() error {
	select {
	case p.exit <- errors.New("signal: killed"):
	default:
	}
	return nil
}

func (p *fakeProc) getenv(key string) string {
	for _, e := range slices.Backward(p.env) {
		if k, v, _ := strings.Cut(e, "="); k == key {
			return v
		}
	}
	return ""
}

// fakeWorkerHost is a workerHost with no node behind it: it records what
// the pool asks of the node and runs tracked goroutines as plain ones.
type fakeWorkerHost struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	procs     []*fakeProc
	released  []string // workers whose leases were released
	leases    []uint64 // single leases released
	jobsEnded []string // actor jobs ended
	deaths    []wire.ActorDiedRequest
	leasesOf  map[string]int // leases each worker holds, as the test sets them
	wdPins    map[string]int // pins on each working dir ref's dir
}

// workingDir "unpacks" ref to /wd/<ref> and counts its pins.
func (h *fakeWorkerHost) workingDir(_ context.Context, ref string) (string, func(), error) {
	if _, _, err := wire.ParseWorkingDirRef(ref); err != nil {
		return "", nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.wdPins == nil {
		h.wdPins = map[string]int{}
	}
	h.wdPins[ref]++
	var once sync.Once
	return "/wd/" + ref, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.wdPins[ref]--
		})
	}, nil
}

func (h *fakeWorkerHost) pins(ref string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.wdPins[ref]
}

func (h *fakeWorkerHost) callWorker(context.Context, string, string, any, any) error {
	return errors.New("the fake host has no nodes")
}

func (h *fakeWorkerHost) callNode(context.Context, string, string, any, any) error {
	return errors.New("the fake host has no nodes")
}

func (h *fakeWorkerHost) goFunc(name string, f func()) bool {
	if h.ctx.Err() != nil {
		return false
	}
	h.wg.Add(1)
	go func() { defer h.wg.Done(); f() }()
	return true
}

func (h *fakeWorkerHost) lifetime() context.Context { return h.ctx }
func (h *fakeWorkerHost) log() *slog.Logger         { return testutil.Logger() }

func (h *fakeWorkerHost) releaseWorkerLeases(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = append(h.released, id)
	return 1
}

func (h *fakeWorkerHost) releaseLease(id uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leases = append(h.leases, id)
}

func (h *fakeWorkerHost) workerLeases(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leasesOf[id]
}

func (h *fakeWorkerHost) setLeases(id string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leasesOf == nil {
		h.leasesOf = map[string]int{}
	}
	h.leasesOf[id] = n
}

func (h *fakeWorkerHost) actorJobEnded(job string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.jobsEnded = append(h.jobsEnded, job)
}

func (h *fakeWorkerHost) reportActorDied(req *wire.ActorDiedRequest) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deaths = append(h.deaths, *req)
}

func (h *fakeWorkerHost) spawned() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.procs)
}

const (
	fakeBinHash = "abababababababababababababababababababababababababababababababab"
	fakePython  = "/opt/py/bin/python3"       // the fake pool's --python
	fakePyPkg   = "/cache/nodeup/python/0123" // where its nodeup package lies
)

// newFakePool is a worker pool on a fake host whose processes register
// themselves (addr "w-<pid>") as soon as they start; the job binary
// fakeBinHash is in the cache.
func newFakePool(t *testing.T) (*workerPool, *fakeWorkerHost) {
	t.Helper()
	h := &fakeWorkerHost{}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	dir := t.TempDir()
	var p *workerPool
	spawn := func(argv []string, env []string, dir string, out *os.File) (process, error) {
		if bin := argv[0]; bin != fakePython && filepath.Base(bin) != fakeBinHash {
			t.Errorf("spawned %s, want the cached binary %s or %s", bin, fakeBinHash, fakePython)
		}
		h.mu.Lock()
		proc := &fakeProc{pid: 1000 + len(h.procs), argv: argv, env: env, dir: dir, exit: make(chan error, 1)}
		h.procs = append(h.procs, proc)
		h.mu.Unlock()
		go func() { // the worker's RPC server comes up
			_ = p.registered(&wire.WorkerRegisterRequest{WorkerID: proc.getenv(wire.EnvWorkerID), Addr: "w-" + proc.getenv(wire.EnvWorkerID)})
		}()
		return proc, nil
	}
	p = newWorkerPool(h, workerPoolConfig{binDir: filepath.Join(dir, "bin"), logDir: filepath.Join(dir, "logs"),
		selfAddr: "self:1", nodeName: "n1", nodeEnv: []string{wire.EnvNodeName + "=n1"}, spawn: spawn,
		python: fakePython, pythonPath: func() (string, error) { return fakePyPkg, nil }})
	if err := os.MkdirAll(p.binDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.binDir(), fakeBinHash), []byte("bin"), 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stopAll()
		h.cancel()
		h.wg.Wait()
	})
	return p, h
}

func leaseFor(job string) *wire.LeaseRequest {
	return &wire.LeaseRequest{JobID: job, BinaryHash: fakeBinHash, BinaryNode: "self:1"}
}

// The pool keeps one task worker per job: a second lease reuses it, another
// job gets its own, a job's end kills its worker and refuses later leases,
// and a worker that crashed is replaced on the next lease after its leases
// went back to the scheduler. Each process gets the node's and its job's
// variables.
func TestWorkerPoolPerJobOnFakeHost(t *testing.T) {
	p, h := newFakePool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a1, err := p.worker(ctx, leaseFor("jobA"), nil)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := p.worker(ctx, leaseFor("jobA"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 || h.spawned() != 1 {
		t.Fatalf("a second lease of job A: worker %s then %s, %d processes started; want one reused", a1.id, a2.id, h.spawned())
	}
	if a1.addr != "w-"+a1.id {
		t.Fatalf("worker address %q, want the one it registered", a1.addr)
	}
	procA := h.procs[0]
	if got := procA.getenv(wire.EnvJobID); got != "jobA" {
		t.Errorf("worker env %s=%q, want jobA", wire.EnvJobID, got)
	}
	if got := procA.getenv(wire.EnvNodeName); got != "n1" {
		t.Errorf("worker env %s=%q, want the node's n1", wire.EnvNodeName, got)
	}

	b1, err := p.worker(ctx, leaseFor("jobB"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b1 == a1 || h.spawned() != 2 {
		t.Fatalf("job B shares job A's worker or started %d processes, want 2", h.spawned())
	}

	p.stopJob("jobA")
	if !exited(a1) || !a1.stopping.Load() {
		t.Fatal("job A's worker still runs after stopJob")
	}
	if _, err := p.worker(ctx, leaseFor("jobA"), nil); err == nil || !strings.Contains(err.Error(), "has finished") {
		t.Fatalf("a lease of the finished job A: %v, want an error saying it has finished", err)
	}
	if h.spawned() != 2 {
		t.Fatalf("a finished job's lease started a process (%d started)", h.spawned())
	}

	h.procs[1].exit <- errors.New("exit status 2") // job B's worker crashes
	<-b1.handled
	h.mu.Lock()
	released := slices.Clone(h.released)
	h.mu.Unlock()
	if !slices.Contains(released, b1.id) {
		t.Fatalf("the crashed worker's leases were not released: released %v", released)
	}
	b2, err := p.worker(ctx, leaseFor("jobB"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b2 == b1 || h.spawned() != 3 {
		t.Fatalf("after job B's worker crashed: worker %s (was %s), %d processes; want a new one", b2.id, b1.id, h.spawned())
	}
}

// A binary the node should hold but does not is an error and starts
// nothing; so is a job ID that could name a path.
func TestWorkerPoolRefusesWithoutBinary(t *testing.T) {
	p, h := newFakePool(t)
	ctx := context.Background()
	req := leaseFor("jobC")
	req.BinaryHash = strings.Repeat("cd", 32)
	if _, err := p.worker(ctx, req, nil); err == nil || !strings.Contains(err.Error(), "not on this node") {
		t.Fatalf("a lease whose binary is missing: %v, want 'not on this node'", err)
	}
	p.mu.Lock()
	_, err := p.start(procSpec{job: "../x", binHash: fakeBinHash})
	p.mu.Unlock()
	if err == nil {
		t.Fatal("a job ID with a path in it started a worker")
	}
	if h.spawned() != 0 {
		t.Fatalf("%d processes started, want none", h.spawned())
	}
}

// An actor's worker: a crash releases its lease, ends its incarnation's job
// and reports the death with the exit; a stop reports it as killed; a stale
// incarnation whose job lives on elsewhere ends with neither.
func TestWorkerPoolActorEndsOnFakeHost(t *testing.T) {
	p, h := newFakePool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := func(id string, inc int, lease uint64) *workerProc {
		t.Helper()
		w, err := p.startActor(procSpec{job: actorJobID(id, inc), actor: id, binHash: fakeBinHash}, inc, lease)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := p.runningActor(ctx, id, inc); err != nil || got != w {
			t.Fatalf("running actor %s: %v, %v; want its worker", id, got, err)
		}
		return w
	}
	deaths := func() []wire.ActorDiedRequest {
		h.mu.Lock()
		defer h.mu.Unlock()
		return slices.Clone(h.deaths)
	}

	w := start("crash", 0, 7)
	h.procs[len(h.procs)-1].exit <- errors.New("exit status 3")
	testutil.Until(t, 5*time.Second, "the crash reported", func() error {
		if len(deaths()) != 1 {
			return errors.New("no report yet")
		}
		return nil
	})
	<-w.handled
	d := deaths()[0]
	if d.ActorID != "crash" || d.Incarnation != 0 || !strings.Contains(d.Cause, "exit status 3") || !strings.Contains(d.Cause, "node n1") {
		t.Fatalf("crash report %+v, want actor crash incarnation 0, cause naming the exit and node n1", d)
	}
	h.mu.Lock()
	leases, ended := slices.Clone(h.leases), slices.Clone(h.jobsEnded)
	h.mu.Unlock()
	if !slices.Equal(leases, []uint64{7}) || !slices.Equal(ended, []string{actorJobID("crash", 0)}) {
		t.Fatalf("after the crash: leases released %v, jobs ended %v", leases, ended)
	}

	start("killed", 2, 8)
	p.stopActor("killed")
	testutil.Until(t, 5*time.Second, "the stop reported", func() error {
		if len(deaths()) != 2 {
			return errors.New("no report yet")
		}
		return nil
	})
	if d := deaths()[1]; d.ActorID != "killed" || !strings.Contains(d.Cause, "it was killed") {
		t.Fatalf("stop report %+v, want a cause saying it was killed", d)
	}

	// A newer incarnation's start stops the older one here first.
	old := start("moved", 0, 9)
	if got, err := p.runningActor(ctx, "moved", 1); err != nil || got != nil {
		t.Fatalf("incarnation 1 while 0 runs: %v, %v; want none after stopping 0", got, err)
	}
	if !exited(old) {
		t.Fatal("the older incarnation still runs")
	}

	start("stale", 0, 10)
	p.stopStale(wire.StaleActor{ActorHeld: wire.ActorHeld{ID: "stale", Incarnation: 0}, JobLives: true})
	h.mu.Lock()
	ended = slices.Clone(h.jobsEnded)
	h.mu.Unlock()
	if slices.Contains(ended, actorJobID("stale", 0)) {
		t.Fatalf("a stale incarnation whose job lives on ended its job: %v", ended)
	}
	for _, d := range deaths() {
		if d.ActorID == "stale" {
			t.Fatalf("a stale incarnation was reported dead: %+v", d)
		}
	}
	if held := p.heldActors(); len(held) != 0 {
		t.Fatalf("actors still held: %v", held)
	}
}

// A Python job's lease starts `<--python> -m nodeup.worker` with the node's
// nodeup package first on PYTHONPATH, fetches no binary (the job has none),
// and runs in a process that serves no other lease (one interpreter lock
// per process): concurrent leases get processes of their own, and a lease
// after one ended reuses its idle process.
func TestWorkerPoolPythonJobOnFakeHost(t *testing.T) {
	t.Setenv("PYTHONPATH", "/user/site")
	p, h := newFakePool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &wire.LeaseRequest{JobID: "pyjob", Language: wire.LanguagePython}
	w1, err := p.worker(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Until leaseWorker ties the lease to w1, w1 is reserved: busy.
	w2, err := p.worker(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w1 == w2 || h.spawned() != 2 {
		t.Fatalf("two concurrent leases of the Python job: %d processes started, want 2", h.spawned())
	}
	h.setLeases(w1.id, 1) // the local scheduler now holds w1's lease
	p.unreserve(w1)
	p.unreserve(w2) // w2's lease was never granted
	w3, err := p.worker(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w3 != w2 || h.spawned() != 2 {
		t.Fatalf("a lease while w1 serves one: got a new process (%d started), want idle w2 reused", h.spawned())
	}
	p.unreserve(w3)
	h.setLeases(w2.id, 1)
	h.setLeases(w1.id, 0) // w1's lease was returned
	w4, err := p.worker(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w4 != w1 || h.spawned() != 2 {
		t.Fatalf("a lease after w1's ended: %d processes started, want w1 reused", h.spawned())
	}
	p.stopJob("pyjob")
	if !exited(w1) || !exited(w2) {
		t.Fatal("the Python job's processes run on after its end")
	}
	proc := h.procs[0]
	if want := []string{fakePython, "-m", "nodeup.worker"}; !slices.Equal(proc.argv, want) {
		t.Fatalf("Python worker started as %q, want %q", proc.argv, want)
	}
	if got, want := proc.getenv("PYTHONPATH"), fakePyPkg+string(os.PathListSeparator)+"/user/site"; got != want {
		t.Errorf("PYTHONPATH=%q, want the node's package first: %q", got, want)
	}
	if got := proc.getenv(wire.EnvJobID); got != "pyjob" {
		t.Errorf("worker env %s=%q, want pyjob", wire.EnvJobID, got)
	}
	// A Go job beside it still runs its binary.
	if _, err := p.worker(ctx, leaseFor("gojob"), nil); err != nil {
		t.Fatal(err)
	}
	if got := h.procs[2].argv; len(got) != 1 || filepath.Base(got[0]) != fakeBinHash {
		t.Fatalf("Go worker started as %q, want its cached binary alone", got)
	}
}

// A job's language is checked where it arrives: a Python job sends no
// binary hash, a Go job a valid one, and no other language is accepted.
func TestCheckJobLanguage(t *testing.T) {
	for _, tc := range []struct {
		lang, hash string
		ok         bool
	}{
		{wire.LanguageGo, fakeBinHash, true},
		{wire.LanguageGo, "", false},
		{wire.LanguagePython, "", true},
		{wire.LanguagePython, fakeBinHash, false},
		{"ruby", "", false},
	} {
		err := checkJob("job1", tc.lang, tc.hash)
		if (err == nil) != tc.ok {
			t.Errorf("checkJob(lang %q, hash %q) = %v, want ok=%v", tc.lang, tc.hash, err, tc.ok)
		}
		var re *rpc.Error
		if err != nil && (!errors.As(err, &re) || re.Code != wire.CodeBadInput) {
			t.Errorf("checkJob(lang %q, hash %q) = %v, want a %s error", tc.lang, tc.hash, err, wire.CodeBadInput)
		}
	}
}

// A lease whose runtime env has a working dir starts its worker process in
// the dir the host unpacked, holding one pin while it lives: a second
// lease of the same env reuses the process and pins nothing more, a lease
// with another working dir gets a process of its own, and a process's exit
// (the job's end) lets go of its dir.
func TestWorkerPoolWorkingDirOnFakeHost(t *testing.T) {
	p, h := newFakePool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	refA := wire.FormatWorkingDirRef(strings.Repeat("a", 64), "n1:7370")
	refB := wire.FormatWorkingDirRef(strings.Repeat("b", 64), "n1:7370")
	lease := func(ref string) *wire.LeaseRequest {
		req := leaseFor("jobA")
		req.EnvVars = map[string]string{wire.EnvWorkingDir: ref}
		return req
	}
	w1, err := p.worker(ctx, lease(refA), nil)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := p.worker(ctx, lease(refA), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w1 != w2 || h.spawned() != 1 {
		t.Fatalf("two leases of one working dir: %d processes, want one shared", h.spawned())
	}
	if got := h.procs[0].dir; got != "/wd/"+refA {
		t.Fatalf("worker started in %q, want the unpacked /wd/%s", got, refA)
	}
	if got := h.pins(refA); got != 1 {
		t.Fatalf("working dir A pinned %d times by one process, want 1", got)
	}
	w3, err := p.worker(ctx, lease(refB), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w3 == w1 || h.procs[1].dir != "/wd/"+refB {
		t.Fatalf("a lease of working dir B reused A's process or started in %q", h.procs[1].dir)
	}
	if _, err := p.worker(ctx, lease("not-a-ref"), nil); err == nil || !strings.Contains(err.Error(), "working dir") {
		t.Fatalf("a lease with a malformed working dir ref: %v, want an error naming the working dir", err)
	}
	p.stopJob("jobA")
	<-w1.handled
	<-w3.handled
	if a, b := h.pins(refA), h.pins(refB); a != 0 || b != 0 {
		t.Fatalf("after the job ended the working dirs hold %d and %d pins, want 0", a, b)
	}
}
