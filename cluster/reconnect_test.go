package cluster

import (
	"testing"
	"time"

	"github.com/nodeup/nodeup/store"
)

// Only members that failed (not left) less than the timeout ago are retried;
// live ones are counted, this node once.
func TestReconnectTargets(t *testing.T) {
	m, err := newMembership(gossipMeta{ID: "self"}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	add := func(id string, status store.NodeStatus, ago time.Duration) {
		m.members[id] = &member{gossipMeta: gossipMeta{ID: id, Name: id}, GossipAddr: "127.0.0.1:1", Status: status, Since: now.Add(-ago)}
	}
	add("self", store.NodeAlive, time.Hour)
	add("alive", store.NodeAlive, time.Hour)
	add("dead-recently", store.NodeDead, time.Minute)
	add("dead-long-ago", store.NodeDead, 73*time.Hour)
	add("left", store.NodeLeft, time.Minute)
	targets, alive := m.reconnectTargets(now, 72*time.Hour)
	if len(targets) != 1 || targets[0].ID != "dead-recently" || alive != 2 {
		t.Fatalf("targets %+v, alive %d; want only dead-recently, alive 2 (self and alive)", targets, alive)
	}
}
