package check

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Slot is the custom resource the workload's nodes offer (a scarce one:
// 1 or 2 per node) so that over-commit of custom resources shows.
const Slot = "slot"

// Scale sets a workload's size.
type Scale struct {
	MixedPerCPU     int           // mixed-phase operations per CPU of the cluster
	Window          time.Duration // mixed-phase operations are submitted over this long
	MakespanPerSlot int           // makespan phase: tasks per 1-CPU slot of the cluster
	MakespanDur     time.Duration // makespan phase: each task's run time
	SpreadBursts    int           // SPREAD bursts (clusters of 2 nodes or more)
	CrashRounds     int           // crash rounds (retry budget checks)
	// GroupRounds is how many times the placement-group phases run: one
	// SPREAD, one STRICT_SPREAD and one PACK group each alone on idle
	// nodes, then one of each while 1-CPU tasks load the cluster.
	GroupRounds int
}

// ShortScale fits CI: a few seconds per phase.
var ShortScale = Scale{MixedPerCPU: 4, Window: 3 * time.Second, MakespanPerSlot: 3, MakespanDur: 1500 * time.Millisecond,
	SpreadBursts: 2, CrashRounds: 1, GroupRounds: 1}

// LongScale is one iteration of the long run.
var LongScale = Scale{MixedPerCPU: 8, Window: 8 * time.Second, MakespanPerSlot: 4, MakespanDur: 1500 * time.Millisecond,
	SpreadBursts: 3, CrashRounds: 2, GroupRounds: 1}

// ClusterNode is one node as the generator sees it.
type ClusterNode struct {
	ID     string
	Name   string
	Total  map[string]float64
	Labels map[string]string
}

// TaskPlan is one task to submit.
type TaskPlan struct {
	ID         string
	Demand     map[string]float64 // CPU always set (0 allowed); GPU and Slot when asked
	Kind       string             // "default", "spread", "affinity", "labels", "pg"
	Node       int                // affinity: index into the cluster's nodes
	Zone       string             // labels: the zone label value required
	Bundle     int                // pg: bundle index, -1 any
	Dur        time.Duration
	Crash      bool // exits its process on its first attempt
	MaxRetries int
	Dep        string   // task whose result is a direct argument
	Waits      []string // tasks whose refs it Gets while running
	UseWait    bool     // worker.Wait instead of Get
	Signal     int      // 1-based index of a phase signal it waits on (0: none)
	Burst      string
	WC         bool
	AwaitStart bool // the runner waits for its Start event before the next op
}

// ActorPlan is one actor to create, ping, keep for Life, and kill.
type ActorPlan struct {
	ID     string
	Demand map[string]float64
	Kind   string // "default", "spread", "affinity", "pg"
	Node   int
	Bundle int
	Life   time.Duration
}

// GroupPlan is one placement group, the work run in it, then its removal.
type GroupPlan struct {
	ID       string
	Strategy string
	Bundles  []map[string]float64
	Tasks    []TaskPlan
	Actors   []ActorPlan
	// Idle: the group is created alone in its phase, after the phase
	// before it ended and the nodes reported all resources free, so
	// SPREAD and PACK must place it as on an idle cluster (checkPlacement).
	Idle bool
}

// Op is one step of a phase, At after the phase began.
type Op struct {
	At    time.Duration
	Task  *TaskPlan
	Actor *ActorPlan
	Group *GroupPlan
	Send  int // 1-based signal index to send (without clear)
}

// PhasePlan is a group of ops; the runner waits for all of them and for
// the nodes to be idle again before the next phase.
type PhasePlan struct {
	Name    string
	Signals int
	Ops     []Op
}

// Plan is a whole seeded workload.
type Plan struct {
	Seed   int64
	Phases []PhasePlan
}

// gen holds the generator's state.
type gen struct {
	r      *rand.Rand
	nodes  []ClusterNode
	driver int // index of the driver's node
	next   int
}

// Generate builds the workload for seed on the given nodes (sorted by name
// first, so a seed means the same plan on the same cluster shape). driver
// is the name of the node the driver is connected to.
func Generate(seed int64, nodes []ClusterNode, driver string, sc Scale) Plan {
	ns := append([]ClusterNode(nil), nodes...)
	sort.Slice(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
	g := &gen{r: rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)), nodes: ns}
	for i, n := range ns {
		if n.Name == driver {
			g.driver = i
		}
	}
	p := Plan{Seed: seed, Phases: []PhasePlan{g.warmup(), g.mixed(sc)}}
	p.Phases = append(p.Phases, g.makespan(sc))
	if len(ns) > 1 {
		for b := 1; b <= sc.SpreadBursts; b++ {
			p.Phases = append(p.Phases, g.spread(b))
		}
	}
	for r := 1; r <= sc.GroupRounds; r++ {
		for _, st := range []string{"SPREAD", "STRICT_SPREAD", "PACK"} {
			if ph, ok := g.idleGroup(r, st); ok {
				p.Phases = append(p.Phases, ph)
			}
		}
		p.Phases = append(p.Phases, g.loadedGroups(r))
	}
	for r := 1; r <= sc.CrashRounds; r++ {
		p.Phases = append(p.Phases, g.crashRound(r))
	}
	return p
}

func (g *gen) id(prefix string) string {
	g.next++
	return fmt.Sprintf("%s%d", prefix, g.next)
}

func (g *gen) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(g.r.Int64N(int64(hi-lo)+1))
}

func (g *gen) pick(vals ...float64) float64 { return vals[g.r.IntN(len(vals))] }

// most returns the largest amount of resource r on one node.
func (g *gen) most(r string) float64 {
	m := 0.0
	for _, n := range g.nodes {
		m = max(m, n.Total[r])
	}
	return m
}

// fits lists the nodes whose totals cover demand.
func (g *gen) fits(demand map[string]float64) []int {
	var out []int
	for i, n := range g.nodes {
		if coversAll(n.Total, demand) {
			out = append(out, i)
		}
	}
	return out
}

func coversAll(total, demand map[string]float64) bool {
	for k, v := range demand {
		if total[k] < v-eps {
			return false
		}
	}
	return true
}

func (g *gen) totalCPU() float64 {
	c := 0.0
	for _, n := range g.nodes {
		c += n.Total["CPU"]
	}
	return c
}

// warmup starts the job's worker process on every node (one short task
// pinned to each), so later phases do not time process starts.
func (g *gen) warmup() PhasePlan {
	ph := PhasePlan{Name: "warmup"}
	for i := range g.nodes {
		ph.Ops = append(ph.Ops, Op{Task: &TaskPlan{ID: g.id("warm"), Demand: map[string]float64{"CPU": 0.5}, Kind: "affinity", Node: i, MaxRetries: 3}})
	}
	return ph
}

// mixed is the randomized phase: every kind of work at random times.
func (g *gen) mixed(sc Scale) PhasePlan {
	ph := PhasePlan{Name: "mixed"}
	n := int(math.Ceil(float64(sc.MixedPerCPU) * g.totalCPU()))
	var plain []string
	type choice struct {
		weight int
		make   func(at time.Duration) []Op
	}
	choices := []choice{
		{30, func(at time.Duration) []Op { return g.plainTask(at, &plain) }},
		{12, func(at time.Duration) []Op { return g.slotGroup(at) }},
		{8, func(at time.Duration) []Op { return g.signalWaiters(at, &ph) }},
		{10, func(at time.Duration) []Op { return g.gpuTask(at) }},
		{5, func(at time.Duration) []Op { return g.simple(at, "spread", "sp") }},
		{8, func(at time.Duration) []Op { return g.affinityTask(at) }},
		{6, func(at time.Duration) []Op { return g.labelTask(at) }},
		{8, func(at time.Duration) []Op { return g.group(at) }},
		{8, func(at time.Duration) []Op { return g.actor(at) }},
		{5, func(at time.Duration) []Op { return g.crashTask(at) }},
	}
	total := 0
	for _, c := range choices {
		total += c.weight
	}
	// Offsets are drawn first and used in order, so a task's dependencies
	// and the refs it waits on are always submitted before it.
	ats := make([]time.Duration, n)
	for i := range ats {
		ats[i] = g.dur(0, sc.Window)
	}
	sort.Slice(ats, func(i, j int) bool { return ats[i] < ats[j] })
	for _, at := range ats {
		w := g.r.IntN(total)
		for _, c := range choices {
			if w -= c.weight; w < 0 {
				ph.Ops = append(ph.Ops, c.make(at)...)
				break
			}
		}
	}
	sort.SliceStable(ph.Ops, func(i, j int) bool { return ph.Ops[i].At < ph.Ops[j].At })
	return ph
}

func (g *gen) cpuDemand() float64 {
	if g.most("CPU") >= 2 {
		return g.pick(0.5, 1, 1, 1, 2)
	}
	return g.pick(0.5, 1)
}

// plainTask is a default-strategy CPU task, sometimes depending on an
// earlier one; it is subject to the work-conservation check.
func (g *gen) plainTask(at time.Duration, plain *[]string) []Op {
	t := &TaskPlan{ID: g.id("t"), Demand: map[string]float64{"CPU": g.cpuDemand()}, Kind: "default", Dur: g.dur(0, 2*time.Second), MaxRetries: 3, WC: true}
	if len(*plain) > 0 && g.r.IntN(4) == 0 {
		t.Dep = (*plain)[g.r.IntN(len(*plain))]
	}
	*plain = append(*plain, t.ID)
	return []Op{{At: at, Task: t}}
}

// slotGroup is 2 or 3 identical tasks holding a slot (same scheduling
// key), each blocking in Get (or Wait) on its own longer CPU task: the
// shape that over-commits a custom resource when a blocked task's lease
// runs another task.
func (g *gen) slotGroup(at time.Duration) []Op {
	amount := g.pick(1, 0.5)
	if g.most(Slot) < amount {
		return nil
	}
	var ops []Op
	useWait := g.r.IntN(2) == 0
	for k := 2 + g.r.IntN(2); k > 0; k-- {
		leaf := &TaskPlan{ID: g.id("l"), Demand: map[string]float64{"CPU": 0.5}, Kind: "default", Dur: g.dur(1500*time.Millisecond, 3*time.Second), MaxRetries: 3, WC: true}
		t := &TaskPlan{ID: g.id("s"), Demand: map[string]float64{"CPU": 1, Slot: amount}, Kind: "default", Dur: g.dur(200*time.Millisecond, time.Second),
			MaxRetries: 3, Waits: []string{leaf.ID}, UseWait: useWait, WC: true}
		ops = append(ops, Op{At: at, Task: leaf}, Op{At: at, Task: t})
	}
	return ops
}

// signalWaiters is 1 to 3 CPU tasks blocked on a new signal, sent later.
func (g *gen) signalWaiters(at time.Duration, ph *PhasePlan) []Op {
	ph.Signals++
	sig := ph.Signals
	ops := []Op{{At: at + g.dur(500*time.Millisecond, 2*time.Second), Send: sig}}
	for k := 1 + g.r.IntN(3); k > 0; k-- {
		ops = append(ops, Op{At: at, Task: &TaskPlan{ID: g.id("w"), Demand: map[string]float64{"CPU": g.pick(0.5, 1)}, Kind: "default",
			Dur: g.dur(0, time.Second), MaxRetries: 3, Signal: sig, WC: true}})
	}
	return ops
}

// gpuTask asks for a whole or fractional GPU.
func (g *gen) gpuTask(at time.Duration) []Op {
	most := g.most("GPU")
	if most < 1 {
		return nil
	}
	amount := g.pick(0.25, 0.5, 1)
	if most >= 2 && g.r.IntN(4) == 0 {
		amount = 2
	}
	return []Op{{At: at, Task: &TaskPlan{ID: g.id("g"), Demand: map[string]float64{"CPU": 0.5, "GPU": amount}, Kind: "default",
		Dur: g.dur(200*time.Millisecond, 1500*time.Millisecond), MaxRetries: 3}}}
}

func (g *gen) simple(at time.Duration, kind, prefix string) []Op {
	return []Op{{At: at, Task: &TaskPlan{ID: g.id(prefix), Demand: map[string]float64{"CPU": 1}, Kind: kind, Dur: g.dur(0, 1500*time.Millisecond), MaxRetries: 3}}}
}

// affinityTask is pinned (hard) to a random node, sometimes with a slot.
func (g *gen) affinityTask(at time.Duration) []Op {
	i := g.r.IntN(len(g.nodes))
	d := map[string]float64{"CPU": g.pick(0.5, 1)}
	if g.nodes[i].Total[Slot] >= 1 && g.r.IntN(3) == 0 {
		d[Slot] = 1
	}
	return []Op{{At: at, Task: &TaskPlan{ID: g.id("a"), Demand: d, Kind: "affinity", Node: i, Dur: g.dur(0, 1500*time.Millisecond), MaxRetries: 3}}}
}

// labelTask requires a zone label value some node has.
func (g *gen) labelTask(at time.Duration) []Op {
	zone := g.nodes[g.r.IntN(len(g.nodes))].Labels["zone"]
	if zone == "" {
		return nil
	}
	ops := g.simple(at, "labels", "z")
	ops[0].Task.Zone = zone
	return ops
}

// crashTask exits its worker process on its first attempt.
func (g *gen) crashTask(at time.Duration) []Op {
	return []Op{{At: at, Task: &TaskPlan{ID: g.id("c"), Demand: map[string]float64{"CPU": 1}, Kind: "default", Dur: g.dur(200*time.Millisecond, time.Second),
		Crash: true, MaxRetries: 3, WC: true}}}
}

// actor creates an actor holding nothing, a CPU, a slot or (part of) a
// GPU, placed by default, SPREAD or pinned to a node that fits it.
func (g *gen) actor(at time.Duration) []Op {
	demands := []map[string]float64{{}, {"CPU": 1}}
	if g.most(Slot) >= 1 {
		demands = append(demands, map[string]float64{Slot: 1})
	}
	if g.most("GPU") >= 1 {
		demands = append(demands, map[string]float64{"GPU": g.pick(0.5, 1)})
	}
	a := &ActorPlan{ID: g.id("A"), Demand: demands[g.r.IntN(len(demands))], Kind: []string{"default", "spread", "affinity"}[g.r.IntN(3)],
		Life: g.dur(500*time.Millisecond, 2*time.Second)}
	if a.Kind == "affinity" {
		fit := g.fits(a.Demand)
		a.Node = fit[g.r.IntN(len(fit))]
	}
	return []Op{{At: at, Actor: a}}
}

// group creates a placement group of 1 to 3 bundles ({CPU 1}, with a GPU
// half the time) under a random strategy the cluster can satisfy, runs a
// task per bundle (and sometimes one in any bundle, and an actor), then
// removes it.
func (g *gen) group(at time.Duration) []Op {
	st := []string{"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}[g.r.IntN(4)]
	withGPU := g.most("GPU") >= 1 && g.r.IntN(2) == 0
	shape := map[string]float64{"CPU": 1}
	if withGPU {
		shape["GPU"] = 1
	}
	limit := min(3, g.bundleLimit(st, shape))
	if limit == 0 {
		return nil
	}
	gp := &GroupPlan{ID: g.id("G"), Strategy: st}
	for i := 1 + g.r.IntN(limit); i > 0; i-- {
		gp.Bundles = append(gp.Bundles, shape)
	}
	actorIn := -1
	if g.r.IntN(3) == 0 {
		actorIn = g.r.IntN(len(gp.Bundles))
		a := ActorPlan{ID: g.id("A"), Demand: map[string]float64{}, Kind: "pg", Bundle: actorIn}
		if withGPU {
			a.Demand["GPU"] = 0.5
		}
		gp.Actors = append(gp.Actors, a)
	}
	for i := range gp.Bundles {
		d := map[string]float64{"CPU": g.pick(0.5, 1)}
		if withGPU {
			d["GPU"] = g.pick(0.5, 1)
			if i == actorIn {
				d["GPU"] = 0.5
			}
		}
		gp.Tasks = append(gp.Tasks, TaskPlan{ID: g.id("p"), Demand: d, Kind: "pg", Bundle: i, Dur: g.dur(200*time.Millisecond, 1200*time.Millisecond), MaxRetries: 3})
	}
	if g.r.IntN(3) == 0 {
		gp.Tasks = append(gp.Tasks, TaskPlan{ID: g.id("p"), Demand: map[string]float64{"CPU": 0.5}, Kind: "pg", Bundle: -1, Dur: g.dur(200*time.Millisecond, time.Second), MaxRetries: 3})
	}
	return []Op{{At: at, Group: gp}}
}

// bundleLimit is how many bundles of shape strategy st can place on the
// cluster's nodes when they are idle.
func (g *gen) bundleLimit(st string, shape map[string]float64) int {
	most, nodes, sum := 0, 0, 0
	for _, n := range g.nodes {
		k := math.MaxInt
		for r, v := range shape {
			k = min(k, int(math.Floor(n.Total[r]/v+eps)))
		}
		most, sum = max(most, k), sum+k
		if k > 0 {
			nodes++
		}
	}
	switch st {
	case "STRICT_PACK":
		return most
	case "STRICT_SPREAD":
		return nodes
	}
	return sum
}

// makespan is N = MakespanPerSlot × (1-CPU slots) independent 1-CPU tasks
// of MakespanDur, submitted at once onto idle nodes.
func (g *gen) makespan(sc Scale) PhasePlan {
	ph := PhasePlan{Name: "makespan"}
	slots := 0
	for _, n := range g.nodes {
		slots += int(math.Floor(n.Total["CPU"] + eps))
	}
	for i := 0; i < sc.MakespanPerSlot*slots; i++ {
		ph.Ops = append(ph.Ops, Op{Task: &TaskPlan{ID: g.id("m"), Demand: map[string]float64{"CPU": 1}, Kind: "default", Dur: sc.MakespanDur, MaxRetries: 3, WC: true}})
	}
	return ph
}

// spread is one SPREAD burst onto idle nodes: between N and 2N 1-CPU
// tasks (at most one per CPU), submitted at once.
func (g *gen) spread(b int) PhasePlan {
	ph := PhasePlan{Name: fmt.Sprintf("spread-%d", b)}
	k := min(len(g.nodes)+g.r.IntN(len(g.nodes)+1), int(g.totalCPU()))
	dur := g.dur(500*time.Millisecond, time.Second)
	for i := 0; i < k; i++ {
		ph.Ops = append(ph.Ops, Op{Task: &TaskPlan{ID: g.id("b"), Demand: map[string]float64{"CPU": 1}, Kind: "spread", Dur: dur, MaxRetries: 3,
			Burst: ph.Name}})
	}
	return ph
}

// crashRound pins half-CPU tasks of one scheduling key to the driver's
// node, each with MaxRetries 1: three long ones started one after another
// (so each holds a lease of its own on the node's worker process), then a
// task that crashes that process on its first attempt, with two more
// behind it. Every task may lose at most one attempt to that one crash.
func (g *gen) crashRound(r int) PhasePlan {
	ph := PhasePlan{Name: fmt.Sprintf("crash-%d", r)}
	pinned := func(prefix string, dur time.Duration) *TaskPlan {
		return &TaskPlan{ID: g.id(prefix), Demand: map[string]float64{"CPU": 0.5}, Kind: "affinity", Node: g.driver, Dur: dur, MaxRetries: 1}
	}
	for i := 0; i < 3; i++ {
		t := pinned("x", 2500*time.Millisecond)
		t.AwaitStart = true
		ph.Ops = append(ph.Ops, Op{Task: t})
	}
	c := pinned("c", 400*time.Millisecond)
	c.Crash = true
	ph.Ops = append(ph.Ops, Op{Task: c}, Op{Task: pinned("x", time.Second)}, Op{Task: pinned("x", time.Second)})
	return ph
}

// unitBundle is the idle and loaded group phases' bundle shape.
var unitBundle = map[string]float64{"CPU": 1}

// idleGroup is one group of strategy st created alone onto idle nodes,
// with a task in each bundle: SPREAD and STRICT_SPREAD get one {CPU: 1}
// bundle per node that fits one (at most 4, at least 2), PACK as many as
// the largest node holds (at most 3). ok is false when the cluster cannot
// show the strategy (SPREAD on one node, PACK on nodes of 1 CPU).
func (g *gen) idleGroup(r int, st string) (PhasePlan, bool) {
	ph := PhasePlan{Name: fmt.Sprintf("group-idle-%s-%d", st, r)}
	n := min(4, g.bundleLimit("STRICT_SPREAD", unitBundle))
	if st == "PACK" {
		n = min(3, g.bundleLimit("STRICT_PACK", unitBundle))
	}
	if n < 2 {
		return ph, false
	}
	gp := &GroupPlan{ID: g.id("G"), Strategy: st, Idle: true}
	for i := 0; i < n; i++ {
		gp.Bundles = append(gp.Bundles, unitBundle)
		gp.Tasks = append(gp.Tasks, TaskPlan{ID: g.id("p"), Demand: map[string]float64{"CPU": 1}, Kind: "pg", Bundle: i,
			Dur: g.dur(200*time.Millisecond, 600*time.Millisecond), MaxRetries: 3})
	}
	ph.Ops = []Op{{Group: gp}}
	return ph, true
}

// loadedGroups is one SPREAD, one STRICT_SPREAD and one PACK group
// created while 1-CPU tasks (as many as the cluster has CPUs) run for 1.5
// to 3 s: the groups wait for room or take what is left, and must never
// over-commit a node (checkCapacity) nor break STRICT_SPREAD.
func (g *gen) loadedGroups(r int) PhasePlan {
	ph := PhasePlan{Name: fmt.Sprintf("group-loaded-%d", r)}
	for i := 0; i < int(g.totalCPU()); i++ {
		ph.Ops = append(ph.Ops, Op{Task: &TaskPlan{ID: g.id("t"), Demand: map[string]float64{"CPU": 1}, Kind: "default",
			Dur: g.dur(1500*time.Millisecond, 3*time.Second), MaxRetries: 3}})
	}
	at := 300 * time.Millisecond
	for _, st := range []string{"SPREAD", "STRICT_SPREAD", "PACK"} {
		n := min(3, g.bundleLimit("STRICT_SPREAD", unitBundle))
		if st == "PACK" {
			n = min(2, g.bundleLimit("STRICT_PACK", unitBundle))
		}
		if n == 0 {
			continue
		}
		gp := &GroupPlan{ID: g.id("G"), Strategy: st}
		for i := 0; i < n; i++ {
			gp.Bundles = append(gp.Bundles, unitBundle)
			gp.Tasks = append(gp.Tasks, TaskPlan{ID: g.id("p"), Demand: map[string]float64{"CPU": 1}, Kind: "pg", Bundle: i,
				Dur: g.dur(200*time.Millisecond, 800*time.Millisecond), MaxRetries: 3})
		}
		ph.Ops = append(ph.Ops, Op{At: at, Group: gp})
		at += 100 * time.Millisecond
	}
	return ph
}
