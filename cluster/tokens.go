package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// raftTokens is the tokenAuthority over the replicated token table: any
// node answers from its copy of the Raft state.
type raftTokens struct {
	state  *store.StateStore
	caHash string // the cluster CA's pin; a token for another cluster is refused
	// lagging says whether this node's state may lag the leader's (a
	// follower); then a token it does not know yet is waited for
	// (tokenLagWait) before it is refused. nil: never.
	lagging func() bool
	// waits holds one slot per check waiting for its token, so a flood
	// of made-up tokens ties up at most maxTokenWaits waits; the rest are
	// refused at once.
	waits chan struct{}
}

const (
	// tokenLagWait is how long a follower waits for a token unknown to
	// its state to arrive through Raft, as one created at the leader just
	// before it is used here.
	tokenLagWait = 2 * time.Second
	// maxTokenWaits bounds the checks waiting for a token at once.
	maxTokenWaits = 32
)

var _ tokenAuthority = raftTokens{}

// ErrTokenRefused wraps every refusal of a token; the message names the
// token ID and why.
var ErrTokenRefused = errors.New("token refused")

// check verifies token against its record for need at now.
func (t raftTokens) check(token string, need pki.Role, now time.Time) (pki.Role, error) {
	tok, err := pki.ParseToken(token)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrTokenRefused, err)
	}
	if t.caHash != "" && tok.CAHash != t.caHash {
		return "", fmt.Errorf("%w: token %s: made for the cluster whose CA is %s, this cluster's is %s", ErrTokenRefused, tok.ID, tok.CAHash, t.caHash)
	}
	rec, err := t.state.TokenByID(tok.ID)
	if err != nil {
		return "", err
	}
	if rec == nil && t.lagging != nil && t.lagging() {
		if rec, err = t.await(tok.ID); err != nil {
			return "", err
		}
	}
	if rec == nil {
		return "", fmt.Errorf("%w: token %s: unknown to this cluster", ErrTokenRefused, tok.ID)
	}
	if err := pkiRecord(rec).Check(tok, need, now); err != nil {
		return "", fmt.Errorf("%w: %v", ErrTokenRefused, err)
	}
	return pki.Role(rec.Role), nil
}

// await waits up to tokenLagWait for token id's record to appear in the
// state; nil when it does not, or when maxTokenWaits checks wait already.
func (t raftTokens) await(id string) (*store.TokenRecord, error) {
	if !take(t.waits) {
		return nil, nil
	}
	defer func() { <-t.waits }()
	ctx, cancel := context.WithTimeout(context.Background(), tokenLagWait)
	defer cancel()
	for {
		ws := memdb.NewWatchSet()
		rec, err := t.state.TokenByIDWatch(ws, id)
		if rec != nil || err != nil {
			return rec, err
		}
		if ws.WatchCtx(ctx) != nil {
			return nil, nil
		}
	}
}

// RoleOf implements tokenAuthority.
func (t raftTokens) RoleOf(token string, now time.Time) (pki.Role, error) {
	return t.check(token, pki.RoleRead, now)
}

func pkiRecord(r *store.TokenRecord) pki.Record {
	rec := pki.Record{ID: r.ID, SecretHash: r.SecretHash, Role: pki.Role(r.Role), Namespace: r.Namespace, Revoked: r.Revoked}
	if r.Expires != 0 {
		rec.Expires = time.Unix(0, r.Expires)
	}
	return rec
}

// serverTokens is a secure node's tokenAuthority: its own copy of the
// token table while member says it is in the Raft configuration, the
// leader's answers (remoteTokens) while it is not. A server-eligible node
// moves between the two: it starts outside the group, and one of more
// servers than RaftVoters never joins it.
type serverTokens struct {
	local  raftTokens
	remote *remoteTokens
	member func() bool
}

var _ tokenAuthority = serverTokens{}

// RoleOf implements tokenAuthority.
func (s serverTokens) RoleOf(token string, now time.Time) (pki.Role, error) {
	if s.member() {
		return s.local.RoleOf(token, now)
	}
	return s.remote.RoleOf(token, now)
}

// tokens is this node's token table in its copy of the Raft state.
func (n *Node) tokens() raftTokens {
	t := raftTokens{state: n.fsm.State(), waits: n.tokenWaits,
		lagging: func() bool { return n.raft != nil && !n.IsLeader() }}
	if n.sec.ca != nil {
		t.caHash = n.sec.ca.Hash()
	}
	return t
}

func (n *Node) tokenEndpoints() {
	handleLeader(n, wire.MethodTokenCreate, n.tokenCreate)
	handleLeader(n, wire.MethodTokenList, n.tokenList)
	handleLeader(n, wire.MethodTokenRevoke, n.tokenRevoke)
	handleLeader(n, wire.MethodNodeJoin, n.nodeJoin)
	handleLeader(n, wire.MethodNodeRenew, n.nodeRenew)
	// A node in the Raft configuration answers from its own copy of the
	// state; one outside it asks the leader (Auth.Check@leader), through
	// its cache.
	rpc.Handle(n.rpcServer, wire.MethodAuthCheck, func(ctx context.Context, req *wire.AuthCheckRequest) (*wire.AuthCheckReply, error) {
		switch {
		case n.remoteTokens != nil && !n.hasRaftState():
			rep, err := n.remoteTokens.lookup(ctx, req.Token)
			return rep, permissionDenied(err)
		case !n.hasRaftState() && n.secure(): // a token authority of its own (SetTokenAuthority)
			return n.askLeader(ctx, req.Token)
		}
		return n.authCheck(ctx, req)
	})
	handleAtLeader(n, wire.MethodAuthCheck, n.authCheck)
	handleLeader(n, wire.MethodJobTokenOf, n.jobTokenOf)
}

// errInsecure refuses what needs the cluster CA on an --insecure node.
func errInsecure(what string) error {
	return &rpc.Error{Code: wire.CodeBadInput, Message: what + ": this cluster runs with --insecure: it has no CA and no tokens"}
}

func (n *Node) tokenCreate(ctx context.Context, req *wire.TokenCreateRequest) (*wire.TokenCreateResponse, error) {
	if n.sec.insecure {
		return nil, errInsecure("token create")
	}
	role, err := pki.ParseRole(req.Role)
	if err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	if req.TTLNanos < 0 {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("token TTL %s: must not be negative (0: never expires)", time.Duration(req.TTLNanos))}
	}
	if req.Namespace != "" {
		if err := wire.CheckID("namespace", req.Namespace); err != nil {
			return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
		}
	}
	if req.Job != "" {
		if err := wire.CheckID("job ID", req.Job); err != nil {
			return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
		}
	}
	if req.Job != "" {
		// A job's one token, also when its registration is retried
		// through a node without Raft state of its own.
		if rec, err := n.fsm.State().JobToken(req.Job); err != nil {
			return nil, err
		} else if rec != nil {
			return &wire.TokenCreateResponse{Token: rec.JobToken}, nil
		}
	}
	tok, err := pki.NewToken(n.sec.ca.Hash())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	rec := store.TokenRecord{ID: tok.ID, SecretHash: tok.SecretHash(), Role: string(role), Namespace: req.Namespace, CreatedAt: now.UnixNano()}
	if req.Job != "" {
		// Every node that starts a worker of the job hands the token over.
		rec.Job, rec.JobToken = req.Job, tok.String()
	}
	if req.TTLNanos > 0 {
		rec.Expires = now.Add(time.Duration(req.TTLNanos)).UnixNano()
	}
	if _, err := n.apply(store.TokenCreateType, &store.TokenCreateRequest{Token: rec}); err != nil {
		return nil, err
	}
	if req.Job == "" {
		n.logger.Info("token created", "token_id", tok.ID, "role", role, "namespace", req.Namespace, "ttl", time.Duration(req.TTLNanos))
	} else {
		n.logger.Debug("job token created", "token_id", tok.ID, "job", req.Job)
	}
	rec.SecretHash, rec.JobToken = "", ""
	return &wire.TokenCreateResponse{Token: tok.String(), Record: rec}, nil
}

func (n *Node) tokenList(ctx context.Context, _ *wire.Empty) (*wire.TokenListResponse, error) {
	if !n.sec.insecure {
		n.ensureInitialToken()
	}
	recs, err := n.fsm.State().Tokens()
	if err != nil {
		return nil, err
	}
	resp := &wire.TokenListResponse{Tokens: make([]wire.TokenRecord, 0, len(recs))}
	for _, r := range recs {
		c := *r
		c.SecretHash, c.JobToken = "", ""
		resp.Tokens = append(resp.Tokens, c)
	}
	return resp, nil
}

func (n *Node) tokenRevoke(ctx context.Context, req *wire.TokenRevokeRequest) (*wire.Empty, error) {
	if n.sec.insecure {
		return nil, errInsecure("token revoke")
	}
	n.ensureInitialToken()
	if _, err := n.apply(store.TokenRevokeType, &store.TokenRevokeRequest{ID: req.ID}); err != nil {
		return nil, err
	}
	n.logger.Info("token revoked", "token_id", req.ID)
	return &wire.Empty{}, nil
}

// ensureInitialToken writes the record of the head's first join token
// (InitialTokenFile) through Raft if it is not there yet: the head makes
// the token before Raft elects it, and a join may arrive right after.
// Only the leader writes; a revoked record stays revoked.
func (n *Node) ensureInitialToken() {
	if n.sec.insecure || n.sec.ca == nil || !n.IsLeader() {
		return
	}
	b, err := os.ReadFile(n.dir.file(InitialTokenFile))
	if err != nil {
		return // not the head, or its operator removed the file
	}
	tok, err := pki.ParseToken(string(b))
	if err != nil || tok.CAHash != n.sec.ca.Hash() {
		return
	}
	if rec, err := n.fsm.State().TokenByID(tok.ID); err != nil || rec != nil {
		return
	}
	rec := store.TokenRecord{ID: tok.ID, SecretHash: tok.SecretHash(), Role: string(pki.RoleJoin), CreatedAt: time.Now().UnixNano()}
	if _, err := n.apply(store.TokenCreateType, &store.TokenCreateRequest{Token: rec}); err != nil {
		n.logger.Warn("record the first join token", "token_id", tok.ID, "err", err)
	}
}

// nodeJoin checks a joining node's token (role join or admin), signs its
// certificate request, and returns its identity; the CA key goes only to a
// server. A refusal is one line naming the token ID and why, logged here
// and returned to the joiner.
func (n *Node) nodeJoin(ctx context.Context, req *wire.JoinRequest) (*wire.JoinResponse, error) {
	if n.sec.insecure {
		return nil, errInsecure("join with a token")
	}
	if len(req.CSR) == 0 || len(req.CSR) > wire.MaxCSRBytes {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("join: certificate request of %d bytes: want 1 to %d", len(req.CSR), wire.MaxCSRBytes)}
	}
	if err := wire.CheckID("node ID", req.NodeID); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	n.ensureInitialToken()
	if _, err := n.tokens().check(req.Token, pki.RoleJoin, time.Now()); err != nil {
		if !errors.Is(err, ErrTokenRefused) {
			return nil, err
		}
		msg := strings.TrimPrefix(err.Error(), ErrTokenRefused.Error()+": ")
		n.logger.Warn("refused a node's join: "+msg, "node", req.NodeName, "node_id", short(req.NodeID))
		return nil, &rpc.Error{Code: wire.CodePermissionDenied, Message: msg}
	}
	cert, err := n.sec.ca.SignNode(req.CSR, req.NodeID, n.certValidity())
	if err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	resp := &wire.JoinResponse{NodeCert: cert, CACert: n.sec.caPEM, GossipKeys: n.sec.gossipKeys()}
	if req.Server {
		if resp.CAKey, err = n.sec.ca.KeyPEM(); err != nil {
			return nil, err
		}
	}
	tok, _ := pki.ParseToken(req.Token)
	n.logger.Info("signed a joining node's certificate", "node", req.NodeName, "node_id", short(req.NodeID), "token_id", tok.ID, "server", req.Server)
	return resp, nil
}
