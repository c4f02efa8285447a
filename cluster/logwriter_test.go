package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nodeup/nodeup/internal/testutil"
)

// jsonLines decodes each JSON log line of out, failing on a line that holds
// a key twice (encoding/json would silently keep the last).
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(line))
		if _, err := dec.Token(); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if seen[k.(string)] {
				t.Errorf("log line holds %q twice: %s", k, line)
			}
			seen[k.(string)] = true
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	return recs
}

type stringer string

func (s stringer) String() string { return "Node at " + string(s) }

// TestHCLogFieldsAreAttributes: what Raft logs through hclog comes out as
// one slog record whose key/value pairs are attributes (they were flattened
// into the message text), its "node" renamed so the node's own "node" key
// is not repeated, and levels follow the handler's level as it changes.
func TestHCLogFieldsAreAttributes(t *testing.T) {
	var buf bytes.Buffer
	level := new(slog.LevelVar)
	logger := slog.New(newUniqueKeys(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))).With("node", "n0")
	hl := hclogFor(logger, "raft").Named("snapshot")
	hl.Info("entering candidate state", "node", stringer("[::]:1 [Candidate]"), "term", 2,
		"took", hclog.Fmt("%dms", 5), "error", errors.New("boom"), "odd")
	hl.Debug("hidden at info")
	if hl.IsDebug() || !hl.IsInfo() {
		t.Errorf("at level info: IsDebug %v, IsInfo %v", hl.IsDebug(), hl.IsInfo())
	}
	level.Set(slog.LevelDebug)
	hl.With("peer", "p1").Debug("shown at debug")
	if !hl.IsDebug() || hl.GetLevel() != hclog.Debug {
		t.Errorf("at level debug: IsDebug %v, GetLevel %v", hl.IsDebug(), hl.GetLevel())
	}
	recs := jsonLines(t, buf.String())
	if len(recs) != 2 {
		t.Fatalf("want 2 records, got %d:\n%s", len(recs), buf.String())
	}
	want := map[string]any{"msg": "entering candidate state", "level": "INFO", "node": "n0", "component": "raft", "subsystem": "snapshot",
		"raft_node": "Node at [::]:1 [Candidate]", "term": 2.0, "took": "5ms", "error": "boom", "EXTRA_VALUE_AT_END": "odd"}
	for k, v := range want {
		if recs[0][k] != v {
			t.Errorf("record %v: %s = %v, want %v", recs[0], k, recs[0][k], v)
		}
	}
	if recs[1]["msg"] != "shown at debug" || recs[1]["peer"] != "p1" || recs[1]["level"] != "DEBUG" {
		t.Errorf("debug record: %v", recs[1])
	}
}

// TestUniqueKeys: a record's key that the logger already carries is renamed
// peer_<key> instead of repeated.
func TestUniqueKeys(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(newUniqueKeys(slog.NewJSONHandler(&buf, nil))).With("node", "n0").With("node_id", "abc")
	logger.Info("member alive", "node", "n1", "node_id", "def", "id", "x")
	logger.WithGroup("g").Info("grouped", "node", "n2")
	recs := jsonLines(t, buf.String())
	if r := recs[0]; r["node"] != "n0" || r["peer_node"] != "n1" || r["node_id"] != "abc" || r["peer_node_id"] != "def" || r["id"] != "x" {
		t.Errorf("record: %v", r)
	}
	if g, _ := recs[1]["g"].(map[string]any); g["node"] != "n2" || recs[1]["node"] != "n0" {
		t.Errorf("grouped record: %v", recs[1])
	}
}

// TestRaftLogLineHasAttributes starts a node whose logger writes JSON and
// checks a real Raft line: "entering leader state" carries Raft's "leader"
// as an attribute, with no hclog "[INFO]" text in the message.
func TestRaftLogLineHasAttributes(t *testing.T) {
	var out testutil.SyncBuffer
	testCluster(t, 1, func(_ int, c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	testutil.Until(t, 20*time.Second, "Raft's entering-leader line", func() error {
		for _, line := range strings.Split(out.String(), "\n") {
			if !strings.Contains(line, `"entering leader state"`) {
				continue
			}
			recs := jsonLines(t, line)
			r := recs[0]
			if r["component"] != "raft" || r["node"] != "n0" || !strings.Contains(fmt.Sprint(r["leader"]), "[Leader]") {
				return fmt.Errorf("raft line without its attributes: %s", line)
			}
			return nil
		}
		return errors.New("no such line yet")
	})
}
