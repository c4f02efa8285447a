package worker

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
)

// Issue 13 item 4, the actor: a node that freezes (as under SIGSTOP: its
// links go silent, its processes run on) is declared dead, and its actor,
// which may restart forever, must be restarted on another node promptly:
// the leader must neither choose the dead node again from a view a
// heartbeat old nor wait on a start call the frozen node never answers.
// Once the leader's table records the node dead, the actor leaves it (the
// restart is the next Raft write), and is ALIVE elsewhere within 5 s.
func TestFrozenNodesActorRestartsElsewhere(t *testing.T) {
	// Quarantined: in about one run in eight the leader never declares the
	// frozen node dead within the minute (cluster.FreezeLinks may leave a
	// gossip path open); until that is understood it runs only on request.
	if os.Getenv("NODEUP_FLAKY_TESTS") == "" {
		t.Skip("quarantined (flaky: the frozen node is sometimes never declared dead); run with NODEUP_FLAKY_TESTS=1")
	}
	links := []*cluster.FreezeLinks{cluster.NewFreezeLinks(), cluster.NewFreezeLinks(), cluster.NewFreezeLinks()}
	nodes := startClusterInit(t, 3, func(i int, cfg *cluster.Config) {
		cfg.SetFreezeLinks(links[i])
		if i > 0 {
			cfg.Resources["shared"] = sched.QuantityOf(1)
		}
	})
	ctx := ctxT(t)
	var leader, victim *cluster.Node
	vi := 0
	for i, nd := range nodes {
		switch {
		case nd.IsLeader():
			leader = nd
		case i > 0 && victim == nil:
			victim, vi = nd, i
		}
	}
	if leader == nil || victim == nil {
		t.Fatalf("no leader (%v) or no follower with the shared resource (%v)", leader, victim)
	}
	h, err := Must(logActorClass.Options(Resources(map[string]float64{"shared": 1}), NodeAffinity(victim.ID(), true), MaxRestarts(-1))).Remote(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	oldPID, err := pidCall.Remote(ctx, h).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := actorState(t, ctx, h.ID()); a.State != "ALIVE" || a.NodeID != victim.ID() {
		t.Fatalf("before the freeze: %+v, want ALIVE on %s", a, victim.Name())
	}
	setFrozen := func(frozen bool) {
		for i, nd := range nodes {
			if i == vi {
				continue
			}
			if frozen {
				links[vi].Freeze(nd.PeerAddrs())
				links[i].Freeze(victim.PeerAddrs())
			} else {
				links[vi].Thaw(nd.PeerAddrs())
				links[i].Thaw(victim.PeerAddrs())
			}
		}
	}
	setFrozen(true)
	// Resume it before the nodes stop (cleanups run last first): Raft's
	// shutdown waits for replication calls blocked on its silent links.
	t.Cleanup(func() { setFrozen(false) })
	frozen := time.Now()
	t.Logf("froze %s's links; leader %s", victim.Name(), leader.Name())

	var declared time.Time
	var moved *store.Actor
	testutil.Until(t, 60*time.Second, "actor restarted off frozen "+victim.Name(), func() error {
		st := leader.State()
		nd, err := st.NodeByID(victim.ID())
		if err != nil {
			t.Fatal(err)
		}
		a, err := st.ActorByID(h.ID())
		if err != nil || a == nil {
			t.Fatalf("actor %s: %+v, %v", h.ID(), a, err)
		}
		if declared.IsZero() && !nd.Status.Live() {
			declared = time.Now()
			t.Logf("leader declared %s %s %s after the freeze", victim.Name(), nd.Status, declared.Sub(frozen).Round(time.Millisecond))
		}
		switch {
		case declared.IsZero():
			return fmt.Errorf("%s still %s", victim.Name(), nd.Status)
		case a.State != store.ActorAlive:
			return fmt.Errorf("actor %s", a.State)
		case a.NodeID == victim.ID():
			// The restart is its own Raft write after the node's status.
			if time.Since(declared) > 2*time.Second {
				t.Fatalf("actor still ALIVE on %s %s after the leader declared it %s: %+v", victim.Name(), time.Since(declared), nd.Status, a)
			}
			return fmt.Errorf("actor still ALIVE on %s", victim.Name())
		}
		moved = a
		return nil
	})
	took := time.Since(declared)
	t.Logf("actor ALIVE on %s (incarnation %d) %s after %s was declared dead", moved.NodeName, moved.Restarts, took.Round(time.Millisecond), victim.Name())
	if took > 5*time.Second {
		t.Fatalf("actor restarted %s after its node was declared dead, want within 5 s", took)
	}
	if info := actorState(t, ctx, h.ID()); info.State != "ALIVE" || info.NodeID == victim.ID() {
		t.Fatalf("ListActors: %+v, want ALIVE off %s", info, victim.Name())
	}
	checkResumedNodeStopsOldCopy(t, setFrozen, oldPID, moved)
}

// checkResumedNodeStopsOldCopy resumes the frozen node and checks that its
// late report of the old incarnation does not bring the table back to it,
// and that the node stops the old process.
func checkResumedNodeStopsOldCopy(t *testing.T, setFrozen func(bool), oldPID int, placed *store.Actor) {
	t.Helper()
	setFrozen(false)
	ctx := ctxT(t)
	testutil.Until(t, 20*time.Second, fmt.Sprintf("old actor process %d ends after its node resumed", oldPID), func() error {
		if syscall.Kill(oldPID, 0) == nil {
			return errors.New("still runs")
		}
		return nil
	})
	// The resumed node's own stale gossip may get a healthy node declared
	// dead for a moment (a restart more): the table must only never go back
	// to the old incarnation.
	info := actorState(t, ctx, placed.ID)
	if info.Restarts < placed.Restarts || info.PID == oldPID {
		t.Fatalf("after the node resumed: %+v, want incarnation %d or later, not pid %d", info, placed.Restarts, oldPID)
	}
}
