package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/nodeup/nodeup/sched"
)

// The per-actor lock map holds only actors someone holds or waits for.
func TestActorLocksPruned(t *testing.T) {
	m := newActorManager(nil)
	for i := 0; i < 1000; i++ {
		unlock := m.lock(fmt.Sprintf("actor%d", i))
		unlock()
	}
	held := m.lock("held")
	if got := len(m.locks); got != 1 {
		t.Fatalf("%d locks in the map after 1000 released and one held, want 1", got)
	}
	held()
	if got := len(m.locks); got != 0 {
		t.Fatalf("%d locks in the map after all were released", got)
	}
}

// The leader's soft state of nodes that died or left is forgotten.
func TestLeaderSoftStatePruned(t *testing.T) {
	var l leaderState
	m := newPGManager(nil)
	live := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("node%d", i)
		l.setSoft(id, softState{incarnation: 1})
		l.markLeaving(id, 1)
		m.mu.Lock()
		m.used[id] = sched.ResourceSet{}
		m.mu.Unlock()
		live[id] = i < 3
	}
	l.prune(live)
	m.prune(live)
	if len(l.soft) != 3 || len(l.leaving) != 3 || len(m.used) != 3 {
		t.Fatalf("after pruning to 3 live nodes: %d soft, %d leaving, %d used", len(l.soft), len(l.leaving), len(m.used))
	}
}

// Finished-job memory keeps at most max IDs, the newest, and forgets
// those older than its time-to-live; a job finished again counts once.
func TestFinishedJobsBounded(t *testing.T) {
	const max = 100
	s := newExpiringSet(time.Hour, max)
	now := time.Unix(1_000_000, 0)
	for i := 0; i < 10*max; i++ {
		s.add(fmt.Sprintf("job%d", i), now)
		s.add("again", now) // re-finished all along: one entry
	}
	if len(s.at) > max || len(s.order) > 2*max {
		t.Fatalf("%d remembered, %d in order after %d jobs, want at most %d and %d", len(s.at), len(s.order), 10*max, max, 2*max)
	}
	if !s.has(fmt.Sprintf("job%d", 10*max-1)) || s.has("job0") {
		t.Fatal("the newest must be remembered and the oldest forgotten")
	}
	s.add("later", now.Add(2*time.Hour))
	if len(s.at) != 1 || !s.has("later") {
		t.Fatalf("after the time-to-live: %d remembered, want only the new one", len(s.at))
	}
}
