package pki

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Role is what a token lets its holder do, as Nomad's ACL policies and
// Ray's token auth, from least to most: read < submit < join < admin.
type Role string

// Roles a token can have.
const (
	RoleRead   Role = "read"   // status, lists, logs
	RoleSubmit Role = "submit" // read, and run jobs, tasks and actors
	RoleJoin   Role = "join"   // a node joining the cluster (gets a node certificate)
	RoleAdmin  Role = "admin"  // everything: tokens, keyring, Raft operations
)

// ParseRole checks a role name, naming the accepted ones.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleRead, RoleSubmit, RoleJoin, RoleAdmin:
		return r, nil
	}
	return "", fmt.Errorf("role %q: want read, submit, join or admin", s)
}

// Allows reports whether a token of role r may do what need requires.
// join and submit are separate powers (a node's token cannot run jobs, a
// submitter's cannot mint nodes); admin may do everything, and every role
// may read.
func (r Role) Allows(need Role) bool {
	return r == need || r == RoleAdmin || need == RoleRead
}

// A token is "nodeup1." + its ID (8 hex) + "." + its secret (32 hex, 128
// bits) + "." + the CA pin's hex: the ID names it (listings, revocation),
// the secret proves it, and the pin lets a joining node check the cluster
// before it sends anything (kubeadm's discovery hash).
const tokenPrefix = "nodeup1."

// Token is a parsed token.
type Token struct {
	ID     string // 8 hex characters
	Secret string // 32 hex characters
	CAHash string // "sha256:" + 64 hex characters
}

// NewToken makes a token for the cluster whose CA pin is caHash.
func NewToken(caHash string) (Token, error) {
	if _, err := pinHex(caHash); err != nil {
		return Token{}, err
	}
	id, secret := make([]byte, 4), make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return Token{}, fmt.Errorf("pki: new token: %w", err)
	}
	if _, err := rand.Read(secret); err != nil {
		return Token{}, fmt.Errorf("pki: new token: %w", err)
	}
	return Token{ID: hex.EncodeToString(id), Secret: hex.EncodeToString(secret), CAHash: caHash}, nil
}

// String is the token as the user passes it (--token, NODEUP_TOKEN).
func (t Token) String() string {
	pin, _ := pinHex(t.CAHash)
	return tokenPrefix + t.ID + "." + t.Secret + "." + pin
}

// ParseToken reads a token given by a user. The error says what part is
// wrong without echoing the secret.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return Token{}, fmt.Errorf("token: want nodeup1.<id>.<secret>.<ca hash> (as printed by nodeup start --head or nodeup token create)")
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return Token{}, fmt.Errorf("token: want 4 dot-separated parts, got %d", len(parts)+1)
	}
	if !IsLowerHex(parts[0], 8) {
		return Token{}, fmt.Errorf("token: id %q: want 8 hex characters", parts[0])
	}
	if !IsLowerHex(parts[1], 32) {
		return Token{}, fmt.Errorf("token %s: secret: want 32 hex characters", parts[0])
	}
	if !IsLowerHex(parts[2], 64) {
		return Token{}, fmt.Errorf("token %s: CA hash: want 64 hex characters", parts[0])
	}
	return Token{ID: parts[0], Secret: parts[1], CAHash: "sha256:" + parts[2]}, nil
}

// SecretHash is what the cluster stores of a token: the hex sha256 of its
// secret, never the secret.
func (t Token) SecretHash() string {
	sum := sha256.Sum256([]byte(t.Secret))
	return hex.EncodeToString(sum[:])
}

// Record is a token as the cluster keeps it (in Raft): its ID, the hash of
// its secret, its role and namespace, and when it expires (zero: never).
type Record struct {
	ID         string
	SecretHash string
	Role       Role
	Namespace  string // "" for every namespace
	Expires    time.Time
	Revoked    bool
}

// Check verifies a presented token against its record at now: the secret
// (compared in constant time), not revoked, not expired, and a role that
// allows need. The error says which, for a one-line refusal.
func (rec Record) Check(t Token, need Role, now time.Time) error {
	if t.ID != rec.ID || subtle.ConstantTimeCompare([]byte(t.SecretHash()), []byte(rec.SecretHash)) != 1 {
		return fmt.Errorf("token %s: wrong secret", t.ID)
	}
	if rec.Revoked {
		return fmt.Errorf("token %s: revoked", t.ID)
	}
	if !rec.Expires.IsZero() && !now.Before(rec.Expires) {
		return fmt.Errorf("token %s: expired at %s", t.ID, rec.Expires.UTC().Format(time.RFC3339))
	}
	if !rec.Role.Allows(need) {
		return fmt.Errorf("token %s: role %s does not allow %s", t.ID, rec.Role, need)
	}
	return nil
}

// pinHex returns the hex of a "sha256:<64 hex>" pin.
func pinHex(caHash string) (string, error) {
	h, ok := strings.CutPrefix(caHash, "sha256:")
	if !ok || !IsLowerHex(h, 64) {
		return "", fmt.Errorf("pki: CA hash %q: want sha256:<64 hex characters>", caHash)
	}
	return h, nil
}

// IsLowerHex reports whether s is exactly n lowercase hex characters (0-9,
// a-f): the shape of token IDs, secrets and hashes, and of every hash that
// names a file.
func IsLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
