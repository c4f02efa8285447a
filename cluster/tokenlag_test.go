package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// A follower's check of a token its state does not hold yet waits for it
// (up to tokenLagWait) instead of refusing it; at most cap(waits) checks
// wait at once, the others are refused at once, as is every unknown token
// on a node whose state does not lag.
func TestFollowerWaitsForAToken(t *testing.T) {
	pin := "sha256:" + strings.Repeat("ef", 32)
	fsm := store.NewFSM(testutil.Logger())
	lagging := true
	toks := raftTokens{state: fsm.State(), caHash: pin, lagging: func() bool { return lagging }, waits: make(chan struct{}, 2)}

	tok, err := pki.NewToken(pin)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		role pki.Role
		err  error
	}
	done := make(chan result, 1)
	go func() {
		role, err := toks.check(tok.String(), pki.RoleRead, time.Now())
		done <- result{role, err}
	}()
	testutil.Until(t, 5*time.Second, "the check waiting for the token", func() error {
		if len(toks.waits) != 1 {
			return errors.New("not waiting")
		}
		return nil
	})
	rec := store.TokenRecord{ID: tok.ID, SecretHash: tok.SecretHash(), Role: string(pki.RoleRead), CreatedAt: time.Now().UnixNano()}
	b, err := store.Encode(store.TokenCreateType, &store.TokenCreateRequest{Token: rec})
	if err != nil {
		t.Fatal(err)
	}
	if res := fsm.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: b}); res != nil {
		if err, ok := res.(error); ok {
			t.Fatal(err)
		}
	}
	select {
	case r := <-done:
		if r.err != nil || r.role != pki.RoleRead {
			t.Fatalf("the token arriving while the check waited: %q, %v; want read", r.role, r.err)
		}
	case <-time.After(tokenLagWait + 5*time.Second):
		t.Fatal("the check did not return once the token arrived")
	}

	// Two made-up tokens wait; a third is refused at once.
	for range 2 {
		go func() {
			_, err := toks.check(newPinnedToken(t, pin), pki.RoleRead, time.Now())
			done <- result{err: err}
		}()
	}
	testutil.Until(t, 5*time.Second, "two checks waiting", func() error {
		if len(toks.waits) != 2 {
			return errors.New("not both waiting")
		}
		return nil
	})
	start := time.Now()
	if _, err := toks.check(newPinnedToken(t, pin), pki.RoleRead, time.Now()); !errors.Is(err, ErrTokenRefused) || time.Since(start) > tokenLagWait/2 {
		t.Fatalf("a third made-up token while two wait: %v after %v; want refused at once", err, time.Since(start))
	}
	for range 2 {
		if r := <-done; !errors.Is(r.err, ErrTokenRefused) || !strings.Contains(r.err.Error(), "unknown to this cluster") {
			t.Fatalf("a made-up token after the wait: %v; want unknown to this cluster", r.err)
		}
	}
	if time.Since(start) < tokenLagWait/2 {
		t.Fatalf("made-up tokens refused after %v, want after waiting about %v", time.Since(start), tokenLagWait)
	}

	lagging = false
	start = time.Now()
	if _, err := toks.check(newPinnedToken(t, pin), pki.RoleRead, time.Now()); !errors.Is(err, ErrTokenRefused) || time.Since(start) > tokenLagWait/2 {
		t.Fatalf("a made-up token on a node that does not lag: %v after %v; want refused at once", err, time.Since(start))
	}
}

// A token created at the leader works at once against each follower.
func TestTokenCreatedAtLeaderWorksAtOnceOnFollowers(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	var leader *Node
	var followers []*Node
	for _, nd := range nodes {
		if nd.IsLeader() {
			leader = nd
		} else {
			followers = append(followers, nd)
		}
	}
	if leader == nil || len(followers) != 2 {
		t.Fatalf("want one leader and two followers, got leader %v and %d followers", leader != nil, len(followers))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 10 {
		for _, f := range followers {
			read := createToken(t, leader, "read", time.Hour).Token
			if err := dialTLS(t, f, read).Call(ctx, wire.MethodStatus, &wire.Empty{}, &wire.StatusResponse{}); err != nil {
				t.Fatalf("round %d: a token just created at the leader, used at follower %s: %v", i, f.Name(), err)
			}
		}
	}
}
