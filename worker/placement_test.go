package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
)

func TestPlacementGroupTasksAndActorsUseTheirBundle(t *testing.T) {
	startCluster(t, 3, nil)
	ctx := ctxT(t)
	pg, err := CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 1}, {"CPU": 2}}, "strict_spread", PGName("pair"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := pg.Info(ctx)
	if err != nil || info.State != "CREATED" || info.Bundles[0].NodeName == info.Bundles[1].NodeName {
		t.Fatalf("info = %+v, %v", info, err)
	}
	// Tasks land on their bundle's node.
	for i := 0; i < 2; i++ {
		got, err := Must(where.Options(InPlacementGroup(pg, i))).Remote(ctx).Get(ctx)
		if err != nil || got != info.Bundles[i].NodeName {
			t.Fatalf("task in bundle %d ran on %q (%v), want %s", i, got, err, info.Bundles[i].NodeName)
		}
	}
	// A task larger than its bundle cannot run in it, although the node
	// has the CPUs free: it uses the bundle's resources, not the node's.
	_, err = Must(where.Options(InPlacementGroup(pg, 0), CPUs(2), FailIfInfeasible())).Remote(ctx).Get(ctx)
	var inf *InfeasibleError
	if !errors.As(err, &inf) || !strings.Contains(err.Error(), "does not fit in the bundle") {
		t.Fatalf("2 CPUs in a 1-CPU bundle: %v, want InfeasibleError", err)
	}
	// Actors too (an actor asks for no CPU; the bundle marker pins it).
	h, err := Must(logActorClass.Options(InPlacementGroup(pg, 1))).Remote(ctx, "in-bundle")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := entriesCall.Remote(ctx, h).Get(ctx); err != nil {
		t.Fatal(err)
	}
	if a := actorState(t, ctx, h.ID()); a.NodeName != info.Bundles[1].NodeName {
		t.Fatalf("actor in bundle 1 on %s, want %s", a.NodeName, info.Bundles[1].NodeName)
	}
	// Found by name; bad options are named.
	same, err := GetPlacementGroup(ctx, "pair")
	if err != nil || same.ID() != pg.ID() || same.BundleCount() != 2 {
		t.Fatalf("GetPlacementGroup = %v, %v", same, err)
	}
	if _, err := where.Options(InPlacementGroup(pg, 2)); err == nil || !strings.Contains(err.Error(), "bundle index 2 out of range") {
		t.Fatalf("bundle index 2: %v", err)
	}
	for _, tc := range []struct {
		bundles  []map[string]float64
		strategy string
		want     string
	}{
		{[]map[string]float64{{"CPU": 1}}, "ROUND", `"ROUND": accepted are PACK, SPREAD, STRICT_PACK, STRICT_SPREAD`},
		{[]map[string]float64{{}}, "PACK", "bundle 0 is empty"},
		{[]map[string]float64{{"CPU": -1}}, "PACK", `resource "CPU" has negative amount -1`},
		{nil, "PACK", "at least one bundle"},
	} {
		if _, err := CreatePlacementGroup(ctx, tc.bundles, tc.strategy); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create %v %s: %v, want %q", tc.bundles, tc.strategy, err, tc.want)
		}
	}

	// Remove: the actor dies, and every node's pool is whole again.
	if err := pg.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	waitActorState(t, ctx, h.ID(), "DEAD")
	testutil.Until(t, 10*time.Second, "every node's pool whole again", func() error { return poolsWhole(ctx) })
	if ok, err := pg.Wait(ctx, time.Second); ok || !errors.Is(err, ErrPlacementGroupRemoved) {
		t.Fatalf("Wait after Remove = %v, %v", ok, err)
	}
}

// poolsWhole checks that every node reports its full CPU free and no bundle
// resources.
func poolsWhole(ctx context.Context) error {
	nodes, err := Nodes(ctx)
	if err != nil {
		return err
	}
	for _, nd := range nodes {
		if nd.Available[sched.CPU] != nd.Total[sched.CPU] {
			return fmt.Errorf("node %s: %v of %v CPU free", nd.NodeName, nd.Available[sched.CPU], nd.Total[sched.CPU])
		}
		for k := range nd.Available {
			if strings.Contains(k, "_group_") {
				return fmt.Errorf("node %s still offers %s", nd.NodeName, k)
			}
		}
	}
	return nil
}

func TestPlacementGroupInfeasibleAndPendingThenCreated(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	inf, err := CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 1}, {"CPU": 1}}, "STRICT_SPREAD")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first (a leader election may delay it on a busy machine).
	if _, err := inf.Info(ctx); err != nil {
		t.Fatal(err)
	}
	// Polled: on a loaded machine one short Wait may end before the leader
	// has tried the group.
	testutil.Until(t, 20*time.Second, "STRICT_SPREAD of 2 on 1 node is infeasible", func() error {
		ok, err := inf.Wait(ctx, 300*time.Millisecond)
		var ie *InfeasibleError
		if ok || !errors.Is(err, ErrInfeasible) || !errors.As(err, &ie) || ie.PlacementGroup != inf.ID() || !strings.Contains(ie.Reason, "STRICT_SPREAD") {
			return fmt.Errorf("Wait = %v, %v; want an *InfeasibleError naming the group and STRICT_SPREAD", ok, err)
		}
		return nil
	})
	a, _ := CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 2}}, "PACK")
	if err := a.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ := CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 2}}, "PACK")
	if ok, err := b.Wait(ctx, 200*time.Millisecond); ok || err != nil {
		t.Fatalf("second group while the first holds every CPU: %v, %v (want pending)", ok, err)
	}
	list, err := ListPlacementGroups(ctx)
	if err != nil || len(list) != 3 || list[2].State != "PENDING" || list[2].PendingReason == "" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if err := a.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Wait(ctx, 10*time.Second); !ok || err != nil {
		t.Fatalf("second group after the first was removed: %v, %v", ok, err)
	}
}

// A group is owned by the job that created it and removed when that job
// ends, giving its resources back; a detached group outlives it.
func TestPlacementGroupRemovedWithItsJob(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	owned, err := CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 1}}, "PACK")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 1}}, "PACK", PGDetached())
	if err != nil {
		t.Fatal(err)
	}
	for _, pg := range []*PlacementGroup{owned, kept} {
		if err := pg.Ready(ctx); err != nil {
			t.Fatal(err)
		}
	}
	Shutdown()
	if err := Init(ctx, Address(nodes[0].SocketAddr()), Logger(testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 20*time.Second, "after the job ended: owned group REMOVED, detached CREATED, 1 CPU free", func() error {
		list, err := ListPlacementGroups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		state := map[string]string{}
		for _, g := range list {
			state[g.ID] = g.State
		}
		free, _ := AvailableResources(ctx)
		if state[owned.ID()] == "REMOVED" && state[kept.ID()] == "CREATED" && free["CPU"] == 1 {
			return nil
		}
		return fmt.Errorf("owned %s, detached %s, %v CPU free", state[owned.ID()], state[kept.ID()], free["CPU"])
	})
}

// Remove returns only once the group's actors are DEAD and their worker
// processes stopped, and its bundles are back in the node's pool (as Ray's
// remove_placement_group): a call right after it fails with
// *ActorDiedError naming the group, every time.
func TestPlacementGroupRemoveEndsItsActorsBeforeReturning(t *testing.T) {
	startCluster(t, 1, nil) // the driver's own node: its free pool is exact
	ctx := ctxT(t)
	for round := 0; round < 5; round++ {
		pg, err := CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 1}}, "PACK")
		if err != nil {
			t.Fatal(err)
		}
		if err := pg.Ready(ctx); err != nil {
			t.Fatal(err)
		}
		h, err := Must(logActorClass.Options(InPlacementGroup(pg, 0))).Remote(ctx, "in-group")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := entriesCall.Remote(ctx, h).Get(ctx); err != nil {
			t.Fatalf("round %d: call before Remove: %v", round, err)
		}
		if err := pg.Remove(ctx); err != nil {
			t.Fatalf("round %d: Remove: %v", round, err)
		}
		got, err := entriesCall.Remote(ctx, h).Get(ctx)
		var died *ActorDiedError
		if !errors.As(err, &died) || !strings.Contains(died.Cause, pg.ID()) {
			t.Fatalf("round %d: call right after Remove = %v, %v; want *ActorDiedError naming group %s", round, got, err, pg.ID())
		}
		if err := poolsWhole(ctx); err != nil {
			t.Fatalf("round %d: right after Remove: %v", round, err)
		}
		if err := pg.Remove(ctx); err != nil {
			t.Fatalf("round %d: removing the removed group again: %v", round, err)
		}
	}
}

// gatedActor's constructor marks that it started, then waits until the file
// release exists (or 60 s pass).
type gatedActor struct{}

var gatedActorClass = RegisterActor1(func(ctx context.Context, dir string) (*gatedActor, error) {
	_ = os.WriteFile(filepath.Join(dir, "started"), nil, 0o644)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dir, "release")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &gatedActor{}, nil
})

// A group removed while an actor in it is still being constructed: Remove
// waits a bounded time for that actor and then says so, naming the group;
// the actor is ended as soon as its constructor returns, and never becomes
// ALIVE in the removed group.
func TestPlacementGroupRemoveDuringActorConstructor(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	pg, err := CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 1}}, "PACK")
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := Must(gatedActorClass.Options(InPlacementGroup(pg, 0))).Remote(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 30*time.Second, "the actor's constructor starts", func() error {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err
	})
	err = pg.Remove(ctx)
	if err == nil || !strings.Contains(err.Error(), pg.ID()) || !strings.Contains(err.Error(), h.ID()) {
		t.Fatalf("Remove during the constructor = %v, want an error naming group %s and actor %s", err, pg.ID(), h.ID())
	}
	if err := poolsWhole(ctx); err != nil {
		t.Fatalf("right after Remove: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if a := waitActorState(t, ctx, h.ID(), "DEAD"); !strings.Contains(a.DeathCause, pg.ID()) {
		t.Fatalf("actor died of %q, want its group %s named", a.DeathCause, pg.ID())
	}
}

// No task starts in a removed group's bundle once Remove returns, not even
// on a lease its submitter still holds from before: a task submitted right
// after Remove, and tasks queued on the bundle's lease behind a running one,
// are infeasible (the running one finishes, as it does in this
// implementation; Ray kills it).
func TestPlacementGroupRemoveStartsNoTaskInIt(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	newGroup := func() *PlacementGroup {
		t.Helper()
		pg, err := CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 1}}, "PACK")
		if err != nil {
			t.Fatal(err)
		}
		if err := pg.Ready(ctx); err != nil {
			t.Fatal(err)
		}
		return pg
	}
	wantRemoved := func(what string, err error) {
		t.Helper()
		var inf *InfeasibleError
		if !errors.As(err, &inf) || !strings.Contains(inf.Reason, "removed") {
			t.Fatalf("%s: %v, want an InfeasibleError saying the group was removed", what, err)
		}
	}
	for round := 0; round < 5; round++ {
		pg := newGroup()
		// The lease this leaves held (lingering for the next task) is the
		// one a task after Remove must not get.
		if _, err := Must(where.Options(InPlacementGroup(pg, 0))).Remote(ctx).Get(ctx); err != nil {
			t.Fatal(err)
		}
		if err := pg.Remove(ctx); err != nil {
			t.Fatal(err)
		}
		_, err := Must(where.Options(InPlacementGroup(pg, 0), FailIfInfeasible())).Remote(ctx).Get(ctx)
		wantRemoved(fmt.Sprintf("round %d: task right after Remove", round), err)
	}

	// Three tasks on the bundle's one lease run one at a time, in no set
	// order: remove the group while the first runs.
	pg := newGroup()
	dir := t.TempDir()
	in := Must(slowWhere.Options(InPlacementGroup(pg, 0), FailIfInfeasible()))
	var refs []Ref[string]
	markers := make([]string, 3)
	for i := range markers {
		markers[i] = filepath.Join(dir, fmt.Sprint(i))
		refs = append(refs, in.Remote(ctx, markers[i]))
	}
	startedNow := func() map[int]bool {
		out := map[int]bool{}
		for i, m := range markers {
			if _, err := os.Stat(m + ".n0"); err == nil {
				out[i] = true
			}
		}
		return out
	}
	testutil.Until(t, 30*time.Second, "a task in the group starts", func() error {
		if len(startedNow()) == 0 {
			return errors.New("none started")
		}
		return nil
	})
	if err := pg.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	started := startedNow()
	if len(started) == len(refs) {
		t.Fatalf("every task started before Remove returned (%v): nothing left to check", started)
	}
	for i, r := range refs {
		got, err := r.Get(ctx)
		if started[i] {
			if err != nil || got != "n0" {
				t.Fatalf("task %d, running during Remove = %q, %v; want it to finish on n0", i, got, err)
			}
			continue
		}
		wantRemoved(fmt.Sprintf("task %d, queued on the lease during Remove", i), err)
	}
	if late := startedNow(); len(late) != len(started) {
		t.Fatalf("tasks %v have started, but only %v had when Remove returned", late, started)
	}
	if err := poolsWhole(ctx); err != nil {
		t.Fatal(err)
	}
}
