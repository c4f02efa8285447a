package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// Node.apply keeps the FSM's failures distinct (issue 14: it made every one
// bad_input), so the branches that depend on them are reached: a taken
// actor name is already_exists with the GetIfExists hint, recording an
// actor DEAD twice is no error, and the other store errors have codes of
// their own.
func TestApplyKeepsFSMFailuresDistinct(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	n := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	create := func() (*wire.ActorCreateReply, error) {
		return n.actorCreate(ctx, &wire.ActorCreateRequest{JobID: "job1", Class: "C", Name: "only", Namespace: "ns",
			Constructor: "C", BinaryHash: strings.Repeat("ab", 32), MaxConcurrency: 1, Detached: true})
	}
	first, err := create()
	if err != nil {
		t.Fatal(err)
	}
	_, err = create()
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeAlreadyExists || !errors.Is(err, store.ErrActorNameTaken) ||
		!strings.Contains(re.Message, "use GetIfExists") {
		t.Fatalf("second actor named %q: %v; want already_exists with the GetIfExists hint", "only", err)
	}

	// A DEAD recorded twice (a kill racing a death) is no error.
	a, err := n.fsm.State().ActorByID(first.ActorID)
	if err != nil || a == nil {
		t.Fatalf("actor %s: %v, %v", first.ActorID, a, err)
	}
	if err := n.actors.setDead(a, "first"); err != nil {
		t.Fatal(err)
	}
	if err := n.actors.setDead(a, "second"); err != nil {
		t.Fatalf("second setDead of a DEAD actor: %v; want nil (already dead)", err)
	}

	cases := []struct {
		name string
		t    store.MessageType
		req  any
		code string
		is   error
	}{
		{"update of a dead actor", store.ActorUpdateType, &store.ActorUpdateRequest{Actor: *a}, wire.CodeActorDied, store.ErrActorDead},
		{"status of an unknown node", store.NodeStatusType, &store.NodeStatusRequest{NodeID: "nope", Status: store.NodeDead}, wire.CodeNotFound, store.ErrNodeNotFound},
		{"empty KV key", store.KVSetType, &store.KVSetRequest{}, wire.CodeBadInput, store.ErrInvalidRequest},
	}
	for _, c := range cases {
		_, err := n.apply(c.t, c.req)
		if !errors.As(err, &re) || re.Code != c.code || !errors.Is(err, c.is) {
			t.Errorf("%s: %v; want code %s wrapping %v", c.name, err, c.code, c.is)
		}
	}
}
