package check

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nodeup/nodeup/worker"
)

// RunConfig says where and how to run a workload.
type RunConfig struct {
	Address string // RPC address (host:port) of the node the driver connects to
	// WantNodes is how many alive nodes to wait for (up to 30 s) before
	// generating the workload; 0 takes the nodes as they are.
	WantNodes int
	Seed      int64
	Scale     Scale
	Dir       string       // where the trace file goes
	Logger    *slog.Logger // the SDK's and the runner's log; nil discards
	// PhaseTimeout bounds each phase (default 90 s): work still pending
	// then resolves with the deadline error, which the checker reports.
	PhaseTimeout time.Duration
	// IdleTimeout is how long nodes may take to report all CPU, GPU and
	// slot free after a phase's work ended (default 10 s); after it, each
	// node still short is recorded as a Leak.
	IdleTimeout time.Duration
}

// Outcome is a finished run: the plan, the nodes (for Config), the trace
// file and the history read back from it.
type Outcome struct {
	Plan    Plan
	Nodes   []Node
	Trace   string
	History History
}

// Run connects to the cluster at rc.Address as a driver (worker.Init, with
// $CHECK_TRACE in the job's runtime env), generates the workload for
// rc.Seed on the cluster's alive nodes, runs it phase by phase, shuts the
// job down and reads the history back. Only one Run may be active in a
// process (worker.Init is process-wide).
func Run(ctx context.Context, rc RunConfig) (*Outcome, error) {
	if rc.Logger == nil {
		rc.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if rc.PhaseTimeout == 0 {
		rc.PhaseTimeout = 90 * time.Second
	}
	if rc.IdleTimeout == 0 {
		rc.IdleTimeout = 10 * time.Second
	}
	trace := filepath.Join(rc.Dir, "trace.jsonl")
	env := worker.RuntimeEnv{EnvVars: map[string]string{EnvTrace: trace}}
	if err := worker.Init(ctx, worker.Address(rc.Address), worker.Logger(rc.Logger), worker.JobRuntimeEnv(env)); err != nil {
		return nil, fmt.Errorf("check: connect to %s: %w", rc.Address, err)
	}
	out, err := runPlan(ctx, rc, trace)
	worker.Shutdown()
	if out == nil {
		return nil, err
	}
	h, rerr := ReadHistory(trace)
	out.History = h
	return out, errors.Join(err, rerr)
}

func runPlan(ctx context.Context, rc RunConfig, trace string) (*Outcome, error) {
	infos, err := waitNodes(ctx, rc.WantNodes)
	if err != nil {
		return nil, err
	}
	var nodes []ClusterNode
	var cfgNodes []Node
	for _, n := range infos {
		if n.Alive {
			nodes = append(nodes, ClusterNode{ID: n.NodeID, Name: n.NodeName, Total: n.Total, Labels: n.Labels})
			cfgNodes = append(cfgNodes, Node{Name: n.NodeName, Total: n.Total, Labels: n.Labels})
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	plan := Generate(rc.Seed, nodes, worker.NodeName(), rc.Scale)
	out := &Outcome{Plan: plan, Nodes: cfgNodes, Trace: trace}
	r := &runner{rc: rc, rec: NewRecorder(trace), nodes: nodes, refs: map[string]worker.Ref[int]{}}
	r.record(Event{Kind: Cluster, Nodes: cfgNodes})
	for _, ph := range plan.Phases {
		rc.Logger.Info("check: phase", "phase", ph.Name, "ops", len(ph.Ops), "seed", rc.Seed)
		r.phase(ctx, ph)
		if ctx.Err() != nil {
			break
		}
	}
	return out, errors.Join(ctx.Err(), r.err())
}

// waitNodes polls the cluster view until want nodes are alive (30 s at
// most) and returns it.
func waitNodes(ctx context.Context, want int) ([]worker.NodeInfo, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		infos, err := worker.Nodes(ctx)
		alive := 0
		for _, n := range infos {
			if n.Alive {
				alive++
			}
		}
		if err == nil && alive >= want {
			return infos, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("check: %d of %d nodes alive after 30s (%v)", alive, want, err)
		}
		pause(ctx, 50*time.Millisecond)
	}
}

// runner executes a plan and records what the driver sees.
type runner struct {
	rc    RunConfig
	rec   *Recorder
	nodes []ClusterNode
	mu    sync.Mutex
	refs  map[string]worker.Ref[int]
	errs  []error // recording failures: the history is incomplete
}

func (r *runner) record(e Event) {
	if err := r.rec.Record(e); err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}
}

func (r *runner) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.errs...)
}

// ref returns the ref of an already submitted task; a plan that names one
// not submitted yet is a generator bug, recorded as a runner error.
func (r *runner) ref(id string) worker.Ref[int] {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, ok := r.refs[id]
	if !ok {
		r.errs = append(r.errs, fmt.Errorf("check: the plan uses task %s before submitting it", id))
	}
	return ref
}

// phaseRun is one phase in progress.
type phaseRun struct {
	r       *runner
	name    string
	signals []worker.Signal
	wg      sync.WaitGroup
}

// phase runs ph's ops at their times, waits for all of them, then for the
// nodes to be idle.
func (r *runner) phase(ctx context.Context, ph PhasePlan) {
	pctx, cancel := context.WithTimeout(ctx, r.rc.PhaseTimeout)
	defer cancel()
	p := &phaseRun{r: r, name: ph.Name}
	r.record(Event{Kind: Phase, Phase: ph.Name})
	for i := 0; i < ph.Signals; i++ {
		s, err := worker.NewSignal(pctx)
		if err != nil {
			r.record(Event{Kind: Leak, Detail: fmt.Sprintf("phase %s: create signal: %v", ph.Name, err)})
		}
		p.signals = append(p.signals, s)
	}
	start := time.Now()
	for _, op := range ph.Ops {
		pause(pctx, time.Until(start.Add(op.At))) // workload pacing, not synchronization
		p.run(pctx, op)
	}
	p.wg.Wait()
	r.quiesce(ctx, ph.Name)
}

// run starts one op; tasks are submitted here (Remote does not block),
// actors, groups and signal sends run in goroutines.
func (p *phaseRun) run(ctx context.Context, op Op) {
	switch {
	case op.Task != nil:
		p.submit(ctx, *op.Task, nil, &p.wg)
		if op.Task.AwaitStart {
			p.r.awaitStart(ctx, op.Task.ID)
		}
	case op.Actor != nil:
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if h, ok := p.createActor(ctx, *op.Actor, nil); ok {
				pause(ctx, op.Actor.Life)
				p.r.kill(ctx, op.Actor.ID, h)
			}
		}()
	case op.Group != nil:
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.group(ctx, *op.Group)
		}()
	case op.Send > 0:
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := p.signals[op.Send-1].Send(ctx, false); err != nil {
				p.r.rc.Logger.Warn("check: send signal", "signal", op.Send, "err", err)
			}
		}()
	}
}

// submit records and submits one task, and resolves its ref in the
// background (wg), recording the result.
func (p *phaseRun) submit(ctx context.Context, tp TaskPlan, pg *worker.PlacementGroup, wg *sync.WaitGroup) {
	strategy, opts := p.r.options(tp.Kind, tp.Node, tp.Zone, tp.Bundle, tp.Demand, pg)
	opts = append(opts, worker.Name(tp.ID), worker.MaxRetries(tp.MaxRetries), worker.CPUs(tp.Demand["CPU"]))
	args := TaskArgs{ID: tp.ID, Demand: tp.Demand, Strategy: strategy, DurMs: tp.Dur.Milliseconds(), Crash: tp.Crash, UseWait: tp.UseWait}
	for _, w := range tp.Waits {
		args.Waits = append(args.Waits, p.r.ref(w))
	}
	if tp.Signal > 0 {
		args.HasSignal, args.Signal = true, p.signals[tp.Signal-1]
	}
	ev := Event{Kind: Submit, Task: tp.ID, Demand: tp.Demand, Strategy: strategy, Dur: tp.Dur.Seconds(), Burst: tp.Burst, Phase: p.name,
		WC: tp.WC, MaxRetries: tp.MaxRetries}
	if tp.Dep != "" {
		ev.Deps = []string{tp.Dep}
	}
	p.r.record(ev)
	f, _ := stepTask.Options(opts...) // a bad option fails the call's Get, where the history records it
	var ref worker.Ref[int]
	if tp.Dep != "" {
		ref = f.RemoteArgs(ctx, worker.Val(args), p.r.ref(tp.Dep))
	} else {
		ref = f.Remote(ctx, args, 0)
	}
	p.r.mu.Lock()
	p.r.refs[tp.ID] = ref
	p.r.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := ref.Get(ctx)
		p.r.result(tp.ID, err)
	}()
}

// options turns a plan's placement into SDK options and the strategy
// string the history records.
func (r *runner) options(kind string, node int, zone string, bundle int, demand map[string]float64, pg *worker.PlacementGroup) (string, []worker.Option) {
	var opts []worker.Option
	if g := demand["GPU"]; g > 0 {
		opts = append(opts, worker.GPUs(g))
	}
	custom := map[string]float64{}
	for k, v := range demand {
		if k != "CPU" && k != "GPU" {
			custom[k] = v
		}
	}
	if len(custom) > 0 {
		opts = append(opts, worker.Resources(custom))
	}
	switch kind {
	case "spread":
		return "spread", append(opts, worker.Spread())
	case "affinity":
		n := r.nodes[node]
		return "affinity:" + n.Name, append(opts, worker.NodeAffinity(n.ID, false))
	case "labels":
		return "labels:zone=" + zone, append(opts, worker.NodeLabels(worker.LabelSelector{"zone": worker.In(zone)}))
	case "pg":
		return fmt.Sprintf("pg:%s:%d", pg.ID(), bundle), append(opts, worker.InPlacementGroup(pg, bundle))
	}
	return "default", opts
}

// result records how a task's (or actor's, or group's) ref resolved.
func (r *runner) result(id string, err error) {
	ev := Event{Kind: Result, Task: id}
	if err != nil {
		ev.Err, ev.ErrKind = err.Error(), ErrOther
		var crashed *worker.WorkerCrashedError
		var failed *worker.TaskError
		switch {
		case errors.As(err, &crashed):
			ev.ErrKind, ev.Attempts = ErrCrashed, crashed.Attempts
		case errors.As(err, &failed):
			ev.ErrKind = ErrTask
		}
	}
	r.record(ev)
}

// awaitStart polls the trace until id has started (or 30 s pass), so the
// next op is submitted only then.
func (r *runner) awaitStart(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		h, _ := ReadHistory(r.rec.Path())
		for _, e := range h {
			if e.Kind == Start && e.Task == id {
				return
			}
		}
		pause(ctx, 20*time.Millisecond)
	}
	r.rc.Logger.Warn("check: task did not start within 30s", "task", id)
}

// createActor records, creates and pings an actor; false if it failed
// (the failure is recorded as its result).
func (p *phaseRun) createActor(ctx context.Context, ap ActorPlan, pg *worker.PlacementGroup) (worker.ActorHandle[probe], bool) {
	strategy, opts := p.r.options(ap.Kind, ap.Node, "", ap.Bundle, ap.Demand, pg)
	if c := ap.Demand["CPU"]; c > 0 {
		opts = append(opts, worker.CPUs(c))
	}
	p.r.record(Event{Kind: Submit, Task: ap.ID, Actor: true, Demand: ap.Demand, Strategy: strategy, Phase: p.name})
	class, _ := probeActor.Options(opts...) // a bad option fails Remote, where the history records it
	h, err := class.Remote(ctx, ActorArgs{ID: ap.ID, Demand: ap.Demand, Strategy: strategy})
	if err == nil {
		_, err = probePing.Remote(ctx, h).Get(ctx)
	}
	p.r.result(ap.ID, err)
	if err != nil {
		p.r.kill(ctx, ap.ID, h)
		return h, false
	}
	return h, true
}

// kill kills an actor for good, recorded before and after.
func (r *runner) kill(ctx context.Context, id string, h worker.ActorHandle[probe]) {
	if h.ID() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	r.record(Event{Kind: Kill, Task: id})
	if err := worker.Kill(ctx, h, true); err != nil {
		r.rc.Logger.Warn("check: kill actor", "actor", id, "err", err)
	}
	r.record(Event{Kind: Killed, Task: id})
}

// group creates a placement group, waits until it is ready, records where
// its bundles went, runs its work, kills its actors and removes it.
func (p *phaseRun) group(ctx context.Context, gp GroupPlan) {
	r := p.r
	r.record(Event{Kind: Submit, Task: gp.ID, Phase: p.name, Strategy: "pg-create"})
	pg, err := worker.CreatePlacementGroup(ctx, gp.Bundles, gp.Strategy)
	if err != nil {
		r.result(gp.ID, err)
		return
	}
	bundles := make([]Bundle, len(gp.Bundles))
	for i, b := range gp.Bundles {
		bundles[i] = Bundle{Index: i, Demand: b}
	}
	r.record(Event{Kind: PGCreate, Group: pg.ID(), PGStrategy: gp.Strategy, Bundles: bundles, PGIdle: gp.Idle})
	defer r.remove(ctx, pg)
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = pg.Ready(rctx)
	var info worker.PlacementGroupInfo
	if err == nil {
		info, err = pg.Info(ctx)
	}
	r.result(gp.ID, err)
	if err != nil {
		return
	}
	for _, b := range info.Bundles {
		if b.Index >= 0 && b.Index < len(bundles) {
			bundles[b.Index].Node = b.NodeName
		}
	}
	r.record(Event{Kind: PGReady, Group: pg.ID(), PGStrategy: gp.Strategy, Bundles: bundles})
	p.groupWork(ctx, gp, pg)
}

// groupWork runs a ready group's actors and tasks, waits for the tasks,
// then kills the actors.
func (p *phaseRun) groupWork(ctx context.Context, gp GroupPlan, pg *worker.PlacementGroup) {
	var actors sync.WaitGroup
	handles := make([]worker.ActorHandle[probe], len(gp.Actors))
	for i, ap := range gp.Actors {
		actors.Add(1)
		go func() {
			defer actors.Done()
			handles[i], _ = p.createActor(ctx, ap, pg)
		}()
	}
	var tasks sync.WaitGroup
	for _, tp := range gp.Tasks {
		p.submit(ctx, tp, pg, &tasks)
	}
	tasks.Wait()
	actors.Wait()
	for i, ap := range gp.Actors {
		p.r.kill(ctx, ap.ID, handles[i])
	}
}

// remove removes a group, recorded before and after.
func (r *runner) remove(ctx context.Context, pg *worker.PlacementGroup) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r.record(Event{Kind: PGRemove, Group: pg.ID()})
	if err := pg.Remove(ctx); err != nil {
		r.rc.Logger.Warn("check: remove placement group", "group", pg.ID(), "err", err)
	}
	r.record(Event{Kind: PGRemoved, Group: pg.ID()})
}

// checked are the resources quiesce waits to see free again.
var checked = []string{"CPU", "GPU", Slot}

// quiesce polls the nodes until every alive node reports all its CPU, GPU
// and slots free, or IdleTimeout passes: then each node still short is
// recorded as a Leak.
func (r *runner) quiesce(ctx context.Context, phase string) {
	deadline := time.Now().Add(r.rc.IdleTimeout)
	for {
		infos, err := worker.Nodes(ctx)
		short := map[string]string{}
		for _, n := range infos {
			if d := inUse(n.Total, n.Available); n.Alive && d != "" {
				short[n.NodeName] = d
			}
		}
		if err == nil && len(short) == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, name := range sortedKeys(short) {
				r.record(Event{Kind: Leak, Node: name, Phase: phase,
					Detail: fmt.Sprintf("node %s still has %s in use %s after the work of phase %s ended", name, short[name], r.rc.IdleTimeout, phase)})
			}
			return
		}
		pause(ctx, 100*time.Millisecond)
	}
}

// inUse says which checked resources are not all free ("CPU 1 of 2"), or
// "" when all are.
func inUse(total, avail map[string]float64) string {
	var parts []string
	for _, k := range checked {
		if used := total[k] - avail[k]; math.Abs(used) > eps {
			parts = append(parts, fmt.Sprintf("%s %g of %g", k, used, total[k]))
		}
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
