package store

import (
	"cmp"
	"fmt"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nodeup/nodeup/wire"
)

// TokenCreateRequest records a new token. Token.SecretHash is the hex
// sha256 of the secret (the secret itself never reaches the log); Revoked,
// CreateIndex and ModifyIndex are ignored. A create of a recorded ID with
// the same hash is a no-op (a retried apply); another hash is
// ErrTokenExists. Errors: ErrInvalidRequest (bad ID, hash or role).
type TokenCreateRequest struct {
	Token TokenRecord
}

// TokenRevokeRequest marks a token revoked; revoking a revoked token is a
// no-op. A job token (Job set) is deleted instead, so that the table does
// not fill with one record per job ever run; revoking it again is then
// ErrTokenNotFound. Errors: ErrTokenNotFound.
type TokenRevokeRequest struct {
	ID string
}

// maxTokens bounds the tokens table: each create is an operator's act, and
// a record is about 150 bytes.
const maxTokens = 10000

// validToken checks a record's shape: an 8-hex ID, a 64-hex hash and a
// known role (internal/pki.Role's names).
func validToken(t *TokenRecord) error {
	if !wire.IsLowerHex(t.ID, 8) {
		return fmt.Errorf("token ID %q: want 8 hex characters: %w", t.ID, ErrInvalidRequest)
	}
	if !wire.IsLowerHex(t.SecretHash, 64) {
		return fmt.Errorf("token %s: secret hash: want 64 hex characters: %w", t.ID, ErrInvalidRequest)
	}
	switch t.Role {
	case "read", "submit", "join", "admin":
	default:
		return fmt.Errorf("token %s: role %q: want read, submit, join or admin: %w", t.ID, t.Role, ErrInvalidRequest)
	}
	if (t.Job == "") != (t.JobToken == "") {
		return fmt.Errorf("token %s: job %q with job token of %d bytes: want both or neither: %w", t.ID, t.Job, len(t.JobToken), ErrInvalidRequest)
	}
	if t.Job != "" {
		if err := wire.CheckID("token job", t.Job); err != nil {
			return fmt.Errorf("token %s: %v: %w", t.ID, err, ErrInvalidRequest)
		}
	}
	return nil
}

// TokenByID returns the token record with the given ID, or (nil, nil) if
// there is none.
func (s *StateStore) TokenByID(id string) (*TokenRecord, error) {
	return first[*TokenRecord](s, "token "+id, tableTokens, "id", id)
}

// JobToken returns the live token of job (TokenRecord.Job), or (nil, nil)
// when it has none. It scans the table (at most maxTokens records), once
// per worker process start and job end.
func (s *StateStore) JobToken(job string) (*TokenRecord, error) {
	recs, err := s.Tokens()
	if err != nil || job == "" {
		return nil, err
	}
	for _, r := range recs {
		if r.Job == job && !r.Revoked {
			return r, nil
		}
	}
	return nil, nil
}

// Tokens returns every token record, revoked ones included, by ID.
func (s *StateStore) Tokens() ([]*TokenRecord, error) {
	return all(s, "tokens", tableTokens, "id", func(a, b *TokenRecord) int { return cmp.Compare(a.ID, b.ID) })
}

// createToken records req's token at index (see TokenCreateRequest).
func (s *StateStore) createToken(index uint64, t *TokenRecord) error {
	if err := validToken(t); err != nil {
		return err
	}
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableTokens, "id", t.ID)
		if err != nil {
			return false, err
		}
		if raw != nil {
			if raw.(*TokenRecord).SecretHash == t.SecretHash {
				return false, nil
			}
			return false, fmt.Errorf("token %s: %w", t.ID, ErrTokenExists)
		}
		if n, err := txn.Get(tableTokens, "id"); err == nil {
			c := 0
			for raw := n.Next(); raw != nil; raw = n.Next() {
				c++
			}
			if c >= maxTokens {
				return false, fmt.Errorf("token %s: the cluster holds %d tokens, the most it keeps; revoke is not enough, so this is a bug or abuse: %w", t.ID, c, ErrInvalidRequest)
			}
		}
		rec := *t
		rec.Revoked = false
		rec.CreateIndex, rec.ModifyIndex = index, index
		return true, txn.Insert(tableTokens, &rec)
	})
}

// revokeToken marks token id revoked at index.
func (s *StateStore) revokeToken(index uint64, id string) error {
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableTokens, "id", id)
		if err != nil {
			return false, err
		}
		if raw == nil {
			return false, fmt.Errorf("token %s: %w", id, ErrTokenNotFound)
		}
		cur := raw.(*TokenRecord)
		if cur.Job != "" {
			return true, txn.Delete(tableTokens, cur)
		}
		if cur.Revoked {
			return false, nil
		}
		rec := *cur
		rec.Revoked = true
		rec.ModifyIndex = index
		return true, txn.Insert(tableTokens, &rec)
	})
}
