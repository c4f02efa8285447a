package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// Job tokens (docs/protocol.md, "The job token"): Job.Register mints one
// per job through Raft, role submit, for that job only; the job's core
// workers present it on every connection they open and require it of every
// connection to their own ports, resolving it through their node's
// Auth.Check. It is revoked (deleted) when the job ends. An --insecure
// cluster has none.

// jobTokenWait bounds how long a worker start waits for its job's token to
// reach this node's copy of the Raft state (minted at Job.Register on
// another node, it may lag that node's reply by a replication round).
const jobTokenWait = 10 * time.Second

// secure says whether this node mints and hands over job tokens.
func (n *Node) secure() bool { return !n.sec.insecure && n.sec.ca != nil }

// mintJobToken makes job's token at the leader and waits until this node's
// state holds it, so that a worker started here right after finds it. A
// job registered again (a retried Job.Register) keeps the token it has:
// all its processes must hold the same one.
func (n *Node) mintJobToken(ctx context.Context, job string) (string, error) {
	if !n.hasRaftState() {
		// No Raft state here: the leader's answer is the token, and
		// workers started here ask the leader for it (jobTokenFor).
		var resp wire.TokenCreateResponse
		err := n.forward(ctx, wire.MethodTokenCreate, &wire.TokenCreateRequest{Role: string(pki.RoleSubmit), Job: job}, &resp)
		return resp.Token, err
	}
	if rec, err := n.fsm.State().JobToken(job); err != nil {
		return "", err
	} else if rec != nil {
		return rec.JobToken, nil
	}
	var resp wire.TokenCreateResponse
	if err := n.forward(ctx, wire.MethodTokenCreate, &wire.TokenCreateRequest{Role: string(pki.RoleSubmit), Job: job}, &resp); err != nil {
		return "", err
	}
	if _, err := n.waitJobToken(ctx, job); err != nil {
		return "", err
	}
	return resp.Token, nil
}

// waitJobToken returns job's token from this node's state, waiting up to
// jobTokenWait for it to arrive; an error says it did not.
func (n *Node) waitJobToken(ctx context.Context, job string) (string, error) {
	deadline := time.Now().Add(jobTokenWait)
	for {
		rec, err := n.fsm.State().JobToken(job)
		if err != nil {
			return "", err
		}
		if rec != nil {
			return rec.JobToken, nil
		}
		if time.Now().After(deadline) {
			return "", errors.New("job " + job + " has no job token in this node's state after " + jobTokenWait.String() + " (is the job registered, and Raft replicating to this node?)")
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-n.ctx.Done():
			return "", n.ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// jobTokenFor is the token a worker process of job gets (EnvJobToken): ""
// on an --insecure node; an error when a secure node cannot find it. The
// job of an actor's incarnation (actorJobID), whose nested tasks lease
// workers under it, has the token of the job that created the actor.
func (n *Node) jobTokenFor(ctx context.Context, job string) (string, error) {
	if !n.secure() {
		return "", nil
	}
	if !n.hasRaftState() {
		var rep wire.JobTokenOfReply
		if err := n.forward(ctx, wire.MethodJobTokenOf, &wire.JobTokenOfRequest{Job: job}, &rep); err != nil {
			return "", fmt.Errorf("job %s's token from the leader: %w", job, err)
		}
		return rep.Token, nil
	}
	if id, ok := actorOfJobID(job); ok {
		a, err := n.fsm.State().ActorByID(id)
		if err != nil {
			return "", err
		}
		if a != nil {
			job = a.JobID
		}
	}
	return n.waitJobToken(ctx, job)
}

// jobTokenOf answers, at the leader, the token a worker process of job gets
// on a node without Raft state of its own (jobTokenFor there).
func (n *Node) jobTokenOf(ctx context.Context, req *wire.JobTokenOfRequest) (*wire.JobTokenOfReply, error) {
	if err := wire.CheckID("job ID", req.Job); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	tok, err := n.jobTokenFor(ctx, req.Job)
	if err != nil {
		return nil, err
	}
	return &wire.JobTokenOfReply{Token: tok}, nil
}

// actorOfJobID returns the actor ID of an actor incarnation's job ID
// (actorJobID's "a-<actor>-<incarnation>"), false for another job ID.
func actorOfJobID(job string) (string, bool) {
	rest, ok := strings.CutPrefix(job, "a-")
	i := strings.LastIndexByte(rest, '-')
	if !ok || i <= 0 {
		return "", false
	}
	if _, err := strconv.Atoi(rest[i+1:]); err != nil {
		return "", false
	}
	return rest[:i], true
}

// workerToken is the token the node presents when it calls its worker
// process at addr (Task.RevokeLeases, Actor.Construct): the one it gave
// the worker, of the worker's job, which the worker's port accepts.
func (n *Node) workerToken(addr string) string { return n.workers.tokenOfAddr(addr) }

// revokeJobToken revokes job's token, in the background, unless the job's
// detached actors live on; the leader calls it (Actor.JobDone), from its
// state;
// the job's core workers refuse it on new connections once their cached
// answer expires (worker: authTTL).
func (n *Node) revokeJobToken(job string) {
	if !n.secure() {
		return
	}
	n.group.goFunc("job-token-revoke", func() {
		rec, err := n.fsm.State().JobToken(job)
		if err != nil || rec == nil {
			return // already revoked, or a job of no token
		}
		if n.detachedActorsLive(job) {
			// They outlive the job, and call and are called with its token.
			n.logger.Info("job token kept: the job's detached actors live on", "job", job, "token_id", rec.ID)
			return
		}
		ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		defer cancel()
		if err := n.forward(ctx, wire.MethodTokenRevoke, &wire.TokenRevokeRequest{ID: rec.ID}, nil); err != nil {
			var re *rpc.Error
			if errors.As(err, &re) && strings.Contains(re.Message, "not found") {
				return // another node revoked it first
			}
			n.logger.Warn("revoke the finished job's token", "job", job, "token_id", rec.ID, "err", err)
		}
	})
}

// authCheck answers a core worker asking whose a token presented to it
// is: its role and job, from this node's copy of the Raft state, or
// permission_denied naming the token ID and why.
func (n *Node) authCheck(ctx context.Context, req *wire.AuthCheckRequest) (*wire.AuthCheckReply, error) {
	if !n.secure() {
		return nil, errInsecure("auth check")
	}
	role, err := n.tokens().check(req.Token, pki.RoleRead, time.Now())
	if err != nil {
		return nil, permissionDenied(err)
	}
	tok, _ := pki.ParseToken(req.Token) // check parsed it
	rec, err := n.fsm.State().TokenByID(tok.ID)
	if err != nil {
		return nil, err
	}
	rep := &wire.AuthCheckReply{TokenID: tok.ID, Role: string(role)}
	if rec != nil {
		rep.Job = rec.Job
	}
	return rep, nil
}

// detachedActorsLive says whether a detached actor job created is not dead.
func (n *Node) detachedActorsLive(job string) bool {
	actors, err := n.fsm.State().Actors()
	if err != nil {
		return true // keep the token rather than cut live actors off
	}
	for _, a := range actors {
		if a.JobID == job && a.Detached && a.State != store.ActorDead {
			return true
		}
	}
	return false
}
