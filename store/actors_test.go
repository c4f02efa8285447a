package store

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/nodeup/nodeup/sched"
)

func testActor(id, ns, name string) Actor {
	return Actor{ID: id, JobID: "j1", Class: "Counter", Name: name, Namespace: ns, State: ActorPending,
		MaxRestarts: 2, MaxConcurrency: 1, Resources: sched.ResourceSet{"TPU-v3": 2 * sched.Unit},
		Constructor: "main.NewCounter", Args: []byte{0x91, 0x01}, BinaryHash: "h", OwnerAddr: "127.0.0.1:1"}
}

func TestActorRegisterNamesAndGetIfExists(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	res := mustApply(t, f, 1, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a1", "ns", "counter")}).(*ActorRegisterResult)
	if res.ID != "a1" || res.Existing {
		t.Fatalf("register a1 = %+v", res)
	}
	// Same name, same namespace: taken, unless GetIfExists.
	err := applyErr(t, f, 2, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a2", "ns", "counter")})
	if !errors.Is(err, ErrActorNameTaken) {
		t.Fatalf("duplicate name: %v, want ErrActorNameTaken", err)
	}
	res = mustApply(t, f, 3, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a2", "ns", "counter"), GetIfExists: true}).(*ActorRegisterResult)
	if res.ID != "a1" || !res.Existing {
		t.Fatalf("get-if-exists = %+v, want a1 existing", res)
	}
	if a, _ := f.State().ActorByID("a2"); a != nil {
		t.Fatalf("get-if-exists wrote a second actor: %+v", a)
	}
	// Another namespace may reuse the name; unnamed actors never clash.
	mustApply(t, f, 4, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a3", "other", "counter")})
	mustApply(t, f, 5, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a4", "ns", "")})
	mustApply(t, f, 6, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a5", "ns", "")})
	if err := applyErr(t, f, 7, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a5", "ns", "")}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("reused ID: %v", err)
	}
	got, _ := f.State().ActorByName("ns", "counter")
	if got == nil || got.ID != "a1" || got.State != ActorPending || got.CreateIndex != 1 {
		t.Fatalf("by name = %+v", got)
	}
	all, _ := f.State().Actors()
	if len(all) != 4 || all[0].ID != "a1" || all[3].ID != "a5" {
		t.Fatalf("Actors() = %d actors", len(all))
	}
}

func TestActorUpdateDeadIsFinalAndFreesName(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	mustApply(t, f, 1, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a1", "ns", "c")})
	a := testActor("a1", "ns", "c")
	a.State, a.NodeID, a.WorkerAddr, a.PID = ActorAlive, "n1", "127.0.0.1:5", 42
	mustApply(t, f, 2, ActorUpdateType, ActorUpdateRequest{Actor: a})
	got, _ := f.State().ActorByID("a1")
	if got.State != ActorAlive || got.PID != 42 || got.CreateIndex != 1 || got.ModifyIndex != 2 {
		t.Fatalf("after update: %+v", got)
	}
	a.State, a.DeathCause = ActorDead, "killed"
	mustApply(t, f, 3, ActorUpdateType, ActorUpdateRequest{Actor: a})
	if got, _ := f.State().ActorByName("ns", "c"); got != nil {
		t.Fatalf("a dead actor still holds its name: %+v", got)
	}
	a.State = ActorAlive
	if err := applyErr(t, f, 4, ActorUpdateType, ActorUpdateRequest{Actor: a}); !errors.Is(err, ErrActorDead) {
		t.Fatalf("update of a dead actor: %v, want ErrActorDead", err)
	}
	if got, _ := f.State().ActorByID("a1"); got.State != ActorDead || got.DeathCause != "killed" {
		t.Fatalf("dead actor changed: %+v", got)
	}
	// The name is free again.
	mustApply(t, f, 5, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a2", "ns", "c")})
	live, _ := f.State().LiveActors()
	if all, _ := f.State().Actors(); len(all) != 2 || len(live) != 1 || live[0].ID != "a2" {
		t.Fatalf("live actors %v of %d: want only a2", live, len(all))
	}
	if err := applyErr(t, f, 6, ActorUpdateType, ActorUpdateRequest{Actor: testActor("zz", "ns", "")}); !errors.Is(err, ErrActorNotFound) {
		t.Fatalf("update of unknown actor: %v", err)
	}
	bad := testActor("a2", "ns", "c")
	bad.State = "ZOMBIE"
	if err := applyErr(t, f, 7, ActorUpdateType, ActorUpdateRequest{Actor: bad}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("bad state: %v", err)
	}
}

func TestActorsSurviveSnapshotRestore(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	mustApply(t, f, 1, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a1", "ns", "c")})
	mustApply(t, f, 2, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a2", "ns", "")})
	g := restored(t, f)
	got, _ := g.State().ActorByName("ns", "c")
	if got == nil || got.ID != "a1" || got.Resources["TPU-v3"] != 2*sched.Unit || !bytes.Equal(got.Args, []byte{0x91, 0x01}) {
		t.Fatalf("restored actor = %+v", got)
	}
	if all, _ := g.State().Actors(); len(all) != 2 {
		t.Fatalf("restored %d actors", len(all))
	}
}

// TestDeadActorsArePruned: the table keeps the newest MaxDeadActors dead
// actors, never a live one, and a restored snapshot keeps counting.
func TestDeadActorsArePruned(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	idx := uint64(1)
	mustApply(t, f, idx, ActorRegisterType, ActorRegisterRequest{Actor: testActor("live", "ns", "keep")})
	idx++
	kill := func(f *FSM, id string) {
		mustApply(t, f, idx, ActorRegisterType, ActorRegisterRequest{Actor: testActor(id, "ns", "")})
		a := testActor(id, "ns", "")
		a.State, a.DeathCause = ActorDead, "killed"
		mustApply(t, f, idx+1, ActorUpdateType, ActorUpdateRequest{Actor: a})
		idx += 2
	}
	for i := range MaxDeadActors + 5 {
		kill(f, fmt.Sprintf("d%06d", i))
	}
	check := func(f *FSM, oldest string, total int) {
		t.Helper()
		all, _ := f.State().Actors()
		if len(all) != total {
			t.Fatalf("%d actors kept, want %d", len(all), total)
		}
		if a, _ := f.State().ActorByID("live"); a == nil || a.State != ActorPending {
			t.Fatalf("the live actor was pruned: %+v", a)
		}
		if a, _ := f.State().ActorByID(oldest); a == nil || a.State != ActorDead || a.DeathCause != "killed" {
			t.Fatalf("oldest kept dead actor %s = %+v", oldest, a)
		}
	}
	check(f, "d000005", MaxDeadActors+1)
	if a, _ := f.State().ActorByID("d000004"); a != nil {
		t.Fatalf("d000004 was kept: %+v", a)
	}

	g := restored(t, f)
	check(g, "d000005", MaxDeadActors+1)
	kill(g, "z")
	check(g, "d000006", MaxDeadActors+1)
}

// An update carrying an older incarnation than the table's (a placement the
// leader abandoned when its node died, recorded late) is refused: the newer
// placement stands.
func TestActorUpdateKeepsTheNewerIncarnation(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	mustApply(t, f, 1, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a1", "ns", "")})
	newer := testActor("a1", "ns", "")
	newer.State, newer.Restarts, newer.NodeID = ActorAlive, 1, "n2"
	mustApply(t, f, 2, ActorUpdateType, ActorUpdateRequest{Actor: newer})
	late := testActor("a1", "ns", "")
	late.State, late.Restarts, late.NodeID = ActorAlive, 0, "n1"
	if err := applyErr(t, f, 3, ActorUpdateType, ActorUpdateRequest{Actor: late}); !errors.Is(err, ErrActorStaleIncarnation) {
		t.Fatalf("late update of incarnation 0: %v, want ErrActorStaleIncarnation", err)
	}
	if got, _ := f.State().ActorByID("a1"); got.Restarts != 1 || got.NodeID != "n2" {
		t.Fatalf("table after the late update: %+v, want incarnation 1 on n2", got)
	}
}
