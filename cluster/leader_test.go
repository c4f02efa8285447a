package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// A leadership transfer revokes the old leader's term (none of its
// leader-only goroutines keeps running) and the new leader picks up the
// actor and placement group left pending.
func TestLeadershipTransferStopsOldTermAndResumesWork(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	old := leaderOf(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Both wait for a "widget" no node has yet.
	pg := createPG(t, old, "PACK", res("widget", 1))
	const actorID = "0123456789abcdef0badc0de"
	if _, err := old.actorCreate(ctx, &wire.ActorCreateRequest{ActorID: actorID, JobID: "job1", Class: "C", Constructor: "C",
		BinaryHash: strings.Repeat("ab", 32), MaxConcurrency: 1, Resources: res("widget", 1), Detached: true}); err != nil {
		t.Fatal(err)
	}
	// actorPending is the actor's pending reason at nd's table, and whether
	// it is infeasible.
	actorPending := func(nd *Node) (string, bool, error) {
		a, err := nd.State().ActorByID(actorID)
		if err != nil || a == nil {
			return "", false, fmt.Errorf("actor %s: %v", actorID, err)
		}
		if a.State != store.ActorPending {
			return "", false, fmt.Errorf("actor is %s, want PENDING", a.State)
		}
		return a.PendingReason, a.Infeasible, nil
	}
	testutil.Until(t, 10*time.Second, "actor infeasible at the old leader", func() error {
		r, infeasible, err := actorPending(old)
		if err == nil && !infeasible {
			err = fmt.Errorf("pending reason %q, not infeasible", r)
		}
		return err
	})
	term := old.leader.currentTerm()
	if term == nil {
		t.Fatal("the leader has no term")
	}
	testutil.Until(t, 10*time.Second, "the leader's loops running", func() error {
		got := term.names()
		for _, want := range []string{"actor-retry", "leader-reconcile", "pg-retry"} {
			if !slices.Contains(got, want) {
				return fmt.Errorf("running %v, missing %s", got, want)
			}
		}
		return nil
	})

	if err := old.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 15*time.Second, "old term revoked", func() error {
		if old.leader.currentTerm() != nil {
			return fmt.Errorf("old leader still holds a term (leader: %v)", old.IsLeader())
		}
		if left := term.names(); len(left) > 0 {
			return fmt.Errorf("old term still runs %v", left)
		}
		return nil
	})
	if term.goCtx("late", func(context.Context) {}) {
		t.Fatal("a revoked term started a goroutine")
	}
	var rest []*Node
	for _, nd := range nodes {
		if nd != old {
			rest = append(rest, nd)
		}
	}
	leader := leaderOf(t, rest)

	// A node with widgets arrives: only the new leader's retry loops can
	// place what waits.
	cfg := testConfig(t, t.TempDir(), "widgets")
	cfg.Server, cfg.Join = false, []string{leader.RPCAddr()}
	cfg.Token = headToken(t, nodes[0]) // its record is in Raft: any leader honours it
	cfg.Resources["widget"] = res("widget", 2)["widget"]
	extra, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(extra.Kill)
	waitPG(t, leader, pg.ID, 20*time.Second, isState(store.PGCreated))
	testutil.Until(t, 20*time.Second, "new leader retried the actor", func() error {
		r, infeasible, err := actorPending(leader)
		if err != nil && !strings.Contains(err.Error(), "want PENDING") {
			return err
		}
		if infeasible {
			return fmt.Errorf("pending reason still %q, infeasible", r)
		}
		return nil
	})
}
