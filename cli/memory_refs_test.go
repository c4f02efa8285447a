package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/worker"
)

// refHolder is a value that contains a ref, with a payload that makes it a
// stored (large) object.
type refHolder struct {
	R       worker.Ref[[]byte]
	Payload []byte
}

// memoryRow runs `nodeup memory --json` and returns the row of object id.
func memoryRow(t *testing.T, addr, id string) (memObjJSON, memoryJSON) {
	t.Helper()
	out, err := runMemory(t, "--address", addr, "--json")
	if err != nil {
		t.Fatalf("nodeup memory: %v", err)
	}
	var m memoryJSON
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	for _, o := range m.Objects {
		if o.ObjectID == id {
			return o, m
		}
	}
	t.Fatalf("object %s is not listed:\n%s", id, out)
	return memObjJSON{}, m
}

// nodeup memory shows the reference kinds each owner counts: a Put object
// held by a Ref and contained in another object, then by the other object
// only; an owner that does not answer is listed as such.
func TestMemoryShowsReferenceKinds(t *testing.T) {
	// Secure, as by default: the CLI reaches owners with their job's token.
	nodes := clustertest.Start(t, 1, nil)
	if err := worker.Init(context.Background(), worker.Address(nodes[0].SocketAddr()), worker.Logger(testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inner, err := worker.Put(ctx, make([]byte, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := worker.Put(ctx, refHolder{R: inner, Payload: make([]byte, 200<<10)})
	if err != nil {
		t.Fatal(err)
	}
	// A fake owner's object, to see an owner that does not answer.
	s0 := nodes[0].ObjectStore()
	if _, err := s0.Create("job9/fake1", 10); err != nil {
		t.Fatal(err)
	}
	if err := s0.Seal("job9/fake1"); err != nil {
		t.Fatal(err)
	}
	if err := s0.Label("job9/fake1", "127.0.0.1:1", "put"); err != nil {
		t.Fatal(err)
	}
	addr := nodes[0].SocketAddr()

	row, m := memoryRow(t, addr, inner.ID())
	want := map[string]int{"LOCAL_REFERENCE": 1, "CAPTURED_IN_OBJECT": 1}
	if row.RefState != refStateOK || fmt.Sprint(row.References) != fmt.Sprint(want) {
		t.Fatalf("inner object: references %v (%s), want %v", row.References, row.RefState, want)
	}
	if row, _ := memoryRow(t, addr, outer.ID()); fmt.Sprint(row.References) != fmt.Sprint(map[string]int{"LOCAL_REFERENCE": 1}) {
		t.Fatalf("outer object: references %v (%s), want one local reference", row.References, row.RefState)
	}
	if row, _ := memoryRow(t, addr, "fake1"); row.RefState != refStateNoAnswer ||
		len(m.OwnersUnanswered) != 1 || m.OwnersUnanswered[0].Address != "127.0.0.1:1" {
		t.Fatalf("fake owner's object: state %s, unanswered owners %+v; want owner_unanswered, 127.0.0.1:1 listed", row.RefState, m.OwnersUnanswered)
	}

	inner.Release()
	row, _ = memoryRow(t, addr, inner.ID())
	if fmt.Sprint(row.References) != fmt.Sprint(map[string]int{"CAPTURED_IN_OBJECT": 1}) {
		t.Fatalf("inner object after its Ref was released: references %v, want only CAPTURED_IN_OBJECT", row.References)
	}
	text, err := runMemory(t, "--address", addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"REFERENCES", "CAPTURED_IN_OBJECT:1", "LOCAL_REFERENCE:1", "owner 127.0.0.1:1 (1 objects) did not answer"} {
		if !strings.Contains(text, w) {
			t.Errorf("text output lacks %q:\n%s", w, text)
		}
	}
	outer.Release()
}
