package wire

// Token methods, at the leader (forwarded): tokens live in the Raft state
// (docs/security.md). The secret of a token never travels after Create
// returns it, and is never stored: only its sha256.
const (
	// MethodTokenCreate: CLI → leader. TokenCreateRequest → TokenCreateResponse.
	MethodTokenCreate = "Token.Create"
	// MethodTokenList: CLI → leader. Empty → TokenListResponse.
	MethodTokenList = "Token.List"
	// MethodTokenRevoke: CLI → leader. TokenRevokeRequest → Empty.
	MethodTokenRevoke = "Token.Revoke"
	// MethodNodeJoin: a joining node → leader (forwarded by the peer it
	// dials). JoinRequest → JoinResponse. The only method besides Hello a
	// TLS connection without a node certificate may call.
	MethodNodeJoin = "Node.Join"
	// MethodNodeRenew: a node → leader, over mutual TLS with its current
	// certificate. RenewRequest → RenewResponse.
	MethodNodeRenew = "Node.Renew"
	// MethodAuthCheck: core worker → its node (over the Unix socket, or
	// TCP with the job token). AuthCheckRequest → AuthCheckReply, or
	// permission_denied naming the token ID and why it is refused. A Raft
	// server answers from its copy of the Raft state; a node without one
	// asks the leader (Auth.Check@leader) and keeps a positive answer a
	// few seconds.
	MethodAuthCheck = "Auth.Check"
)

// AuthCheckRequest asks a node whose a token is: a core worker resolves
// the token a connection to it presented (docs/protocol.md, "The job
// token").
type AuthCheckRequest struct {
	Token string
}

// AuthCheckReply is a valid token's ID, role and job ("" for a token of
// no job).
type AuthCheckReply struct {
	TokenID string
	Role    string
	Job     string
}

// TokenRecord is a token as the cluster keeps it in Raft: the sha256 of its
// secret (hex, 64 characters), never the secret. Listings leave SecretHash
// empty.
type TokenRecord struct {
	// ID is the token's public ID (8 hex characters).
	ID string
	// SecretHash is the hex sha256 of the secret.
	SecretHash string
	// Role is read, submit, join or admin (internal/pki.Role).
	Role string
	// Namespace limits the token to one namespace; "" for every namespace.
	Namespace string
	// Expires is when the token stops working, unix nanoseconds; 0 never.
	Expires int64
	// CreatedAt is when it was made, unix nanoseconds.
	CreatedAt int64
	// Revoked is set by Token.Revoke; a revoked token is kept for listings.
	// A job token is deleted instead.
	Revoked bool
	// Job is the job a job token belongs to (its node minted it at
	// Job.Register and revokes it when the job ends); "" for other tokens.
	Job string
	// JobToken is a job token's whole token: every node that starts a
	// worker process of the job hands it over (EnvJobToken). It is the one
	// secret kept in Raft, for as long as the job lives; listings leave it
	// empty. "" for other tokens.
	JobToken string
	// CreateIndex and ModifyIndex are the Raft indexes of its creation and
	// last change.
	CreateIndex, ModifyIndex uint64
}

// Copy returns a copy of r; a nil r yields nil.
func (r *TokenRecord) Copy() *TokenRecord {
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// TokenCreateRequest asks for a new token.
type TokenCreateRequest struct {
	// Role is read, submit, join or admin.
	Role string
	// TTLNanos is how long it works; 0 for ever.
	TTLNanos int64
	// Namespace limits the token to one namespace; "" for all.
	Namespace string
	// Job makes a job token for that job ID (Job.Register does); "" for
	// none.
	Job string
}

// TokenCreateResponse carries the token once: it is not stored anywhere.
type TokenCreateResponse struct {
	// Token is nodeup1.<id>.<secret>.<ca pin>.
	Token string
	// Record is what the cluster stores (SecretHash empty).
	Record TokenRecord
}

// TokenListResponse lists every token, revoked and expired ones included,
// by ID; SecretHash is empty.
type TokenListResponse struct {
	Tokens []TokenRecord
}

// TokenRevokeRequest revokes one token by its ID.
type TokenRevokeRequest struct {
	ID string
}

// JoinRequest is a node asking to join: the token (role join or admin) and
// a certificate request made with the node's own key, which never leaves it.
type JoinRequest struct {
	// Token is the full token string.
	Token string
	// NodeID is the joining node's ID, the CSR's common name.
	NodeID string
	// NodeName is its human name, for the leader's log.
	NodeName string
	// CSR is the DER certificate request (at most MaxCSRBytes).
	CSR []byte
	// Server asks for the CA key too: a Raft server signs certificates
	// when it leads.
	Server bool
}

// MaxCSRBytes bounds a certificate request; a P-256 one is about 250 bytes.
const MaxCSRBytes = 4096

// JoinResponse is the joining node's identity: its certificate, the CA's,
// the gossip keys, and the CA key only for a server.
type JoinResponse struct {
	// NodeCert and CACert are PEM.
	NodeCert, CACert []byte
	// CAKey is the CA's PEM key, only when JoinRequest.Server.
	CAKey []byte
	// GossipKeys are memberlist's keys, the primary first (32 bytes each).
	GossipKeys [][]byte
}

// RenewRequest asks for a new certificate for a node, which proves who it
// is with its current certificate: Proof is its current key's ECDSA
// signature (ASN.1) over the sha256 of CSR.
type RenewRequest struct {
	// NodeID is the node's ID, the common name of both certificates.
	NodeID string
	// CSR is the DER request made with the node's new key (at most
	// MaxCSRBytes).
	CSR []byte
	// Current is the node's current certificate (PEM), of the cluster CA
	// and not expired.
	Current []byte
	// Proof is the current key's signature over sha256(CSR).
	Proof []byte
}

// RenewResponse is the new node certificate (PEM).
type RenewResponse struct {
	NodeCert []byte
}

// Gossip keyring methods (docs/security.md), as Serf's keyring operations.
const (
	// MethodKeyringRotate: CLI → leader. Empty → KeyringRotateResponse.
	// The leader installs a new key on every live node, makes it the
	// primary everywhere, then removes the old ones.
	MethodKeyringRotate = "Keyring.Rotate"
	// MethodKeyringSet: leader → every node. KeyringSetRequest → Empty.
	MethodKeyringSet = "Keyring.Set"
)

// KeyringSetRequest is a node's whole gossip keyring: every key in Keys is
// installed, Primary (one of them) encrypts, and any other key is removed.
type KeyringSetRequest struct {
	// Keys are 32 bytes each, at most 16.
	Keys [][]byte
	// Primary is the index in Keys of the key that encrypts.
	Primary int
}

// KeyringRotateResponse says which nodes use the new key.
type KeyringRotateResponse struct {
	// Nodes are the names of the nodes now on the new key.
	Nodes []string
}

// MethodJobTokenOf gives a node without Raft state of its own (not a
// server) the token of a job whose worker it starts (the leader answers
// from its state; role admin: nodes only).
const MethodJobTokenOf = "Job.TokenOf"

// JobTokenOfRequest names the job (or an actor incarnation's job ID).
type JobTokenOfRequest struct {
	Job string
}

// JobTokenOfReply carries the job's token ("" on an --insecure cluster).
type JobTokenOfReply struct {
	Token string
}
