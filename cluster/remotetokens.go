package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

const (
	// remoteTokenTTL is how long a node without Raft state keeps the
	// leader's acceptance of a token: a token revoked (or expired) is
	// still accepted there on new connections for up to this long.
	remoteTokenTTL = 5 * time.Second
	// remoteTokenCap is the most accepted tokens such a node keeps; a
	// full cache drops expired entries, then arbitrary ones.
	remoteTokenCap = 1024
	// remoteTokenAskTimeout bounds one question to the leader.
	remoteTokenAskTimeout = 5 * time.Second
	// remoteTokenRate and remoteTokenBurst bound the questions to the
	// leader about tokens not in the cache, per second and at once, so a
	// flood of made-up tokens costs the leader at most this many checks.
	remoteTokenRate  = 20
	remoteTokenBurst = 50
)

// remoteTokens is the tokenAuthority of a node without Raft state (not a
// Raft server): it asks the leader (Auth.Check@leader) about a token and
// keeps a positive answer remoteTokenTTL, at most remoteTokenCap of them.
// Refusals are not kept, so made-up tokens cannot grow it; questions
// about tokens not in the cache are rate-limited (remoteTokenRate), and
// beyond that rate such a token is refused without asking.
type remoteTokens struct {
	caHash string // the cluster CA's pin; a token for another cluster is refused here
	// ask resolves a token at the leader: its reply, or permission_denied.
	ask func(ctx context.Context, token string) (*wire.AuthCheckReply, error)
	now func() time.Time

	mu      sync.Mutex
	cache   map[[sha256.Size]byte]remoteTokenEntry // by the token's sha256: no secret kept
	allowed float64                                // questions the bucket still allows
	filled  time.Time                              // when allowed was last refilled
	asked   atomic.Int64                           // questions sent, for tests
}

type remoteTokenEntry struct {
	reply   wire.AuthCheckReply
	expires time.Time
}

func newRemoteTokens(caHash string, ask func(ctx context.Context, token string) (*wire.AuthCheckReply, error)) *remoteTokens {
	return &remoteTokens{caHash: caHash, ask: ask, now: time.Now,
		cache: make(map[[sha256.Size]byte]remoteTokenEntry), allowed: remoteTokenBurst}
}

var _ tokenAuthority = (*remoteTokens)(nil)

// RoleOf implements tokenAuthority.
func (r *remoteTokens) RoleOf(token string, _ time.Time) (pki.Role, error) {
	rep, err := r.lookup(context.Background(), token)
	if err != nil {
		return "", err
	}
	return pki.Role(rep.Role), nil
}

// lookup returns the leader's answer about token, from the cache when it
// is younger than remoteTokenTTL. A refusal wraps ErrTokenRefused and
// names the token ID and why; a leader that cannot be reached is another
// error.
func (r *remoteTokens) lookup(ctx context.Context, token string) (*wire.AuthCheckReply, error) {
	tok, err := pki.ParseToken(token)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenRefused, err)
	}
	if r.caHash != "" && tok.CAHash != r.caHash {
		return nil, fmt.Errorf("%w: token %s: made for the cluster whose CA is %s, this cluster's is %s", ErrTokenRefused, tok.ID, tok.CAHash, r.caHash)
	}
	key := sha256.Sum256([]byte(token))
	now := r.now()
	r.mu.Lock()
	if e, ok := r.cache[key]; ok {
		if now.Before(e.expires) {
			r.mu.Unlock()
			rep := e.reply
			return &rep, nil
		}
		delete(r.cache, key)
	}
	if !r.takeLocked(now) {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: token %s: this node (not a Raft server) is asking the leader about too many new tokens (over %d a second); try again shortly, or use a server node",
			ErrTokenRefused, tok.ID, remoteTokenRate)
	}
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, remoteTokenAskTimeout)
	defer cancel()
	r.asked.Add(1)
	rep, err := r.ask(ctx, token)
	if err != nil {
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == wire.CodePermissionDenied {
			return nil, fmt.Errorf("%w: %s", ErrTokenRefused, re.Message)
		}
		return nil, fmt.Errorf("token %s: ask the leader: %w", tok.ID, err)
	}
	r.mu.Lock()
	r.allowed = min(r.allowed+1, remoteTokenBurst) // a good token costs nothing
	r.storeLocked(key, *rep, now)
	r.mu.Unlock()
	return rep, nil
}

// takeLocked refills the bucket for the time since it was last filled and
// takes one question from it, if it has one.
func (r *remoteTokens) takeLocked(now time.Time) bool {
	if !r.filled.IsZero() {
		r.allowed = min(r.allowed+now.Sub(r.filled).Seconds()*remoteTokenRate, remoteTokenBurst)
	}
	r.filled = now
	if r.allowed < 1 {
		return false
	}
	r.allowed--
	return true
}

// storeLocked keeps rep for remoteTokenTTL, making room in a full cache.
func (r *remoteTokens) storeLocked(key [sha256.Size]byte, rep wire.AuthCheckReply, now time.Time) {
	if _, ok := r.cache[key]; !ok && len(r.cache) >= remoteTokenCap {
		for k, e := range r.cache {
			if !now.Before(e.expires) {
				delete(r.cache, k)
			}
		}
		for k := range r.cache { // still full: drop any one
			if len(r.cache) < remoteTokenCap {
				break
			}
			delete(r.cache, k)
		}
	}
	r.cache[key] = remoteTokenEntry{reply: rep, expires: now.Add(remoteTokenTTL)}
}

// cached returns how many answers the cache holds.
func (r *remoteTokens) cached() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cache)
}

// askLeader resolves a token at the leader (Auth.Check@leader).
func (n *Node) askLeader(ctx context.Context, token string) (*wire.AuthCheckReply, error) {
	var rep wire.AuthCheckReply
	if err := n.forward(ctx, wire.MethodAuthCheck, &wire.AuthCheckRequest{Token: token}, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// permissionDenied turns a token refusal (ErrTokenRefused) into the
// permission_denied error callers get; other errors pass unchanged.
func permissionDenied(err error) error {
	if errors.Is(err, ErrTokenRefused) {
		return &rpc.Error{Code: wire.CodePermissionDenied, Message: strings.TrimPrefix(err.Error(), ErrTokenRefused.Error()+": ")}
	}
	return err
}
