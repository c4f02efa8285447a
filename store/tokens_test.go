package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func testToken(id string) TokenRecord {
	return TokenRecord{ID: id, SecretHash: strings.Repeat("ab", 32), Role: "join", Namespace: "ns", Expires: 5000, CreatedAt: 100}
}

func TestTokenCreateRevokeAndSnapshot(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	mustApply(t, f, 1, TokenCreateType, TokenCreateRequest{Token: testToken("0000000a")})
	mustApply(t, f, 2, TokenCreateType, TokenCreateRequest{Token: testToken("0000000b")})
	// A retried create of the same token is a no-op; another hash under
	// the same ID is refused.
	mustApply(t, f, 3, TokenCreateType, TokenCreateRequest{Token: testToken("0000000a")})
	other := testToken("0000000a")
	other.SecretHash = strings.Repeat("cd", 32)
	if err := applyErr(t, f, 4, TokenCreateType, TokenCreateRequest{Token: other}); !errors.Is(err, ErrTokenExists) {
		t.Errorf("create over another token's ID: %v, want ErrTokenExists", err)
	}
	mustApply(t, f, 5, TokenRevokeType, TokenRevokeRequest{ID: "0000000b"})
	mustApply(t, f, 6, TokenRevokeType, TokenRevokeRequest{ID: "0000000b"}) // again: no-op
	if err := applyErr(t, f, 7, TokenRevokeType, TokenRevokeRequest{ID: "0000000c"}); !errors.Is(err, ErrTokenNotFound) {
		t.Errorf("revoke of an unknown token: %v, want ErrTokenNotFound", err)
	}
	a, err := f.State().TokenByID("0000000a")
	if err != nil || a == nil || a.Revoked || a.CreateIndex != 1 || a.Role != "join" {
		t.Fatalf("token a: %+v, %v", a, err)
	}
	b, _ := f.State().TokenByID("0000000b")
	if b == nil || !b.Revoked || b.ModifyIndex != 5 {
		t.Fatalf("token b after revoke: %+v", b)
	}
	want, _ := f.State().Tokens()
	got, err := restored(t, f).State().Tokens()
	if err != nil || !reflect.DeepEqual(got, want) || len(got) != 2 {
		t.Fatalf("tokens after snapshot round trip: %+v, %v; want %+v", got, err, want)
	}
}

func TestTokenCreateChecksTheRecord(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	for _, bad := range []func(*TokenRecord){
		func(r *TokenRecord) { r.ID = "" },
		func(r *TokenRecord) { r.ID = "../../x" },
		func(r *TokenRecord) { r.ID = "ABCDEF01" },
		func(r *TokenRecord) { r.SecretHash = "plaintext-secret" },
		func(r *TokenRecord) { r.Role = "root" },
		func(r *TokenRecord) { r.Job = "job1" },                          // no job token
		func(r *TokenRecord) { r.JobToken = "nodeup1.x" },                // no job
		func(r *TokenRecord) { r.Job, r.JobToken = "../j", "nodeup1.x" }, // a bad job ID
	} {
		r := testToken("0000000a")
		bad(&r)
		if err := applyErr(t, f, 1, TokenCreateType, TokenCreateRequest{Token: r}); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("create %+v: %v, want ErrInvalidRequest", r, err)
		}
	}
	if toks, _ := f.State().Tokens(); len(toks) != 0 {
		t.Errorf("refused creates left %d tokens", len(toks))
	}
}

// A job token is found by its job, and revoking it deletes the record.
func TestJobTokenLookupAndRevokeDeletes(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	j := testToken("0000000a")
	j.Role, j.Job, j.JobToken = "submit", "job1", "nodeup1.0000000a.s.pin"
	mustApply(t, f, 1, TokenCreateType, TokenCreateRequest{Token: j})
	mustApply(t, f, 2, TokenCreateType, TokenCreateRequest{Token: testToken("0000000b")})
	got, err := f.State().JobToken("job1")
	if err != nil || got == nil || got.ID != "0000000a" || got.JobToken != j.JobToken {
		t.Fatalf("JobToken(job1) = %+v, %v; want token 0000000a", got, err)
	}
	if got, _ := f.State().JobToken("job2"); got != nil {
		t.Fatalf("JobToken(job2) = %+v, want none", got)
	}
	mustApply(t, f, 3, TokenRevokeType, TokenRevokeRequest{ID: "0000000a"})
	if rec, _ := f.State().TokenByID("0000000a"); rec != nil {
		t.Fatalf("a revoked job token is kept: %+v, want it deleted", rec)
	}
	if got, _ := f.State().JobToken("job1"); got != nil {
		t.Fatalf("JobToken(job1) after revoke = %+v, want none", got)
	}
	if err := applyErr(t, f, 4, TokenRevokeType, TokenRevokeRequest{ID: "0000000a"}); !errors.Is(err, ErrTokenNotFound) {
		t.Errorf("second revoke of a job token: %v, want ErrTokenNotFound", err)
	}
}
