package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// A long poll on actor A sleeps through 100 unrelated KV writes and wakes
// at once when A changes.
func TestLongPollWakesOnlyForItsActor(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	n := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const id = "0123456789abcdef0a0a0a0a"
	if _, err := n.actorCreate(ctx, &wire.ActorCreateRequest{ActorID: id, JobID: "job1", Class: "C", Constructor: "C",
		BinaryHash: strings.Repeat("ab", 32), MaxConcurrency: 1, Resources: res("widget", 1), Detached: true}); err != nil {
		t.Fatal(err)
	}
	// Placement records why it waits once; after that A does not change.
	testutil.Until(t, 10*time.Second, "pending reason recorded", func() error {
		if a, err := n.State().ActorByID(id); err != nil || a == nil || a.PendingReason == "" {
			return fmt.Errorf("actor %+v: %v", a, err)
		}
		return nil
	})

	var looks atomic.Int64
	req := &wire.ActorGetRequest{ActorID: id, WaitMillis: 30_000, NotIncarnation: -1}
	var info wire.ActorInfo
	look := n.actorLook(req, &info)
	ended := make(chan error, 1)
	go func() {
		ended <- n.longPoll(ctx, req.WaitMillis, func(ws memdb.WatchSet) (bool, error) {
			looks.Add(1)
			return look(ws)
		})
	}()
	testutil.Until(t, 5*time.Second, "first look", func() error {
		if looks.Load() == 0 {
			return fmt.Errorf("not looked yet")
		}
		return nil
	})
	for i := 0; i < 100; i++ {
		if _, err := n.apply(store.KVSetType, &store.KVSetRequest{Key: fmt.Sprintf("unrelated/%d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if got := looks.Load() - 1; got != 0 {
		t.Fatalf("the long poll woke %d times for 100 unrelated KV writes, want 0", got)
	}
	start := time.Now()
	if _, err := n.actorKill(ctx, &wire.ActorKillRequest{ActorID: id, NoRestart: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil || info.State != string(store.ActorDead) {
			t.Fatalf("long poll ended with %v, actor %s", err, info.State)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the long poll did not wake when the actor changed")
	}
	t.Logf("woke %s after the actor changed; %d looks in all", time.Since(start), looks.Load())
}
