package cluster

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
)

// fakeActor is a stand-in actor on a node: a process (a shell script that
// sleeps) registered as actor id's incarnation inc, holding 1 CPU, as
// actorStart leaves a started actor, plus a task worker of the same
// incarnation's job (a nested task's).
type fakeActor struct {
	id          string
	inc         int
	actor, task *workerProc
}

const fakeActorHash = "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0"

func startFakeActor(t *testing.T, nd *Node, id string, inc int) *fakeActor {
	t.Helper()
	p := nd.workers
	if err := os.MkdirAll(p.binDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	bin, err := p.binPath(fakeActorHash)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 600\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	l := nd.local.tryGrant(sched.ResourceSet{sched.CPU: sched.QuantityOf(1)})
	if l == nil {
		t.Fatal("no CPU free for the fake actor")
	}
	job := actorJobID(id, inc)
	p.mu.Lock()
	actor, err := p.start(procSpec{job: job, actor: id, binHash: fakeActorHash})
	var task *workerProc
	if err == nil {
		task, err = p.start(procSpec{job: job, binHash: fakeActorHash})
	}
	if err == nil {
		p.actors[id] = &actorProc{id: id, incarnation: inc, lease: l.id, w: actor}
	}
	p.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	nd.local.setWorker(l.id, actor.id)
	t.Cleanup(func() {
		for _, w := range []*workerProc{actor, task} {
			_ = w.proc.Kill()
			<-w.dead
		}
	})
	return &fakeActor{id: id, inc: inc, actor: actor, task: task}
}

func exited(w *workerProc) bool {
	select {
	case <-w.dead:
		return true
	default:
		return false
	}
}

// recordActor writes a into the table through the leader.
func recordActor(t *testing.T, leader *Node, a store.Actor) {
	t.Helper()
	a.JobID, a.Class, a.Constructor, a.BinaryHash, a.MaxConcurrency = "j0b", "Fake", "Fake", fakeActorHash, 1
	if a.Resources == nil {
		a.Resources = sched.ResourceSet{sched.CPU: sched.QuantityOf(1)}
	}
	if _, err := leader.apply(store.ActorRegisterType, &store.ActorRegisterRequest{Actor: a}); err != nil {
		t.Fatal(err)
	}
}

// heartbeatsAfter waits until the leader has taken n more heartbeats from nd.
func heartbeatsAfter(t *testing.T, leader, nd *Node, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		leader.leader.mu.Lock()
		since := leader.leader.soft[nd.ID()].at
		leader.leader.mu.Unlock()
		testutil.Until(t, 10*time.Second, "a heartbeat from "+nd.Name(), func() error {
			leader.leader.mu.Lock()
			defer leader.leader.mu.Unlock()
			if !leader.leader.soft[nd.ID()].at.After(since) {
				return fmt.Errorf("none since %s", since.Format(time.StampMilli))
			}
			return nil
		})
	}
}

// A node stops an actor process the leader's table has moved past, as its
// heartbeat learns: ended (DEAD) or replaced by a newer incarnation, its job
// ends with it; alive in the same incarnation on another node, its job's
// other workers are left alone and no death is reported (that would restart
// the live one). The process of the incarnation the table places here runs on.
func TestNodeStopsActorsTheTableMovedPast(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	nd := nodes[0]
	self := store.Actor{NodeID: nd.ID(), NodeName: nd.Name(), NodeAddr: nd.RPCAddr()}
	elsewhere := store.Actor{NodeID: strings.Repeat("e", 32), NodeName: "elsewhere", NodeAddr: "127.0.0.1:1"}
	for _, tc := range []struct {
		name             string
		table            store.Actor // the table's record (ID and place filled in)
		stopped, jobEnds bool
	}{
		{"dead", store.Actor{State: store.ActorDead, DeathCause: "its node n9 is dead"}, true, true},
		// The leader's retry loop places a RESTARTING actor: one that needs
		// what no node has stays in the table as written.
		{"replaced", store.Actor{State: store.ActorRestarting, Restarts: 1, Resources: sched.ResourceSet{"absent": sched.Unit}}, true, true},
		{"alive elsewhere", store.Actor{State: store.ActorAlive}, true, false},
		{"alive here", store.Actor{State: store.ActorAlive}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newID()[:24]
			place := self
			if tc.name == "alive elsewhere" {
				place = elsewhere
			}
			rec := tc.table
			rec.ID, rec.NodeID, rec.NodeName, rec.NodeAddr = id, place.NodeID, place.NodeName, place.NodeAddr
			fa := startFakeActor(t, nd, id, 0)
			recordActor(t, nd, rec)
			if tc.stopped {
				testutil.Until(t, 10*time.Second, "stale actor process stopped", func() error {
					if !exited(fa.actor) {
						return fmt.Errorf("pid %d still runs", fa.actor.proc.Pid())
					}
					return nil
				})
			}
			heartbeatsAfter(t, nd, nd, 3)
			if got := exited(fa.actor); got != tc.stopped {
				t.Fatalf("actor process exited: %v, want %v", got, tc.stopped)
			}
			if got := exited(fa.task); got != tc.jobEnds {
				t.Fatalf("its job's task worker exited: %v, want %v", got, tc.jobEnds)
			}
			if tc.stopped {
				if free, total := nd.local.available()[sched.CPU], nd.local.totals()[sched.CPU]; free != total {
					t.Fatalf("CPU free after the stop: %s of %s", free, total)
				}
				a, err := nd.State().ActorByID(id)
				if err != nil || a.State != rec.State || a.Restarts != rec.Restarts {
					t.Fatalf("table after the stop: %+v, %v (want %s, restarts %d: no death reported)", a, err, rec.State, rec.Restarts)
				}
			}
		})
	}
}

// Issue 13 item 2, the actor: a node cut off past failure detection is
// marked dead and its actor (no restarts left) DEAD, while the actor's
// process runs on, since the node cannot know. Once the cut heals the node
// learns it from its first heartbeat and stops the process.
func TestCutOffActorStoppedAfterHeal(t *testing.T) {
	nodes := testCluster(t, 3, func(i int, c *Config) {
		withCutLinks(i, c)
		c.tuneGossip = gossipToTheDead(time.Second)
	})
	waitFormed(t, nodes, 3, 3)
	leader := leaderOf(t, nodes)
	var victim *Node
	var rest []*Node
	for _, nd := range nodes {
		if nd != leader && victim == nil {
			victim = nd
		} else {
			rest = append(rest, nd)
		}
	}
	id := newID()[:24]
	fa := startFakeActor(t, victim, id, 0)
	recordActor(t, leader, store.Actor{ID: id, State: store.ActorAlive, MaxRestarts: 0,
		NodeID: victim.ID(), NodeName: victim.Name(), NodeAddr: victim.RPCAddr()})

	heal := partition(t, []*Node{victim}, rest)
	testutil.Until(t, 30*time.Second, "actor DEAD after its node is cut off", func() error {
		a, err := leader.State().ActorByID(id)
		if err != nil || a.State != store.ActorDead {
			return fmt.Errorf("actor %+v, %v", a, err)
		}
		return nil
	})
	if exited(fa.actor) {
		t.Fatal("the cut-off node stopped the actor while it could not reach the leader")
	}
	healed := time.Now()
	heal()
	testutil.Until(t, 20*time.Second, "the old actor process stopped after the heal", func() error {
		if !exited(fa.actor) {
			return fmt.Errorf("pid %d still runs", fa.actor.proc.Pid())
		}
		return nil
	})
	t.Logf("old actor process stopped %s after the heal", time.Since(healed).Round(time.Millisecond))
	// The job's task worker is stopped after the actor's exit is handled,
	// a moment after the actor process is gone.
	testutil.Until(t, 10*time.Second, "the DEAD actor's job ends its task worker", func() error {
		if !exited(fa.task) {
			return fmt.Errorf("task worker pid %d still runs", fa.task.proc.Pid())
		}
		return nil
	})
}
