package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/sched"
)

func testPG(id, name string, strategy sched.PlacementStrategy, bundles ...sched.ResourceSet) PlacementGroup {
	return PlacementGroup{ID: id, Name: name, Namespace: "ns", JobID: "j1", Strategy: strategy, Bundles: bundles}
}

func cpus(n int64) sched.ResourceSet { return sched.ResourceSet{"CPU": sched.QuantityOf(n)} }

// pgWrite applies ops in one entry and returns the per-op errors.
func pgWrite(t *testing.T, f *FSM, index uint64, ops ...PlacementGroupOp) []error {
	t.Helper()
	return mustApply(t, f, index, PlacementGroupWriteType, PlacementGroupWriteRequest{Ops: ops}).(*PlacementGroupWriteResult).Errors
}

func TestPlacementGroupReservationsRespectCapacity(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	mustApply(t, f, 1, NodeRegisterType, NodeRegisterRequest{Node: testNode("n1")}) // 4 CPU
	mustApply(t, f, 2, NodeRegisterType, NodeRegisterRequest{Node: testNode("n2")})
	a := testPG("aaaaaaaa", "a", sched.StrictSpread, cpus(3), cpus(3))
	a.State, a.Nodes = PGCreated, []string{"n1", "n2"}
	b := testPG("bbbbbbbb", "b", sched.Pack, cpus(2))
	b.State, b.Nodes = PGCreated, []string{"n1"}      // 3+2 > 4: refused
	c := testPG("cccccccc", "a", sched.Pack, cpus(1)) // name taken
	d := testPG("dddddddd", "", sched.StrictSpread, cpus(1), cpus(1))
	d.State, d.Nodes = PGCreated, []string{"n1", "n1"} // breaks STRICT_SPREAD
	errs := pgWrite(t, f, 3,
		PlacementGroupOp{Kind: PGOpCreate, Group: a},
		PlacementGroupOp{Kind: PGOpCreate, Group: b},
		PlacementGroupOp{Kind: PGOpCreate, Group: c},
		PlacementGroupOp{Kind: PGOpCreate, Group: d})
	if errs[0] != nil || !errors.Is(errs[1], ErrReservation) || !errors.Is(errs[2], ErrPlacementGroupNameTaken) || !errors.Is(errs[3], ErrReservation) {
		t.Fatalf("errors = %v", errs)
	}
	if g, _ := f.State().PlacementGroupByID("bbbbbbbb"); g != nil {
		t.Fatalf("refused group stored: %+v", g)
	}
	res, _ := f.State().PlacementReserved()
	if res["n1"]["CPU"] != sched.QuantityOf(3) || res["n2"]["CPU"] != sched.QuantityOf(3) {
		t.Fatalf("reserved = %v", res)
	}
	// Pending, then reserved once the first is removed.
	b.State, b.Nodes = PGPending, nil
	if errs := pgWrite(t, f, 4, PlacementGroupOp{Kind: PGOpCreate, Group: b}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if errs := pgWrite(t, f, 5, PlacementGroupOp{Kind: PGOpReserve, ID: "bbbbbbbb", Nodes: []string{"n1"}}); !errors.Is(errs[0], ErrReservation) {
		t.Fatalf("over-reserve: %v", errs[0])
	}
	errs = pgWrite(t, f, 6, PlacementGroupOp{Kind: PGOpRemove, ID: "aaaaaaaa"},
		PlacementGroupOp{Kind: PGOpReserve, ID: "bbbbbbbb", Nodes: []string{"n1"}},
		PlacementGroupOp{Kind: PGOpReserve, ID: "aaaaaaaa", Nodes: []string{"n1", "n2"}})
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ErrPlacementGroupRemoved) {
		t.Fatalf("remove+reserve: %v", errs)
	}
	res, _ = f.State().PlacementReserved()
	if res["n1"]["CPU"] != sched.QuantityOf(2) || len(res["n2"]) != 0 {
		t.Fatalf("reserved after remove = %v", res)
	}
	// A removed group frees its name.
	c.State = PGPending
	if errs := pgWrite(t, f, 7, PlacementGroupOp{Kind: PGOpCreate, Group: c}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// The live listing skips the removed group, also after a restore.
	for _, f := range []*FSM{f, restored(t, f)} {
		live, _ := f.State().LivePlacementGroups()
		var ids []string
		for _, g := range live {
			ids = append(ids, g.ID)
		}
		if strings.Join(ids, " ") != "bbbbbbbb cccccccc" {
			t.Fatalf("live groups %v, want b and c in creation order", ids)
		}
	}
}

func TestPlacementGroupLoseAndSnapshot(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	mustApply(t, f, 1, NodeRegisterType, NodeRegisterRequest{Node: testNode("n1")})
	mustApply(t, f, 2, NodeRegisterType, NodeRegisterRequest{Node: testNode("n2")})
	a := testPG("aaaaaaaa", "a", sched.Spread, cpus(1), cpus(2))
	a.State, a.Nodes = PGCreated, []string{"n1", "n2"}
	pgWrite(t, f, 3, PlacementGroupOp{Kind: PGOpCreate, Group: a})
	pgWrite(t, f, 4, PlacementGroupOp{Kind: PGOpLose, ID: "aaaaaaaa", Nodes: []string{"n2"}})
	g, _ := f.State().PlacementGroupByID("aaaaaaaa")
	if g.State != PGRescheduling || g.Nodes[0] != "n1" || g.Nodes[1] != "" {
		t.Fatalf("after lose: %+v", g)
	}
	r := restored(t, f)
	got, _ := r.State().PlacementGroupByName("ns", "a")
	if got == nil || got.State != PGRescheduling || got.Bundles[1]["CPU"] != sched.QuantityOf(2) {
		t.Fatalf("restored = %+v", got)
	}
	res, _ := r.State().PlacementReserved()
	if res["n1"]["CPU"] != sched.QuantityOf(1) || len(res["n2"]) != 0 {
		t.Fatalf("restored reservations = %v", res)
	}
	// Restored state keeps enforcing capacity: n2 has 4 CPUs.
	errs := pgWrite(t, r, 5, PlacementGroupOp{Kind: PGOpReserve, ID: "aaaaaaaa", Nodes: []string{"n1", "n2"}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if g, _ := r.State().PlacementGroupByID("aaaaaaaa"); g.State != PGCreated {
		t.Fatalf("after reserve: %+v", g)
	}
}

func TestPlacementGroupRemovedArePruned(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	idx := uint64(1)
	createRemove := func(f *FSM, i int) {
		id := "a" + sched.QuantityOf(int64(i+1000000)).String()
		g := testPG(id, "", sched.Pack, cpus(1))
		pgWrite(t, f, idx, PlacementGroupOp{Kind: PGOpCreate, Group: g}, PlacementGroupOp{Kind: PGOpRemove, ID: id})
		idx++
	}
	check := func(f *FSM, oldest string) {
		t.Helper()
		all, _ := f.State().PlacementGroups()
		if len(all) != MaxRemovedPlacementGroups {
			t.Fatalf("%d groups kept, want %d", len(all), MaxRemovedPlacementGroups)
		}
		if all[0].ID != oldest {
			t.Fatalf("oldest kept = %s, want %s", all[0].ID, oldest)
		}
	}
	for i := 0; i < MaxRemovedPlacementGroups+5; i++ {
		createRemove(f, i)
	}
	check(f, "a1000005")
	// A restored snapshot keeps counting.
	r := restored(t, f)
	check(r, "a1000005")
	createRemove(r, MaxRemovedPlacementGroups+5)
	check(r, "a1000006")
}
