package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// fakePGHost is a pgHost over a bare FSM (fakeActorHost's): every node
// holds every bundle asked of it, and the host records each bundle call
// ("node method group") and each actor it is asked to end.
type fakePGHost struct {
	*fakeActorHost
	ctx context.Context

	mu     sync.Mutex
	calls  []string
	ended  []string
	leases []string        // returnBundlesHere calls
	refuse map[string]bool // nodes that refuse every prepare (not enough free)
}

// refuses says whether node refuses method, and records the call.
func (h *fakePGHost) refuses(node, method string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return method == wire.MethodPGPrepare && h.refuse[node]
}

func (h *fakePGHost) record(node, method, group string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, node+" "+method+" "+group)
}

func (h *fakePGHost) callNode(ctx context.Context, addr, method string, req, resp any) error {
	h.record(addr, method, req.(*wire.BundlesRequest).Group)
	if h.refuses(addr, method) {
		resp.(*wire.BundlesReply).Reason = "needs CPU=1 but 0 is free"
		return nil
	}
	resp.(*wire.BundlesReply).OK = true
	return nil
}

func (h *fakePGHost) goFunc(name string, f func()) bool {
	go f()
	return true
}

func (h *fakePGHost) lifetime() context.Context { return h.ctx }
func (h *fakePGHost) leaderSince() time.Time    { return time.Time{} }
func (h *fakePGHost) selfID() string            { return "n1" }

func (h *fakePGHost) bundlesHere(method string, req *wire.BundlesRequest) (*wire.BundlesReply, error) {
	h.record("n1", method, req.Group)
	if h.refuses("n1", method) {
		return &wire.BundlesReply{Reason: "needs CPU=1 but 0 is free"}, nil
	}
	return &wire.BundlesReply{OK: true}, nil
}

func (h *fakePGHost) returnBundlesHere(group string, indexes []int) {
	h.record("n1", wire.MethodPGReturn, group)
}

func (h *fakePGHost) endActor(ctx context.Context, id, cause string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = append(h.ended, id+": "+cause)
	return nil
}

func (h *fakePGHost) callsFor(group string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, c := range h.calls {
		if strings.HasSuffix(c, " "+group) {
			out = append(out, strings.TrimSuffix(c, " "+group))
		}
	}
	return out
}

// newFakePGManager runs a manager's write, create and remove loops on a
// fake host whose table holds three alive nodes of 4 CPUs (n1 is this
// node; the others' addresses are their IDs).
func newFakePGManager(t *testing.T) (*pgManager, *fakePGHost) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &fakePGHost{fakeActorHost: newFakeActorHost(), ctx: ctx}
	for _, id := range []string{"n1", "n2", "n3"} {
		nd := store.Node{ID: id, Name: id, Address: id, Status: store.NodeAlive, Incarnation: 1,
			Resources: sched.ResourceSet{sched.CPU: sched.QuantityOf(4)}}
		if _, err := h.apply(store.NodeRegisterType, &store.NodeRegisterRequest{Node: nd}); err != nil {
			t.Fatal(err)
		}
	}
	m := newPGManager(h)
	var wg sync.WaitGroup
	m.lead(ctx, termStarter(ctx, &wg, nil))
	t.Cleanup(func() { cancel(); wg.Wait() })
	return m, h
}

// termStarter starts goroutines as a term's group does, on ctx, counting
// them in wg and, when running is not nil, recording which run.
func termStarter(ctx context.Context, wg *sync.WaitGroup, running *sync.Map) func(string, func(context.Context)) bool {
	return func(name string, f func(context.Context)) bool {
		wg.Add(1)
		if running != nil {
			running.Store(name, true)
		}
		go func() {
			defer wg.Done()
			defer func() {
				if running != nil {
					running.Delete(name)
				}
			}()
			f(ctx)
		}()
		return true
	}
}

// The batch, create and remove loops run only inside a leader term: they
// start with it, return when it is revoked, and a create asked after it
// (or before a next one) fails with not_leader instead of waiting or
// being run by a later term; a next term serves creates again.
func TestPGLoopsStopWhenLeadershipIsRevoked(t *testing.T) {
	m, h := newFakePGManager(t) // the first term runs until the test ends
	m.termWait = 300 * time.Millisecond
	cpu := sched.ResourceSet{sched.CPU: sched.QuantityOf(1)}
	m.createForTest(t, "aaaaaaaa10", sched.Pack, cpu)

	term, revoke := context.WithCancel(h.ctx)
	var wg sync.WaitGroup
	var running sync.Map
	m.lead(term, termStarter(term, &wg, &running))
	for _, name := range []string{"pg-batch", "pg-create", "pg-remove"} {
		if _, ok := running.Load(name); !ok {
			t.Fatalf("loop %s not started with the term", name)
		}
	}
	m.createForTest(t, "aaaaaaaa11", sched.Pack, cpu)
	m.endTerm()
	revoke()
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		var left []string
		running.Range(func(k, _ any) bool { left = append(left, k.(string)); return true })
		t.Fatalf("loops still running 10 s after the term was revoked: %v", left)
	}
	g := &store.PlacementGroup{ID: "aaaaaaaa12", JobID: "job1", Strategy: sched.Pack, Bundles: []sched.ResourceSet{cpu}, Nodes: make([]string, 1), State: store.PGPending}
	start := time.Now()
	err := m.create(g)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeNotLeader {
		t.Fatalf("create with no term: %v, want not_leader", err)
	}
	if d := time.Since(start); d < m.termWait {
		t.Fatalf("create with no term failed after %v, want it to wait %v for a term", d, m.termWait)
	}
	if rec, _ := m.host.State().PlacementGroupByID(g.ID); rec != nil {
		t.Fatalf("a create refused for want of a term was recorded: %+v", rec)
	}
	if errs := m.writeMany([]store.PlacementGroupOp{{Kind: store.PGOpRemove, ID: "aaaaaaaa11"}}); !errors.As(errs[0], &re) || re.Code != wire.CodeNotLeader {
		t.Fatalf("a write with no term: %v, want not_leader", errs[0])
	}
	// A create waiting for a term is served by the next one.
	done := make(chan error, 1)
	go func() { done <- m.create(g) }()
	next, endNext := context.WithCancel(h.ctx)
	var wg2 sync.WaitGroup
	t.Cleanup(func() { endNext(); wg2.Wait() })
	m.lead(next, termStarter(next, &wg2, nil))
	if err := <-done; err != nil {
		t.Fatalf("a create waiting for the next term: %v", err)
	}
	if rec, _ := m.host.State().PlacementGroupByID(g.ID); rec == nil || rec.State != store.PGCreated {
		t.Fatalf("group created in the next term: %+v", rec)
	}
}

func (m *pgManager) createForTest(t *testing.T, id string, strategy sched.PlacementStrategy, bundles ...sched.ResourceSet) *store.PlacementGroup {
	t.Helper()
	g := &store.PlacementGroup{ID: id, JobID: "job1", Strategy: strategy, Bundles: bundles, Nodes: make([]string, len(bundles)), State: store.PGPending}
	if err := m.create(g); err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	rec, err := m.host.State().PlacementGroupByID(id)
	if err != nil || rec == nil {
		t.Fatalf("group %s after create: %v, %v", id, rec, err)
	}
	return rec
}

// The manager's create and remove loops on a fake host: a group that fits
// is prepared then committed on the nodes it was placed on and recorded
// CREATED; STRICT_SPREAD over more bundles than nodes is recorded PENDING
// and infeasible, touching no node; a removal records REMOVED, ends the
// group's actors and has each node holding its bundles give them back.
func TestPGManagerCreateRemoveOnFakeHost(t *testing.T) {
	m, h := newFakePGManager(t)
	cpu := sched.ResourceSet{sched.CPU: sched.QuantityOf(1)}

	const spread = "aaaaaaaa01"
	g := m.createForTest(t, spread, sched.StrictSpread, cpu, cpu, cpu)
	if g.State != store.PGCreated {
		t.Fatalf("STRICT_SPREAD of 3 on 3 nodes: %s (%s)", g.State, g.PendingReason)
	}
	nodes := slices.Sorted(slices.Values(g.Nodes))
	if !slices.Equal(nodes, []string{"n1", "n2", "n3"}) {
		t.Fatalf("STRICT_SPREAD placed on %v, want one bundle on each node", g.Nodes)
	}
	calls := h.callsFor(spread)
	for _, nd := range nodes {
		prep := slices.Index(calls, nd+" "+wire.MethodPGPrepare)
		commit := slices.Index(calls, nd+" "+wire.MethodPGCommit)
		if prep < 0 || commit < prep {
			t.Fatalf("node %s: calls %v; want prepare, then commit", nd, calls)
		}
	}

	const tooWide = "aaaaaaaa02"
	g = m.createForTest(t, tooWide, sched.StrictSpread, cpu, cpu, cpu, cpu)
	if g.State != store.PGPending || !g.Infeasible || !strings.Contains(g.PendingReason, "STRICT_SPREAD") {
		t.Fatalf("STRICT_SPREAD of 4 on 3 nodes: %s, infeasible %v, reason %q", g.State, g.Infeasible, g.PendingReason)
	}
	if calls := h.callsFor(tooWide); len(calls) != 0 {
		t.Fatalf("an infeasible group called nodes: %v", calls)
	}

	actor := store.Actor{ID: "actor1", JobID: "job1", Class: "C", Constructor: "C", State: store.ActorAlive, MaxConcurrency: 1,
		NodeID: "n2", NodeName: "n2", Resources: sched.BundleResources(spread, 1, cpu)}
	if _, err := h.apply(store.ActorRegisterType, &store.ActorRegisterRequest{Actor: actor}); err != nil {
		t.Fatal(err)
	}
	if err := m.remove(spread); err != nil {
		t.Fatal(err)
	}
	if rec, _ := h.State().PlacementGroupByID(spread); rec == nil || rec.State != store.PGRemoved {
		t.Fatalf("after remove: %+v", rec)
	}
	h.mu.Lock()
	ended := slices.Clone(h.ended)
	h.mu.Unlock()
	if want := "actor1: " + pgRemovedCause(spread); !slices.Equal(ended, []string{want}) {
		t.Fatalf("actors ended: %q, want %q", ended, want)
	}
	calls = h.callsFor(spread)
	for _, nd := range nodes {
		if !slices.Contains(calls, nd+" "+wire.MethodPGReturn) {
			t.Fatalf("node %s was not asked to return its bundles: %v", nd, calls)
		}
	}
	if err := m.remove("aaaaaaaa03"); err == nil || !strings.Contains(err.Error(), "no placement group") {
		t.Fatalf("removing an unknown group: %v", err)
	}
}

// reportBusy has node id's heartbeat say all its CPUs run tasks.
func reportBusy(t *testing.T, m *pgManager, id string) {
	t.Helper()
	nd, err := m.host.State().NodeByID(id)
	if err != nil || nd == nil {
		t.Fatalf("node %s: %v", id, err)
	}
	m.nodeReport(nd, sched.ResourceSet{}, nil)
}

func distinctNodes(g *store.PlacementGroup) int {
	seen := map[string]bool{}
	for _, nd := range g.Nodes {
		seen[nd] = true
	}
	return len(seen)
}

// A heartbeat up to an interval old may still count tasks that just ended:
// a SPREAD group of three on three 4-CPU nodes whose last heartbeat from
// n1 said all its CPUs were busy asks n1 anyway, and when n1 holds the
// bundle (it is idle now) the group spans all three nodes (issue 27: on
// the old code two bundles shared a node). A node that is truly busy
// refuses; the group then goes by the heartbeats and n1 is not asked
// again until its next heartbeat.
func TestPGManagerSpreadAsksNodesAHeartbeatCalledBusy(t *testing.T) {
	m, h := newFakePGManager(t)
	one := sched.ResourceSet{sched.CPU: sched.QuantityOf(1)}
	reportBusy(t, m, "n1")
	g := m.createForTest(t, "spread1", sched.Spread, one, one, one)
	if g.State != store.PGCreated || distinctNodes(g) != 3 {
		t.Fatalf("SPREAD of 3 with n1 idle but reported busy: %s on %v, want 3 distinct nodes", g.State, g.Nodes)
	}

	h.mu.Lock()
	h.refuse = map[string]bool{"n1": true}
	h.mu.Unlock()
	reportBusy(t, m, "n1")
	g = m.createForTest(t, "spread2", sched.Spread, one, one, one)
	if g.State != store.PGCreated || distinctNodes(g) != 2 || slices.Contains(g.Nodes, "n1") {
		t.Fatalf("SPREAD of 3 with n1 truly busy: %s on %v, want n2 and n3 only", g.State, g.Nodes)
	}
	asked := func(group string) int {
		n := 0
		for _, c := range h.callsFor(group) {
			if c == "n1 "+wire.MethodPGPrepare {
				n++
			}
		}
		return n
	}
	if a := asked("spread2"); a != 1 {
		t.Fatalf("n1 asked to prepare spread2 %d times, want once", a)
	}
	g = m.createForTest(t, "spread3", sched.Spread, one, one)
	if a := asked("spread3"); a != 0 || distinctNodes(g) != 2 {
		t.Fatalf("after n1 refused, before its next heartbeat: asked %d times (want 0), nodes %v", a, g.Nodes)
	}
}
