package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
)

// runMemory runs `nodeup memory args...` and returns its output.
func runMemory(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := App()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.RunContext(context.Background(), append([]string{"nodeup", "memory"}, args...))
	return out.String(), err
}

// nodeup memory --json lists 100,000 objects of one node's store, created
// directly through objstore, merges a second node's secondary copy of one of
// them into the same row, and says how many a --limit left out.
func TestMemoryListsHundredThousandObjects(t *testing.T) {
	const n = 100_000
	nodes := clustertest.Start(t, 2, func(_ int, c *cluster.Config) { c.Insecure = true })
	s0, s1 := nodes[0].ObjectStore(), nodes[1].ObjectStore()
	for i := range n {
		key := fmt.Sprintf("job1/obj%06d", i)
		if _, err := s0.Create(key, int64(i%100)); err != nil {
			t.Fatal(err)
		}
		if err := s0.Seal(key); err != nil {
			t.Fatal(err)
		}
	}
	if err := s0.Label("job1/obj000099", "127.0.0.1:4242", "put"); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.CreateSecondary("job1/obj000099", 99); err != nil {
		t.Fatal(err)
	}
	if err := s1.Pin("job1/obj000099"); err != nil {
		t.Fatal(err)
	}
	if err := s1.Seal("job1/obj000099"); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	out, err := runMemory(t, "--address", nodes[0].SocketAddr(), "--json", "--sort", "size")
	if err != nil {
		t.Fatalf("nodeup memory: %v", err)
	}
	t.Logf("nodeup memory --json over %d objects: %v, %d bytes of JSON", n+1, time.Since(start), len(out))
	var m memoryJSON
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("decode --json output: %v", err)
	}
	if len(m.Objects) != n || m.LeftOut != 0 {
		t.Fatalf("listed %d objects, %d left out; want %d and 0", len(m.Objects), m.LeftOut, n)
	}
	if len(m.Nodes) != 2 || m.Nodes[0].Objects != n || m.Nodes[1].Objects != 1 || m.Nodes[1].PinnedBytes != 128 {
		t.Fatalf("node totals %+v; want n0 with %d objects, n1 with 1 pinned (128 bytes, rounded up)", m.Nodes, n)
	}
	if m.Objects[0].SizeBytes != 99 || m.Objects[len(m.Objects)-1].SizeBytes != 0 {
		t.Fatalf("--sort size: first %d bytes, last %d bytes; want 99 and 0", m.Objects[0].SizeBytes, m.Objects[len(m.Objects)-1].SizeBytes)
	}
	var row *memObjJSON
	for i := range m.Objects {
		if m.Objects[i].ObjectID == "obj000099" {
			row = &m.Objects[i]
		}
	}
	if row == nil || row.JobID != "job1" || row.Owner != "127.0.0.1:4242" || row.OwnerNode != "n0" || row.CallSite != "put" ||
		len(row.Copies) != 2 || !row.Copies[0].Primary || row.Copies[0].NodeName != "n0" ||
		row.Copies[1].Primary || !row.Copies[1].Pinned || row.Copies[1].NodeName != "n1" {
		t.Fatalf("obj000099 row %+v; want owner 127.0.0.1:4242 on n0 (put), primary on n0, pinned secondary on n1", row)
	}
	if row.RefState != refStateNoAnswer || len(m.OwnersUnanswered) != 1 {
		t.Errorf("obj000099 of an owner that does not listen: references %s, unanswered owners %+v; want owner_unanswered, one owner", row.RefState, m.OwnersUnanswered)
	}

	out, err = runMemory(t, "--address", nodes[0].SocketAddr(), "--json", "--limit", "1000")
	if err != nil {
		t.Fatal(err)
	}
	m = memoryJSON{}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if m.LeftOut != n-1000 || m.Nodes[0].LeftOut != n-1000 || m.Nodes[0].Objects != n {
		t.Fatalf("--limit 1000: left out %d (n0 %d of %d); want %d", m.LeftOut, m.Nodes[0].LeftOut, m.Nodes[0].Objects, n-1000)
	}
	text, err := runMemory(t, "--address", nodes[0].SocketAddr(), "--limit", "10", "--group-by", "node")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("%d objects left out", n-10), "--- node n1: 1 objects", "n1(secondary,pinned)", "did not answer for reference kinds"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
}
