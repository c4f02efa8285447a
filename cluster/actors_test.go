package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// A handle to an unnamed actor can reach another process before its
// creator's background registration commits; a waiting lookup must wait for
// the registration instead of declaring the actor unknown.
func TestActorLookupWaitsForRegistration(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	n := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const id = "0123456789abcdef01234567"
	type result struct {
		info *wire.ActorInfo
		err  error
	}
	got := make(chan result, 1)
	go func() {
		info, err := n.actorGet(ctx, &wire.ActorGetRequest{ActorID: id, WaitMillis: 2_000, NotIncarnation: -1})
		got <- result{info, err}
	}()
	// The lookup must still be waiting: nothing with this ID exists yet.
	select {
	case r := <-got:
		t.Fatalf("lookup of an unregistered ID answered before its registration: %+v, %v", r.info, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	_, err := n.actorCreate(ctx, &wire.ActorCreateRequest{ActorID: id, JobID: "job1", Class: "C", Constructor: "C",
		BinaryHash: strings.Repeat("ab", 32), MaxConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.info.ActorID != id {
		t.Fatalf("lookup after registration: %+v, %v", r.info, r.err)
	}

	// An ID that never registers is not_found once the wait ends.
	start := time.Now()
	_, err = n.actorGet(ctx, &wire.ActorGetRequest{ActorID: "fedcba9876543210fedcba98", WaitMillis: 300, NotIncarnation: -1})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeNotFound || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("unknown ID after %s: %v (want not_found after the 300 ms wait)", time.Since(start), err)
	}
}
