package store

import (
	"slices"
	"testing"
)

// WaitingActors lists PENDING and RESTARTING actors only, in creation
// order, also after a snapshot restore rebuilds the index.
func TestWaitingActors(t *testing.T) {
	f := NewFSM(nil)
	for i, st := range []ActorState{ActorPending, ActorAlive, ActorRestarting, ActorDead} {
		a := testActor(string(rune('a'+i))+"1", "ns", "")
		a.State = st
		mustApply(t, f, uint64(i+1), ActorRegisterType, ActorRegisterRequest{Actor: a})
	}
	for _, fsm := range []*FSM{f, restored(t, f)} {
		waiting, err := fsm.State().WaitingActors()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, a := range waiting {
			ids = append(ids, a.ID)
		}
		if !slices.Equal(ids, []string{"a1", "c1"}) {
			t.Fatalf("waiting actors %v, want [a1 c1]", ids)
		}
	}
}
