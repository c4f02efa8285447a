package cluster

import (
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/store"
)

// Only members that failed (not left) less than the timeout ago are retried;
// live ones are counted, this node once.
func TestReconnectTargets(t *testing.T) {
	m, err := newMembership(gossipMeta{ID: "self"}, testutil.Logger())
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

// Remembered peers are tried until gossip shows them, and, across restarts,
// until ReconnectTimeout after the time the file says they failed.
func TestRememberedPeersAreReconnectTargets(t *testing.T) {
	m, err := newMembership(gossipMeta{ID: "self"}, testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m.members["known"] = &member{gossipMeta: gossipMeta{ID: "known"}, Status: store.NodeAlive, Since: now}
	m.remember([]peerRecord{
		{ID: "self", Gossip: "10.0.0.1:7371"},
		{ID: "known", Gossip: "10.0.0.2:7371"},
		{ID: "was-alive", Gossip: "10.0.0.3:7371"},
		{ID: "failed-recently", Gossip: "10.0.0.4:7371", FailedAt: now.Add(-time.Hour).Unix()},
		{ID: "failed-long-ago", Gossip: "10.0.0.5:7371", FailedAt: now.Add(-73 * time.Hour).Unix()},
	})
	targets, _ := m.reconnectTargets(now, 72*time.Hour)
	got := map[string]string{}
	for _, tg := range targets {
		got[tg.ID] = tg.GossipAddr
	}
	if len(got) != 2 || got["was-alive"] != "10.0.0.3:7371" || got["failed-recently"] != "10.0.0.4:7371" {
		t.Fatalf("targets %v, want was-alive and failed-recently", got)
	}
	// Once gossip shows a remembered peer, its member record takes over.
	m.members["was-alive"] = &member{gossipMeta: gossipMeta{ID: "was-alive"}, Status: store.NodeAlive, Since: now}
	if targets, _ := m.reconnectTargets(now, 72*time.Hour); len(targets) != 1 || targets[0].ID != "failed-recently" {
		t.Fatalf("targets %+v after was-alive joined, want failed-recently only", targets)
	}
	// peers.json keeps what is still tried, with when it failed.
	recs := m.peerRecords(now, 72*time.Hour)
	if len(recs) != 3 || recs[0].ID != "failed-recently" || recs[0].FailedAt != now.Add(-time.Hour).Unix() {
		t.Fatalf("peer records %+v, want failed-recently (failed an hour ago), known, was-alive", recs)
	}
}
