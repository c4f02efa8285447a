package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/wire"
)

// The operator verbs end to end over a node's Unix socket: list-peers
// prints the one server as leader and voter (JSON too); remove-peer of the
// last voter is refused; snapshot save writes a 0600 file that restore
// takes back (a KV change made after the save is undone); a damaged file
// is refused naming it; node eligibility needs exactly one of its flags.
func TestOperatorCommands(t *testing.T) {
	nd := clustertest.Start(t, 1, func(_ int, c *cluster.Config) { c.Insecure = true })[0]
	addr := nd.SocketAddr()
	out, err := run(t, "operator", "raft", "list-peers", "--address", addr)
	if err != nil || !strings.Contains(out, nd.ID()) || !strings.Contains(out, "leader") || !strings.Contains(out, "true") {
		t.Fatalf("list-peers: %q, %v", out, err)
	}
	out, err = run(t, "operator", "raft", "list-peers", "--json", "--address", addr)
	var peers []raftPeerOut
	if err != nil || json.Unmarshal([]byte(out), &peers) != nil || len(peers) != 1 || peers[0].State != "leader" || !peers[0].Voter || peers[0].Name != nd.Name() {
		t.Fatalf("list-peers --json: %q, %v", out, err)
	}
	if _, err := run(t, "operator", "raft", "remove-peer", "--address", addr, nd.ID()); err == nil || !strings.Contains(err.Error(), "last Raft voter") {
		t.Fatalf("remove-peer of the last voter: %v", err)
	}

	nodeCall(t, nd, wire.MethodKVSet, &wire.KVRequest{Key: "k", Value: []byte("saved")}, &wire.KVResponse{})
	file := filepath.Join(t.TempDir(), "backup.snap")
	if out, err := run(t, "operator", "snapshot", "save", "--address", addr, file); err != nil || !strings.Contains(out, file) {
		t.Fatalf("snapshot save: %q, %v", out, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v %v, want mode 0600", fi, err)
	}
	nodeCall(t, nd, wire.MethodKVSet, &wire.KVRequest{Key: "k", Value: []byte("later")}, &wire.KVResponse{})
	if out, err := run(t, "operator", "snapshot", "restore", "--address", addr, file); err != nil || !strings.Contains(out, "restored") {
		t.Fatalf("snapshot restore: %q, %v", out, err)
	}
	var kv wire.KVResponse
	nodeCall(t, nd, wire.MethodKVGet, &wire.KVRequest{Key: "k"}, &kv)
	if len(kv.Entries) != 1 || string(kv.Entries[0].Value) != "saved" {
		t.Fatalf("after restore k=%+v, want saved", kv.Entries)
	}
	bad := filepath.Join(t.TempDir(), "bad.snap")
	os.WriteFile(bad, []byte("NUSNAPF1 but far too short"), 0o600)
	if _, err := run(t, "operator", "snapshot", "restore", "--address", addr, bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("restore of a bad file: %v, want an error naming %s", err, bad)
	}
	if _, err := run(t, "node", "eligibility", "--address", addr, nd.Name()); err == nil || !strings.Contains(err.Error(), "--enable") {
		t.Fatalf("eligibility without a flag: %v", err)
	}
	if out, err := run(t, "node", "eligibility", "--address", addr, "--disable", nd.Name()); err != nil || !strings.Contains(out, "ineligible") {
		t.Fatalf("eligibility --disable: %q, %v", out, err)
	}
}
