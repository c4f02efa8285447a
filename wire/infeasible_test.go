package wire

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/nodeup/nodeup/internal/mpsafe"
)

// Infeasible has one shape on the wire in every message: a map with a
// Reason, or no key at all when the demand is not infeasible; a reader
// gets the reason back, or nil.
func TestInfeasibleOneShape(t *testing.T) {
	for _, msg := range []any{
		&LeaseReply{Infeasible: InfeasibleBecause("no alive node has GPU=9")},
		&ActorStartReply{Infeasible: InfeasibleBecause("no alive node has GPU=9")},
		&ActorInfo{PendingReason: "no alive node has GPU=9", Infeasible: InfeasibleBecause("no alive node has GPU=9")},
		&PGInfo{PendingReason: "no alive node has GPU=9", Infeasible: InfeasibleBecause("no alive node has GPU=9")},
	} {
		b, err := msgpack.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("Reason")) {
			t.Errorf("%T: the reason is not a Reason field on the wire: %x", msg, b)
		}
		var m map[string]any
		if err := mpsafe.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		inf, ok := m["Infeasible"].(map[string]any)
		if !ok || inf["Reason"] != "no alive node has GPU=9" {
			t.Errorf("%T: Infeasible on the wire is %#v, want {Reason: ...}", msg, m["Infeasible"])
		}
	}

	b, err := msgpack.Marshal(&LeaseReply{Busy: true, Infeasible: InfeasibleBecause("")})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("Infeasible")) {
		t.Errorf("a feasible reply carries an Infeasible key: %x", b)
	}
	var back LeaseReply
	if err := mpsafe.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Infeasible != nil || back.Infeasible.Why() != "" || !back.Busy {
		t.Errorf("decoded %+v, want Busy and no Infeasible", back)
	}
}
