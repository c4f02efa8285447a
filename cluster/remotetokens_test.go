package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// fakeLeader answers remoteTokens' questions: the tokens in good are
// accepted with role read, all others refused.
type fakeLeader struct {
	mu   sync.Mutex
	good map[string]bool
	all  bool // accept every token
}

func (f *fakeLeader) ask(_ context.Context, token string) (*wire.AuthCheckReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tok, _ := pki.ParseToken(token)
	if f.all || f.good[token] {
		return &wire.AuthCheckReply{TokenID: tok.ID, Role: string(pki.RoleRead)}, nil
	}
	return nil, &rpc.Error{Code: wire.CodePermissionDenied, Message: "token " + tok.ID + ": unknown to this cluster"}
}

func newPinnedToken(t *testing.T, pin string) string {
	t.Helper()
	tok, err := pki.NewToken(pin)
	if err != nil {
		t.Fatal(err)
	}
	return tok.String()
}

// A node without Raft state keeps the leader's yes for remoteTokenTTL, at
// most remoteTokenCap of them, keeps no refusal, and asks about at most
// remoteTokenBurst new tokens at once and remoteTokenRate a second after.
func TestRemoteTokensCachedBoundedAndRateLimited(t *testing.T) {
	pin := "sha256:" + strings.Repeat("cd", 32)
	leader := &fakeLeader{good: map[string]bool{}}
	r := newRemoteTokens(pin, leader.ask)
	clock := time.Unix(1_000_000, 0)
	r.now = func() time.Time { return clock }

	good := newPinnedToken(t, pin)
	leader.good[good] = true
	for range 3 {
		if role, err := r.RoleOf(good, clock); err != nil || role != pki.RoleRead {
			t.Fatalf("a good token: %q, %v; want read", role, err)
		}
	}
	if n := r.asked.Load(); n != 1 {
		t.Fatalf("three uses of one token asked the leader %d times, want 1 (cached)", n)
	}
	if _, err := r.RoleOf(newTestToken(t), clock); !errors.Is(err, ErrTokenRefused) || !strings.Contains(err.Error(), "made for the cluster") {
		t.Fatalf("a token of another cluster: %v; want refused for its CA", err)
	}
	if n := r.asked.Load(); n != 1 {
		t.Fatalf("a token of another cluster was asked about: %d questions", n)
	}

	// Revoked at the leader: still accepted until the TTL passes.
	leader.mu.Lock()
	leader.good[good] = false
	leader.mu.Unlock()
	if _, err := r.RoleOf(good, clock); err != nil {
		t.Fatalf("within the TTL: %v; want the cached answer", err)
	}
	clock = clock.Add(remoteTokenTTL)
	if _, err := r.RoleOf(good, clock); !errors.Is(err, ErrTokenRefused) || !strings.Contains(err.Error(), "unknown to this cluster") {
		t.Fatalf("after the TTL: %v; want the leader's refusal", err)
	}

	// 10,000 made-up tokens of this cluster: the first remoteTokenBurst
	// are asked about (less the one just used), the rest refused here.
	asked0 := r.asked.Load()
	for range 10_000 {
		if _, err := r.RoleOf(newPinnedToken(t, pin), clock); !errors.Is(err, ErrTokenRefused) {
			t.Fatalf("a made-up token: %v; want refused", err)
		}
	}
	if n := r.asked.Load() - asked0; n > remoteTokenBurst {
		t.Fatalf("10,000 made-up tokens asked the leader %d times, want at most %d", n, remoteTokenBurst)
	}
	if c := r.cached(); c != 0 {
		t.Fatalf("refusals were cached: %d entries", c)
	}
	_, err := r.RoleOf(newPinnedToken(t, pin), clock)
	if err == nil || !strings.Contains(err.Error(), "too many new tokens") {
		t.Fatalf("beyond the rate: %v; want the rate refusal", err)
	}
	clock = clock.Add(time.Second)
	asked0 = r.asked.Load()
	for range 100 {
		_, _ = r.RoleOf(newPinnedToken(t, pin), clock)
	}
	if n := r.asked.Load() - asked0; n != remoteTokenRate {
		t.Fatalf("a second later, %d questions, want %d (remoteTokenRate)", n, remoteTokenRate)
	}

	// 10,000 good tokens: all accepted, the cache stays at its cap.
	leader.mu.Lock()
	leader.all = true
	leader.mu.Unlock()
	clock = clock.Add(time.Minute) // a full bucket
	for i := range 10_000 {
		if _, err := r.RoleOf(newPinnedToken(t, pin), clock); err != nil {
			t.Fatalf("good token %d: %v", i, err)
		}
	}
	if c := r.cached(); c > remoteTokenCap {
		t.Fatalf("the cache holds %d answers, over its cap %d", c, remoteTokenCap)
	}
}

// A read token works against the TCP port of a node without Raft state
// (3 servers and 1 other node): the node asks the leader. Once revoked, it
// is refused there within remoteTokenTTL. Made-up tokens leave the cache
// as it was.
func TestTokenClientOnANodeWithoutRaftState(t *testing.T) {
	nodes := testCluster(t, 4, func(i int, c *Config) { c.Server = i < 3 })
	waitFormed(t, nodes, 4, 3)
	client := nodes[3]
	if client.raft != nil || client.remoteTokens == nil {
		t.Fatal("node 3 runs Raft; want a node without Raft state")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := createToken(t, nodes[0], "read", time.Hour).Token
	id, _ := pki.ParseToken(read)
	if err := dialTLS(t, client, read).Call(ctx, wire.MethodStatus, &wire.Empty{}, &wire.StatusResponse{}); err != nil {
		t.Fatalf("a read token calling Cluster.Status on the node without Raft state: %v", err)
	}
	wantDenied(t, dialTLS(t, client, read).Call(ctx, wire.MethodKVSet, &wire.KVRequest{Key: "k", Value: []byte("v")}, nil),
		"KV.Set needs role submit", "token "+id.ID+" with role read")
	wantDenied(t, dialTLS(t, client, newPinnedToken(t, client.sec.ca.Hash())).Call(ctx, wire.MethodStatus, &wire.Empty{}, nil),
		"unknown to this cluster")

	for range 10_000 {
		_, _ = client.remoteTokens.RoleOf(newPinnedToken(t, client.sec.ca.Hash()), time.Now())
	}
	if c := client.remoteTokens.cached(); c > 1 {
		t.Fatalf("10,000 made-up tokens: the cache holds %d answers, want the one good token at most", c)
	}

	if err := nodes[0].forward(ctx, wire.MethodTokenRevoke, &wire.TokenRevokeRequest{ID: id.ID}, &wire.Empty{}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	testutil.Until(t, remoteTokenTTL+5*time.Second, "the revoked token refused on the node without Raft state", func() error {
		err := dialTLS(t, client, read).Call(ctx, wire.MethodStatus, &wire.Empty{}, &wire.StatusResponse{})
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == wire.CodePermissionDenied && strings.Contains(re.Message, "revoked") {
			return nil
		}
		return errors.New("still accepted: " + errString(err))
	})
	if d := time.Since(revoked); d > remoteTokenTTL+2*time.Second {
		t.Errorf("the revoked token was refused after %v, want within the TTL %v", d, remoteTokenTTL)
	}
}
