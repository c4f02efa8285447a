package cluster

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// fakeActorHost is an actorHost over a bare FSM: commands apply at once,
// in order, no node answers a call, and leaderGo records what the manager
// would start in the leader's term without running it.
type fakeActorHost struct {
	fsm *store.FSM

	mu      sync.Mutex
	index   uint64
	started []string // leaderGo names, in order
}

func newFakeActorHost() *fakeActorHost { return &fakeActorHost{fsm: store.NewFSM(nil)} }

func (h *fakeActorHost) State() *store.StateStore { return h.fsm.State() }

func (h *fakeActorHost) apply(t store.MessageType, req any) (any, error) {
	b, err := store.Encode(t, req)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.index++
	res := h.fsm.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: b})
	h.mu.Unlock()
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

func (h *fakeActorHost) callNode(ctx context.Context, addr, method string, req, resp any) error {
	return errors.New("the fake host has no nodes")
}

func (h *fakeActorHost) leaderGo(name string, f func(ctx context.Context)) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.started = append(h.started, name)
	return false
}

func (h *fakeActorHost) lifetime() context.Context           { return context.Background() }
func (h *fakeActorHost) log() *slog.Logger                   { return testutil.Logger() }
func (h *fakeActorHost) actorPlacementView() []wire.NodeInfo { return nil }
func (h *fakeActorHost) bundleNodes(context.Context, string, int) ([]wire.PGBundle, string, bool) {
	return nil, "the fake host has no placement groups", true
}

func (h *fakeActorHost) startedNames() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.started)
}

func (h *fakeActorHost) actor(t *testing.T, id string) *store.Actor {
	t.Helper()
	a, err := h.State().ActorByID(id)
	if err != nil || a == nil {
		t.Fatalf("actor %s: %v, %v", id, a, err)
	}
	return a
}

// The manager's loss handling, on a fake host: a loss with restarts left
// is one restart (RESTARTING, next incarnation, placement asked for), a
// report about an older incarnation is ignored, the loss past MaxRestarts
// is DEAD, and a finished job ends its actors but not detached ones.
func TestActorManagerLossesOnFakeHost(t *testing.T) {
	h := newFakeActorHost()
	m := newActorManager(h)
	register := func(id string, detached bool) {
		a := store.Actor{ID: id, JobID: "job1", Class: "C", Constructor: "C", State: store.ActorAlive, MaxRestarts: 1,
			MaxConcurrency: 1, Detached: detached, NodeID: "n1", NodeName: "n1"}
		if _, err := h.apply(store.ActorRegisterType, &store.ActorRegisterRequest{Actor: a}); err != nil {
			t.Fatal(err)
		}
	}
	register("a1", false)

	m.died("a1", 0, "its worker crashed")
	if a := h.actor(t, "a1"); a.State != store.ActorRestarting || a.Restarts != 1 || a.DeathCause != "its worker crashed" {
		t.Fatalf("after a loss with a restart left: %s, restarts %d, cause %q", a.State, a.Restarts, a.DeathCause)
	}
	if got := h.startedNames(); !slices.Equal(got, []string{"actor-place"}) {
		t.Fatalf("leader goroutines asked for: %v, want one placement", got)
	}
	m.died("a1", 0, "a late report about incarnation 0")
	if a := h.actor(t, "a1"); a.State != store.ActorRestarting || a.Restarts != 1 {
		t.Fatalf("a stale report changed the actor: %s, restarts %d", a.State, a.Restarts)
	}
	alive := h.actor(t, "a1")
	alive.State = store.ActorAlive
	if _, err := h.apply(store.ActorUpdateType, &store.ActorUpdateRequest{Actor: *alive}); err != nil {
		t.Fatal(err)
	}
	m.died("a1", 1, "its worker crashed again")
	if a := h.actor(t, "a1"); a.State != store.ActorDead || !strings.Contains(a.DeathCause, "no restarts left") {
		t.Fatalf("after the last restart: %s, cause %q", a.State, a.DeathCause)
	}

	register("owned", false)
	register("detached", true)
	m.jobDone("job1")
	if a := h.actor(t, "owned"); a.State != store.ActorDead || !strings.Contains(a.DeathCause, "job job1, finished") {
		t.Fatalf("the finished job's actor: %s, cause %q", a.State, a.DeathCause)
	}
	if a := h.actor(t, "detached"); a.State != store.ActorAlive {
		t.Fatalf("the finished job's detached actor: %s", a.State)
	}
	if len(m.locks) != 0 {
		t.Fatalf("%d actor locks left behind", len(m.locks))
	}
}
