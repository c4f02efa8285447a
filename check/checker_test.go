package check

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// hist builds a synthetic history; times are seconds from an arbitrary
// origin.
type hist struct{ h History }

const origin = int64(1_700_000_000_000_000_000)

func (b *hist) add(sec float64, e Event) *hist {
	e.Time = origin + int64(sec*1e9)
	b.h = append(b.h, e)
	return b
}

func (b *hist) submit(sec float64, id string, demand map[string]float64, strategy string) *hist {
	return b.add(sec, Event{Kind: Submit, Task: id, Demand: demand, Strategy: strategy})
}

// run records a whole attempt: start on node in pid, end after dur
// seconds (dur < 0: never ends).
func (b *hist) run(sec float64, id string, attempt int, node string, pid int, dur float64) *hist {
	b.add(sec, Event{Kind: Start, Task: id, Attempt: attempt, Node: node, PID: pid})
	if dur >= 0 {
		b.add(sec+dur, Event{Kind: End, Task: id, Attempt: attempt, Node: node, PID: pid})
	}
	return b
}

// task submits id with demand (default strategy) and runs it at once.
func (b *hist) task(sec float64, id string, demand map[string]float64, node string, dur float64) *hist {
	return b.submit(sec, id, demand, "default").run(sec, id, 0, node, 1, dur)
}

func (b *hist) blocked(from, to float64, id string) *hist {
	b.add(from, Event{Kind: Block, Task: id})
	return b.add(to, Event{Kind: Unblock, Task: id})
}

func (b *hist) ok(sec float64, id string) *hist { return b.add(sec, Event{Kind: Result, Task: id}) }

func (b *hist) sorted() History { b.h.Sort(); return b.h }

func cpu(n float64) map[string]float64 { return map[string]float64{"CPU": n} }

func res(kv ...any) map[string]float64 {
	m := map[string]float64{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1].(float64)
	}
	return m
}

func oneNode(total map[string]float64) Config {
	return Config{Nodes: []Node{{Name: "n0", Total: total}}}
}

func threeNodes() Config {
	var c Config
	for _, n := range []string{"n0", "n1", "n2"} {
		c.Nodes = append(c.Nodes, Node{Name: n, Total: res("CPU", 2.0, "GPU", 2.0), Labels: map[string]string{"zone": map[string]string{"n0": "a", "n1": "b", "n2": "b"}[n]}})
	}
	return c
}

// expect fails unless check reports exactly want violations of inv, each
// containing every string of contains.
func expect(t *testing.T, got []Violation, inv string, want int, contains ...string) {
	t.Helper()
	n := 0
	for _, v := range got {
		if v.Invariant != inv {
			t.Errorf("unexpected %s violation: %s", v.Invariant, v)
			continue
		}
		n++
		for _, c := range contains {
			if !strings.Contains(v.String(), c) {
				t.Errorf("violation %q does not mention %q", v, c)
			}
		}
	}
	if n != want {
		t.Fatalf("%d %s violations, want %d:\n%s", n, inv, want, Summary(got, 10))
	}
}

func TestCapacityCustomResource(t *testing.T) {
	cfg := oneNode(res("CPU", 2.0, "slot", 1.0))
	slot := res("CPU", 1.0, "slot", 1.0)
	// t2 starts while t1 holds the only slot, blocked in Get: only CPU is lent.
	over := (&hist{}).submit(0, "t1", slot, "default").submit(0, "t2", slot, "default").
		run(0.1, "t1", 0, "n0", 10, 2).blocked(0.2, 1.5, "t1").run(0.5, "t2", 0, "n0", 10, 0.5).sorted()
	expect(t, CheckCapacity(over, cfg), InvCapacity, 1, "node n0", "slot held 2 of 1", "t2#0 started", "t1#0(1)")
	fine := (&hist{}).submit(0, "t1", slot, "default").submit(0, "t2", slot, "default").
		run(0.1, "t1", 0, "n0", 10, 1).run(1.1, "t2", 0, "n0", 10, 0.5).sorted()
	expect(t, CheckCapacity(fine, cfg), InvCapacity, 0)
}

func TestCapacityCPULending(t *testing.T) {
	cfg := oneNode(cpu(2))
	// t1 blocks and lends its CPU: t2 and t3 may run; t1 wakes and
	// over-commits for a while, which is allowed.
	lent := (&hist{}).task(0, "t1", cpu(1), "n0", 5).blocked(0.1, 3, "t1").
		task(0.2, "t2", cpu(1), "n0", 4).task(0.3, "t3", cpu(1), "n0", 4).sorted()
	expect(t, CheckCapacity(lent, cfg), InvCapacity, 0)
	// Without the block, t3 is one CPU too many.
	notLent := (&hist{}).task(0, "t1", cpu(1), "n0", 5).task(0.2, "t2", cpu(1), "n0", 4).task(0.3, "t3", cpu(1), "n0", 4).sorted()
	expect(t, CheckCapacity(notLent, cfg), InvCapacity, 1, "CPU held 3 of 2", "t3#0 started")
	// A new start while over-committed long after the unblock is not.
	late := (&hist{}).task(0, "t1", cpu(1), "n0", 9).blocked(0.1, 1, "t1").
		task(0.2, "t2", cpu(1), "n0", 8).task(0.3, "t3", cpu(1), "n0", 8).task(4, "t4", cpu(1), "n0", 1).sorted()
	expect(t, CheckCapacity(late, cfg), InvCapacity, 1, "CPU held 4 of 2", "t4#0 started")
	// ... unless t4 takes over t1's lease as t1 ends (same process and
	// demand): the over-commit t1's wake-up caused carries on, as in Ray.
	handoff := (&hist{}).task(0, "t1", cpu(1), "n0", 4).blocked(0.1, 1, "t1").
		task(0.2, "t2", cpu(1), "n0", 8).task(0.3, "t3", cpu(1), "n0", 8).task(4, "t4", cpu(1), "n0", 1).sorted()
	expect(t, CheckCapacity(handoff, cfg), InvCapacity, 0)
}

func pgEvents(b *hist, created, ready, removed float64, id, strategy string, bundles ...Bundle) *hist {
	b.add(created, Event{Kind: PGCreate, Group: id, PGStrategy: strategy, Bundles: bundles})
	b.add(ready, Event{Kind: PGReady, Group: id, Bundles: bundles})
	b.add(removed, Event{Kind: PGRemove, Group: id})
	return b.add(removed+0.01, Event{Kind: PGRemoved, Group: id})
}

func TestCapacityBundles(t *testing.T) {
	cfg := oneNode(cpu(2))
	b0 := Bundle{Index: 0, Demand: cpu(1), Node: "n0"}
	// Two 1-CPU tasks in a 1-CPU bundle at once.
	inBundle := pgEvents(&hist{}, 0, 0.1, 5, "g", "PACK", b0).
		submit(0.2, "a", cpu(1), "pg:g:0").submit(0.2, "b", cpu(1), "pg:g:0").
		run(0.3, "a", 0, "n0", 1, 2).run(0.4, "b", 0, "n0", 1, 2).sorted()
	expect(t, CheckCapacity(inBundle, cfg), InvCapacity, 2, "group g", "CPU held 2 of 1", "b#0 started")
	// The bundle's CPU is gone from the node: two outside tasks are one too many.
	outside := pgEvents(&hist{}, 0, 0.1, 5, "g", "PACK", b0).
		task(0.3, "a", cpu(1), "n0", 2).task(0.4, "b", cpu(1), "n0", 2).sorted()
	expect(t, CheckCapacity(outside, cfg), InvCapacity, 1, "node n0", "CPU held 3 of 2", "bundle 0 of group g(1)")
	fine := pgEvents(&hist{}, 0, 0.1, 5, "g", "PACK", b0).
		submit(0.2, "a", cpu(1), "pg:g:0").run(0.3, "a", 0, "n0", 1, 2).task(0.4, "b", cpu(1), "n0", 2).sorted()
	expect(t, CheckCapacity(fine, cfg), InvCapacity, 0)
}

func TestWorkConservation(t *testing.T) {
	cfg := oneNode(cpu(2))
	wc := func(b *hist, sec float64, id string) *hist {
		return b.add(sec, Event{Kind: Submit, Task: id, Demand: cpu(1), Strategy: "default", WC: true})
	}
	// t2 waits 4 s behind t1 on a 2-CPU node: one CPU stayed free.
	serial := wc(wc(&hist{}, 0, "t1"), 0, "t2").run(0.1, "t1", 0, "n0", 1, 4).run(4.1, "t2", 0, "n0", 1, 1).sorted()
	expect(t, CheckWorkConservation(serial, cfg), InvWork, 1, "task t2", "waited 4.10s", "had room for it for 4.00s", "free then: CPU=1")
	// t3 waits for a full node: no violation.
	full := wc(wc(wc(&hist{}, 0, "t1"), 0, "t2"), 0, "t3").run(0.1, "t1", 0, "n0", 1, 4).run(0.1, "t2", 0, "n0", 1, 4).
		run(4.1, "t3", 0, "n0", 1, 1).sorted()
	expect(t, CheckWorkConservation(full, cfg), InvWork, 0)
	// Four tasks run one after another on one lease (same process): the
	// lease passing from task to task is no release, so the free CPU is
	// continuous and the last two waited too long.
	b := &hist{}
	for i, id := range []string{"p1", "p2", "p3", "p4"} {
		wc(b, 0, id).run(0.1+float64(i), id, 0, "n0", 1, 1)
	}
	expect(t, CheckWorkConservation(b.sorted(), cfg), InvWork, 2, "while node n0 had room for it")
	// A dependency delays readiness: waiting for it is fine.
	dep := wc(&hist{}, 0, "t1").add(0, Event{Kind: Submit, Task: "t2", Demand: cpu(1), WC: true, Deps: []string{"t1"}}).
		run(0.1, "t1", 0, "n0", 1, 4).run(4.2, "t2", 0, "n0", 1, 1).sorted()
	expect(t, CheckWorkConservation(dep, cfg), InvWork, 0)
	// After a crash, waiting for the node's new worker process is fine.
	restart := wc(&hist{}, 0, "t1").run(0.1, "t1", 0, "n0", 1, -1).add(0.5, Event{Kind: Crash, Task: "t1", Node: "n0", PID: 1})
	restarted := wc(restart, 0.6, "t2").run(3, "t2", 0, "n0", 2, 1).run(3, "t1", 1, "n0", 2, 1).sorted()
	expect(t, CheckWorkConservation(restarted, cfg), InvWork, 0)
}

func TestWorkConservationGroups(t *testing.T) {
	cfg := threeNodes()
	b := []Bundle{{Index: 0, Demand: cpu(2), Node: "n0"}, {Index: 1, Demand: cpu(2), Node: "n1"}}
	// Ready 5 s after creation on idle nodes.
	idle := pgEvents(&hist{}, 0, 5, 6, "g", "STRICT_SPREAD", b...).sorted()
	expect(t, CheckWorkConservation(idle, cfg), InvWork, 1, "placement group g (STRICT_SPREAD", "waited 5.00s")
	// Two of the three nodes were busy until 4.5 s: STRICT_SPREAD could not place.
	busy := pgEvents(&hist{}, 0, 5, 6, "g", "STRICT_SPREAD", b...).task(0, "a", cpu(1), "n0", 4.5).task(0, "b", cpu(1), "n1", 4.5).sorted()
	expect(t, CheckWorkConservation(busy, cfg), InvWork, 0)
	// PACK could have used n2 and one of the others? No: each bundle needs
	// a whole node's CPU, and only n2 was free.
	pack := pgEvents(&hist{}, 0, 5, 6, "g", "PACK", b...).task(0, "a", cpu(1), "n0", 4.5).task(0, "b", cpu(1), "n1", 4.5).sorted()
	expect(t, CheckWorkConservation(pack, cfg), InvWork, 0)
	strictPack := pgEvents(&hist{}, 0, 5, 6, "g", "STRICT_PACK", Bundle{Index: 0, Demand: cpu(1), Node: "n2"}, Bundle{Index: 1, Demand: cpu(1), Node: "n2"}).
		task(0, "a", cpu(1), "n0", 4.5).task(0, "b", cpu(1), "n1", 4.5).sorted()
	expect(t, CheckWorkConservation(strictPack, cfg), InvWork, 1, "STRICT_PACK", "room for it for 5.00s")
}

func TestMakespan(t *testing.T) {
	cfg := oneNode(cpu(2))
	phase := func(parallel int) History {
		b := (&hist{}).add(0, Event{Kind: Phase, Phase: "makespan"})
		for i := 0; i < 8; i++ {
			id := "m" + string(rune('a'+i))
			b.add(0, Event{Kind: Submit, Task: id, Demand: cpu(1), Dur: 1.5, Phase: "makespan"})
			b.run(0.1+float64(i/parallel)*1.5, id, 0, "n0", 1, 1.5)
		}
		return b.sorted()
	}
	expect(t, CheckMakespan(phase(1), cfg), InvMakespan, 1, "8 tasks of 1.5s", "took 12.10s", "at most 1 ran at once")
	expect(t, CheckMakespan(phase(2), cfg), InvMakespan, 0)
}

func TestSpread(t *testing.T) {
	cfg := threeNodes()
	burst := func(nodes ...string) History {
		b := &hist{}
		for i, n := range nodes {
			id := "s" + string(rune('a'+i))
			b.add(0, Event{Kind: Submit, Task: id, Demand: cpu(1), Strategy: "spread", Burst: "b1"})
			b.run(0.1, id, 0, n, 1, 1)
		}
		return b.sorted()
	}
	expect(t, CheckSpread(burst("n0", "n0", "n0", "n0"), cfg), InvSpread, 1, "n0=4 n1=0 n2=0")
	expect(t, CheckSpread(burst("n0", "n1", "n2", "n0"), cfg), InvSpread, 0)
}

func TestGPUCounts(t *testing.T) {
	cfg := oneNode(res("CPU", 2.0, "GPU", 2.0))
	gpuRun := func(b *hist, sec float64, id string, g float64, ids []int, strategy string) *hist {
		b.add(sec, Event{Kind: Start, Task: id, Node: "n0", PID: 1, Demand: res("GPU", g), GPUIDs: ids, Strategy: strategy})
		return b.add(sec+1, Event{Kind: End, Task: id, Node: "n0", PID: 1})
	}
	b0 := Bundle{Index: 0, Demand: res("GPU", 1.0), Node: "n0"}
	// A task in a GPU bundle that saw no GPU at all.
	none := gpuRun(pgEvents(&hist{}, 0, 0.1, 5, "g", "PACK", b0), 1, "a", 1, nil, "pg:g:0").sorted()
	expect(t, CheckGPUs(none, cfg), InvGPU, 1, "a#0 in bundle 0 of group g asked for GPU 1 and saw GPU IDs []")
	// Two whole-GPU tasks on device 0 at once; and one that sees a device it did not ask for.
	shared := gpuRun(gpuRun(&hist{}, 0, "a", 1, []int{0}, ""), 0.5, "b", 1, []int{0}, "").sorted()
	expect(t, CheckGPUs(shared, cfg), InvGPU, 1, "GPU device 0 held 2 of 1")
	extra := gpuRun(&hist{}, 0, "a", 0, []int{1}, "").sorted()
	expect(t, CheckGPUs(extra, cfg), InvGPU, 1, "asked for GPU 0 and saw GPU IDs [1]")
	fine := gpuRun(gpuRun(gpuRun(&hist{}, 0, "a", 0.5, []int{0}, ""), 0.5, "b", 0.5, []int{0}, ""), 0.6, "c", 1, []int{1}, "").sorted()
	expect(t, CheckGPUs(fine, cfg), InvGPU, 0)
}

func TestGPUBundles(t *testing.T) {
	cfg := oneNode(res("CPU", 2.0, "GPU", 2.0))
	b0 := Bundle{Index: 0, Demand: res("GPU", 1.0), Node: "n0"}
	gpuRun := func(b *hist, sec float64, id string, ids []int, strategy string) *hist {
		b.add(sec, Event{Kind: Start, Task: id, Node: "n0", PID: 1, Demand: res("GPU", 1.0), GPUIDs: ids, Strategy: strategy})
		return b.add(sec+1, Event{Kind: End, Task: id, Node: "n0", PID: 1})
	}
	// The bundle's work moves between devices: a 1-GPU bundle has one.
	wander := gpuRun(gpuRun(pgEvents(&hist{}, 0, 0.1, 9, "g", "PACK", b0), 1, "a", []int{0}, "pg:g:0"), 3, "b", []int{1}, "pg:g:0").sorted()
	expect(t, CheckGPUs(wander, cfg), InvGPU, 2, "reserves GPU 1", "used devices [0 1]")
	// Work outside the group on the bundle's device while the group lives.
	steal := gpuRun(gpuRun(pgEvents(&hist{}, 0, 0.1, 9, "g", "PACK", b0), 1, "a", []int{0}, "pg:g:0"), 3, "b", []int{0}, "").sorted()
	expect(t, CheckGPUs(steal, cfg), InvGPU, 1, "GPU device 0 held 2 of 1", "b#0 started")
	// Known bundle devices: work must stay on them.
	known := Bundle{Index: 0, Demand: res("GPU", 1.0), Node: "n0", GPUIDs: []int{1}}
	off := gpuRun(pgEvents(&hist{}, 0, 0.1, 9, "g", "PACK", known), 1, "a", []int{0}, "pg:g:0").sorted()
	expect(t, CheckGPUs(off, cfg), InvGPU, 1, "saw GPU 0, not one of the bundles' devices [1]")
	fine := gpuRun(gpuRun(pgEvents(&hist{}, 0, 0.1, 9, "g", "PACK", b0), 1, "a", []int{1}, "pg:g:0"), 3, "b", []int{0}, "").sorted()
	expect(t, CheckGPUs(fine, cfg), InvGPU, 0)
}

func TestRetries(t *testing.T) {
	cfg := oneNode(cpu(2))
	crashThenRetry := func(retryPID int) History {
		b := (&hist{}).submit(0, "c", cpu(1), "default").run(0.1, "c", 0, "n0", 7, -1).
			add(0.2, Event{Kind: Crash, Task: "c", Node: "n0", PID: 7})
		return b.run(0.5, "c", 1, "n0", retryPID, 0.1).ok(0.7, "c").sorted()
	}
	expect(t, CheckRetries(crashThenRetry(7), cfg), InvRetry, 1, "c#1 ran in process 7")
	expect(t, CheckRetries(crashThenRetry(8), cfg), InvRetry, 0)
	// Two deaths counted for one crash: the retry hit the dead worker.
	doubled := func(crashes int) History {
		b := (&hist{}).add(0, Event{Kind: Submit, Task: "c", MaxRetries: 1}).run(0.1, "c", 0, "n0", 7, -1)
		for i := 0; i < crashes; i++ {
			b.add(0.2+float64(i), Event{Kind: Crash, Task: "x", Node: "n0", PID: 7 + i})
		}
		return b.add(3, Event{Kind: Result, Task: "c", Err: "worker crashed", ErrKind: ErrCrashed, Attempts: 2}).sorted()
	}
	expect(t, CheckRetries(doubled(1), cfg), InvRetry, 1, "failed after 2 worker deaths (MaxRetries 1) but only 1 worker process(es) died")
	expect(t, CheckRetries(doubled(2), cfg), InvRetry, 0)
}

func TestPlacement(t *testing.T) {
	cfg := threeNodes()
	on := func(strategy, node string) History {
		return (&hist{}).submit(0, "p", cpu(1), strategy).run(0.1, "p", 0, node, 1, 1).sorted()
	}
	expect(t, CheckPlacement(on("affinity:n1", "n2"), cfg), InvPlacement, 1, "hard affinity to node n1")
	expect(t, CheckPlacement(on("affinity:n1", "n1"), cfg), InvPlacement, 0)
	expect(t, CheckPlacement(on("labels:zone=b", "n0"), cfg), InvPlacement, 1, `label zone="a" is not in b`)
	expect(t, CheckPlacement(on("labels:zone=b", "n2"), cfg), InvPlacement, 0)
	strict := func(nodes ...string) History {
		var bs []Bundle
		for i, n := range nodes {
			bs = append(bs, Bundle{Index: i, Demand: cpu(1), Node: n})
		}
		return pgEvents(&hist{}, 0, 0.1, 1, "g", "STRICT_SPREAD", bs...).sorted()
	}
	expect(t, CheckPlacement(strict("n0", "n0"), cfg), InvPlacement, 1, "group g (STRICT_SPREAD)")
	expect(t, CheckPlacement(strict("n0", "n1"), cfg), InvPlacement, 0)
	// SPREAD and PACK onto idle nodes (threeNodes: 2 CPUs each).
	idle := func(strategy string, nodes ...string) History {
		var bs []Bundle
		for i, n := range nodes {
			bs = append(bs, Bundle{Index: i, Demand: cpu(1), Node: n})
		}
		b := &hist{}
		b.add(0, Event{Kind: PGCreate, Group: "g", PGStrategy: strategy, Bundles: bs, PGIdle: true})
		b.add(0.1, Event{Kind: PGReady, Group: "g", Bundles: bs})
		return b.sorted()
	}
	// Issue 27 (seed 004): a SPREAD group of three on three idle nodes put
	// two bundles on one node.
	expect(t, CheckPlacement(idle("SPREAD", "n0", "n0", "n1"), cfg), InvPlacement, 1, "group g (SPREAD, created onto idle nodes)", "2 distinct nodes, but 3 nodes could each hold a bundle")
	expect(t, CheckPlacement(idle("SPREAD", "n0", "n2", "n1"), cfg), InvPlacement, 0)
	// Four bundles on three nodes: three distinct nodes are enough.
	expect(t, CheckPlacement(idle("SPREAD", "n0", "n2", "n1", "n0"), cfg), InvPlacement, 0)
	expect(t, CheckPlacement(idle("PACK", "n0", "n1"), cfg), InvPlacement, 1, "2 nodes, but node n0 could hold them all")
	expect(t, CheckPlacement(idle("PACK", "n1", "n1"), cfg), InvPlacement, 0)
	// Three 1-CPU bundles fit no 2-CPU node: PACK may use two.
	expect(t, CheckPlacement(idle("PACK", "n1", "n1", "n2"), cfg), InvPlacement, 0)
	// Not idle: the soft strategies are not judged.
	notIdle := pgEvents(&hist{}, 0, 0.1, 1, "g", "SPREAD", Bundle{Index: 0, Demand: cpu(1), Node: "n0"}, Bundle{Index: 1, Demand: cpu(1), Node: "n0"}).sorted()
	expect(t, CheckPlacement(notIdle, cfg), InvPlacement, 0)
	wrongBundle := pgEvents(&hist{}, 0, 0.1, 3, "g", "PACK", Bundle{Index: 0, Demand: cpu(1), Node: "n1"}).
		submit(0.2, "p", cpu(1), "pg:g:0").run(0.3, "p", 0, "n0", 1, 1).sorted()
	expect(t, CheckPlacement(wrongBundle, cfg), InvPlacement, 1, "no bundle 0 of group g is there")
}

func TestCompletion(t *testing.T) {
	cfg := oneNode(cpu(2))
	lost := (&hist{}).submit(0, "a", cpu(1), "default").run(0.1, "a", 0, "n0", 1, -1).sorted()
	expect(t, CheckCompletion(lost, cfg), InvCompletion, 2, "a")
	failed := (&hist{}).submit(0, "a", cpu(1), "default").run(0.1, "a", 0, "n0", 1, 1).
		add(1.2, Event{Kind: Result, Task: "a", Err: "object lost", ErrKind: ErrOther}).sorted()
	expect(t, CheckCompletion(failed, cfg), InvCompletion, 1, "task a failed (other): object lost")
	crashed := (&hist{}).submit(0, "a", cpu(1), "default").run(0.1, "a", 0, "n0", 1, -1).
		add(0.5, Event{Kind: Crash, Task: "b", Node: "n0", PID: 1}).run(0.6, "a", 1, "n0", 2, 1).ok(1.7, "a").sorted()
	expect(t, CheckCompletion(crashed, cfg), InvCompletion, 0)
}

func TestLeakAndCheckAll(t *testing.T) {
	cfg := oneNode(cpu(2))
	h := (&hist{}).add(0, Event{Kind: Leak, Node: "n0", Detail: "CPU 1 of 2 still held"}).sorted()
	expect(t, Check(h, cfg), InvLeak, 1, "CPU 1 of 2 still held")
	expect(t, Check(nil, cfg), InvLeak, 0)
}

// TestRecorderConcurrentAppends checks that lines written by many
// goroutines at once come back whole, and that attempts are numbered.
func TestRecorderConcurrentAppends(t *testing.T) {
	r := NewRecorder(filepath.Join(t.TempDir(), "trace.jsonl"))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if err := r.Record(Event{Kind: Start, Task: strings.Repeat("x", 500), Demand: cpu(1)}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	h, err := ReadHistory(r.Path())
	if err != nil || len(h) != 400 {
		t.Fatalf("read %d events, err %v; want 400", len(h), err)
	}
	for i := 1; i < len(h); i++ {
		if h[i].Time < h[i-1].Time || h[i].PID != os.Getpid() {
			t.Fatalf("event %d: time %d after %d, pid %d", i, h[i].Time, h[i-1].Time, h[i].PID)
		}
	}
	for want := 0; want < 3; want++ {
		if got, err := r.NextAttempt("task-1"); err != nil || got != want {
			t.Fatalf("attempt %d, %v; want %d", got, err, want)
		}
	}
}
