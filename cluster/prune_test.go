package cluster

import (
	"fmt"
	"testing"

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
