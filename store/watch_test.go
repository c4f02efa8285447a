package store

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	memdb "github.com/hashicorp/go-memdb"
)

// fired reports whether any channel of ws has fired, without waiting.
func fired(ws memdb.WatchSet) bool {
	for ch := range ws {
		select {
		case <-ch:
			return true
		default:
		}
	}
	return false
}

// A watch on one actor sleeps through writes to other tables and other
// actors, and fires when that actor changes, and when a restore replaces
// the state.
func TestActorByIDWatchFiresOnlyForItsRecord(t *testing.T) {
	f := NewFSM(nil)
	s := f.State()
	mustApply(t, f, 1, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a1", "ns", "one")})
	mustApply(t, f, 2, ActorRegisterType, ActorRegisterRequest{Actor: testActor("a2", "ns", "two")})
	watch := func() memdb.WatchSet {
		ws := memdb.NewWatchSet()
		if a, err := s.ActorByIDWatch(ws, "a1"); err != nil || a == nil {
			t.Fatalf("ActorByIDWatch: %v, %v", a, err)
		}
		return ws
	}
	ws := watch()
	idx := uint64(3)
	for i := 0; i < 100; i++ {
		mustApply(t, f, idx, KVSetType, KVSetRequest{Key: fmt.Sprintf("k%d", i), Value: []byte("v")})
		idx++
	}
	other := testActor("a2", "ns", "two")
	other.PendingReason = "waiting"
	mustApply(t, f, idx, ActorUpdateType, ActorUpdateRequest{Actor: other})
	idx++
	if fired(ws) {
		t.Fatal("the watch on a1 fired for writes to other records")
	}
	mine := testActor("a1", "ns", "one")
	mine.PendingReason = "waiting"
	mustApply(t, f, idx, ActorUpdateType, ActorUpdateRequest{Actor: mine})
	if !fired(ws) {
		t.Fatal("the watch on a1 did not fire when a1 changed")
	}

	ws = watch()
	if err := f.Restore(io.NopCloser(bytes.NewReader(persist(t, f)))); err != nil {
		t.Fatal(err)
	}
	if !fired(ws) {
		t.Fatal("the watch on a1 did not fire at a restore")
	}
}
