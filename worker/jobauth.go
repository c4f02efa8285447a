package worker

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// A job's core workers (its driver, task workers and actors) serve their
// own ports only to connections presenting a job token (docs/protocol.md,
// "The job token"): its own job's for everything, another live job's for
// actor calls and object reads (named and detached actors are shared
// between jobs, and pass refs both ways), an admin token for everything.
// A token is resolved once per connection by asking this process's node
// (Auth.Check), and the answer is cached for authTTL.

// authTTL is how long a core worker trusts its node's answer about a
// token: a revoked token still opens connections for at most this long.
const authTTL = 10 * time.Second

// authCacheMax bounds the tokens a core worker remembers answers for.
const authCacheMax = 1024

// authCheckTimeout bounds one Auth.Check call to the node.
const authCheckTimeout = 5 * time.Second

// grantOwnJob is the bit of a connection presenting this process's own job
// token (or an admin one): only such a connection may run code here
// (Task.Push, Actor.Construct) or take leases back (Task.RevokeLeases).
// It sits above wire's role bits.
const grantOwnJob rpc.Grants = 1 << 8

// ownJobMethods need grantOwnJob on a core worker's port, beyond their
// role in wire.MethodRoles.
var ownJobMethods = map[string]bool{
	wire.MethodPushTask:       true,
	wire.MethodActorConstruct: true,
	wire.MethodLeaseRevoke:    true,
	wire.MethodOwnerCancel:    true,
}

const jobAuthHint = "a job's core workers take connections presenting its job token (its own processes do so by themselves); " +
	"another job's token may call actors and read objects, an admin token anything"

// jobAuth authenticates connections to a core worker's port.
type jobAuth struct {
	own string // this process's job token
	// check asks the node about a token (Auth.Check).
	check func(ctx context.Context, token string) (*wire.AuthCheckReply, error)
	// ctx ends with the process's core worker.
	ctx context.Context

	mu    sync.Mutex
	cache map[string]authAnswer
}

type authAnswer struct {
	p     rpc.Principal
	until time.Time
}

func newJobAuth(cw *coreWorker, own string) *jobAuth {
	return &jobAuth{own: own, ctx: cw.ctx, cache: make(map[string]authAnswer),
		check: func(ctx context.Context, token string) (*wire.AuthCheckReply, error) {
			var rep wire.AuthCheckReply
			err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodAuthCheck, &wire.AuthCheckRequest{Token: token}, &rep)
			return &rep, err
		}}
}

// auth is the rpc.Auth of a core worker's server.
func (a *jobAuth) auth() *rpc.Auth {
	return &rpc.Auth{Authenticate: a.authenticate, Require: coreWorkerRequirement, Hint: jobAuthHint}
}

// coreWorkerRequirement is wire.MethodRequirement, with ownJobMethods
// needing this job's token.
func coreWorkerRequirement(method string) (rpc.Requirement, bool) {
	if ownJobMethods[method] {
		return rpc.Requirement{Role: "this job's token", Bit: grantOwnJob}, true
	}
	return wire.MethodRequirement(method)
}

func (a *jobAuth) authenticate(_ net.Conn, token string) rpc.Principal {
	if token == "" {
		return rpc.Principal{Name: "anonymous", Role: "none", Note: "no token presented"}
	}
	now := time.Now()
	a.mu.Lock()
	ans, ok := a.cache[token]
	a.mu.Unlock()
	if ok && now.Before(ans.until) {
		return ans.p
	}
	ctx, cancel := context.WithTimeout(a.ctx, authCheckTimeout)
	rep, err := a.check(ctx, token)
	cancel()
	var p rpc.Principal
	switch {
	case err != nil:
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodePermissionDenied {
			// The node did not answer: nothing to remember.
			return rpc.Principal{Name: "anonymous", Role: "none", Note: "its token could not be checked with this process's node: " + err.Error()}
		}
		p = rpc.Principal{Name: "anonymous", Role: "none", Note: re.Message}
	case subtle.ConstantTimeCompare([]byte(token), []byte(a.own)) == 1:
		p = rpc.Principal{Name: "token " + rep.TokenID + " of this job", Role: "submit", Grants: wire.GrantsOf(pki.RoleSubmit) | grantOwnJob}
	case rep.Role == string(pki.RoleAdmin):
		p = rpc.Principal{Name: "token " + rep.TokenID, Role: "admin", Grants: wire.GrantAll | grantOwnJob}
	case rep.Job != "":
		p = rpc.Principal{Name: "token " + rep.TokenID + " of job " + rep.Job, Role: "submit (another job)", Grants: wire.GrantsOf(pki.RoleSubmit)}
	default:
		p = rpc.Principal{Name: "token " + rep.TokenID, Role: "none", Note: "token " + rep.TokenID + " (role " + rep.Role + ") is not a job token"}
	}
	a.remember(token, p, now)
	return p
}

// remember caches p for token until now+authTTL, dropping expired answers
// (or, failing that, all) when the cache is full.
func (a *jobAuth) remember(token string, p rpc.Principal, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= authCacheMax {
		for k, v := range a.cache {
			if !now.Before(v.until) {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= authCacheMax {
			clear(a.cache)
		}
	}
	a.cache[token] = authAnswer{p: p, until: now.Add(authTTL)}
}
