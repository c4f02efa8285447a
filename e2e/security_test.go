package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// A secure cluster from the command line: the head prints its first join
// token once and keeps it 0600; a node without a token, or with a revoked
// one, is refused with one line naming why; nodeup token create, list and
// revoke round-trip; status shows the security mode.
func TestTokensFromTheCommandLine(t *testing.T) {
	root := t.TempDir()
	head := startHead(t, root)
	tokFile := tokenFile(head)
	fi, err := os.Stat(tokFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("head's token file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	b, _ := os.ReadFile(tokFile)
	initial := strings.TrimSpace(string(b))
	testutil.Until(t, 10*time.Second, "the head prints the token", func() error {
		if !strings.Contains(head.log.String(), "--token "+initial) {
			return os.ErrNotExist
		}
		return nil
	})
	if strings.Count(head.log.String(), initial) != 1 {
		t.Errorf("the head printed its token %d times, want once", strings.Count(head.log.String(), initial))
	}

	// No token: refused before anything is sent.
	bare := startNode(t, root, "bare", []string{"join", head.addr()})
	if err := bare.wait(); err == nil || !strings.Contains(bare.log.String(), "pass --token") {
		t.Fatalf("join without a token: %v\n%s", err, bare.log.String())
	}

	out, errOut, code := nodeup(t, nil, "token", "create", "--role", "join", "--ttl", "1h", "--address", head.addr())
	if code != 0 {
		t.Fatalf("token create: exit %d: %s", code, errOut)
	}
	made := strings.TrimSpace(out)
	id := strings.Split(made, ".")[1]
	joined := startNode(t, root, "n1", []string{"join", head.addr(), "--token", made})
	waitFormed(t, head.addr(), 2)

	out, errOut, code = nodeup(t, nil, "token", "list", "--json", "--address", joined.addr())
	if code != 0 {
		t.Fatalf("token list: exit %d: %s", code, errOut)
	}
	var toks []struct {
		ID, Role string
		Revoked  bool
	}
	if err := json.Unmarshal([]byte(out), &toks); err != nil || len(toks) != 2 {
		t.Fatalf("token list --json: %v: %s", err, out)
	}
	if strings.Contains(out, strings.Split(made, ".")[2]) {
		t.Fatal("token list shows a secret")
	}
	if _, errOut, code = nodeup(t, nil, "token", "revoke", id, "--address", joined.addr()); code != 0 {
		t.Fatalf("token revoke: exit %d: %s", code, errOut)
	}
	late := startNode(t, root, "late", []string{"join", joined.addr(), "--token", made})
	if err := late.wait(); err == nil || !strings.Contains(late.log.String(), "token "+id+": revoked") {
		t.Fatalf("join with a revoked token: %v\n%s", err, late.log.String())
	}
	if !strings.Contains(head.log.String(), "refused a node's join: token "+id+": revoked") {
		t.Errorf("the leader's log does not name the refusal:\n%s", head.log.String())
	}
	st, err := status(t, head.addr())
	if err != nil || st.Insecure || !strings.HasPrefix(st.CAHash, "sha256:") {
		t.Fatalf("status: %+v, %v; want secure with a CA hash", st, err)
	}
}

// --insecure: no CA, no token, a warning at start, and status says so.
func TestInsecureClusterSaysSo(t *testing.T) {
	root := t.TempDir()
	head := startHead(t, root, "--insecure")
	other := startNode(t, root, "n1", []string{"join", head.addr(), "--insecure"})
	waitFormed(t, other.addr(), 2)
	if _, err := os.Stat(tokenFile(head)); err == nil {
		t.Error("an insecure head made a join token")
	}
	if !strings.Contains(head.log.String(), "running with --insecure") {
		t.Errorf("no warning at start:\n%s", head.log.String())
	}
	st, err := status(t, head.addr())
	if err != nil || !st.Insecure {
		t.Fatalf("status: %+v, %v; want insecure", st, err)
	}
	out, _, code := nodeup(t, nil, "status", "--address", head.addr())
	if code != 0 || !strings.Contains(out, "INSECURE") {
		t.Fatalf("status text does not say INSECURE: %s", out)
	}
}

// From another machine's point of view (no current-node file, another
// TMPDIR), nodeup status --address host:port is refused with one line
// saying the node requires TLS; with a read token it is answered over TLS
// pinned to the token's CA, and a submit verb with that token is refused
// naming the method and the role.
func TestStatusOverTCPNeedsAToken(t *testing.T) {
	root := t.TempDir()
	head := startHead(t, root)
	out, errOut, code := nodeup(t, nil, "token", "create", "--role", "read", "--address", head.addr())
	if code != 0 {
		t.Fatalf("token create --role read: exit %d: %s", code, errOut)
	}
	read := strings.TrimSpace(out)
	away := []string{"TMPDIR=" + t.TempDir(), "NODEUP_TOKEN=", "NODEUP_ADDRESS=", "NODEUP_DATA_DIR=" + t.TempDir()}

	_, errOut, code = nodeupTCP(t, away, "status", "--address", head.addr(), "--timeout", "5s")
	if code == 0 || !strings.Contains(errOut, "this node requires TLS") || !strings.Contains(errOut, "Cluster.Status needs role read") {
		t.Fatalf("status over plaintext TCP without a token: exit %d: %s", code, errOut)
	}
	if n := strings.Count(strings.TrimSpace(errOut), "\n"); n != 0 {
		t.Errorf("the refusal is %d lines, want one: %s", n+1, errOut)
	}
	out, errOut, code = nodeupTCP(t, away, "status", "--json", "--address", head.addr(), "--token", read, "--timeout", "5s")
	if code != 0 {
		t.Fatalf("status with a read token: exit %d: %s", code, errOut)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil || alive(&st) != 1 {
		t.Fatalf("status with a read token: %v: %s", err, out)
	}
	_, errOut, code = nodeupTCP(t, away, "kv", "put", "k", "v", "--address", head.addr(), "--token", read, "--timeout", "5s")
	if code == 0 || !strings.Contains(errOut, "KV.Set needs role submit") || !strings.Contains(errOut, "with role read") {
		t.Fatalf("kv put with a read token: exit %d: %s", code, errOut)
	}
}

// A cluster of more nodes than Raft voters (four, with the default three):
// the fourth node, outside the Raft group, takes every valid token over TCP
// and the CLI over its Unix socket, and a driver connected to it runs its
// tasks and actors across the cluster (issue 27: it refused every token as
// unknown to this cluster, and a driver could not register there).
func TestFourthNodeOutsideRaftTakesTokensAndDrivers(t *testing.T) {
	procs := startThreeNodes(t)
	root := filepath.Dir(procs[0].dataDir)
	n3 := startNode(t, root, "n3", []string{"join", procs[0].addr(), "--token-file", tokenFile(procs[0])})
	testutil.Until(t, 30*time.Second, "4 nodes alive, 3 voters", func() error {
		st, err := status(t, n3.addr())
		if err != nil {
			return err
		}
		if alive(st) != 4 || voters(st) != 3 || len(st.Servers) != 3 {
			return fmt.Errorf("%d alive, %d voters, %d Raft servers", alive(st), voters(st), len(st.Servers))
		}
		return nil
	})
	away := []string{"TMPDIR=" + t.TempDir(), "NODEUP_TOKEN=", "NODEUP_ADDRESS=", "NODEUP_DATA_DIR=" + t.TempDir()}
	for _, role := range []string{"read", "submit", "admin"} {
		out, errOut, code := nodeup(t, nil, "token", "create", "--role", role, "--address", procs[1].addr())
		if code != 0 {
			t.Fatalf("token create --role %s: exit %d: %s", role, code, errOut)
		}
		if _, errOut, code = nodeupTCP(t, away, "status", "--address", n3.addr(), "--token", strings.TrimSpace(out), "--timeout", "5s"); code != 0 {
			t.Fatalf("status through n3 (outside Raft) with a %s token: exit %d: %s", role, code, errOut)
		}
	}
	bin := buildExamples(t, "counter", "nested")
	for _, ex := range []string{"counter", "nested"} {
		cmd := exec.Command(filepath.Join(bin, ex))
		cmd.Env = append(os.Environ(), "NODEUP_ADDRESS="+n3.sock())
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "check: ") {
			t.Fatalf("%s with its driver on n3: %v: %s\n%s", ex, err, lastLine(string(out)), out)
		}
		t.Logf("%s on n3: %s", ex, checkLine(string(out)))
	}
}

// Two nodes on one machine, one user, one TMPDIR: a client verb and a Go
// driver given either node's host:port without a token reach it over its
// Unix socket (issue 27: only the node started last was found, the other
// refused the client as anonymous); an address of this machine with no
// node recorded is refused with a line saying what to do.
func TestEveryLocalNodeReachableByItsAddress(t *testing.T) {
	procs := startThreeNodes(t)
	root := filepath.Dir(procs[0].dataDir)
	env := []string{"TMPDIR=" + root, "NODEUP_TOKEN=", "NODEUP_ADDRESS="}
	for _, p := range procs {
		out, errOut, code := nodeupTCP(t, env, "status", "--json", "--address", p.addr(), "--timeout", "5s")
		if code != 0 {
			t.Fatalf("status --address %s (node %s, not the last started) without a token: exit %d: %s", p.addr(), p.name, code, errOut)
		}
		var st statusJSON
		if err := json.Unmarshal([]byte(out), &st); err != nil || alive(&st) != 3 {
			t.Fatalf("status through %s: %v: %s", p.name, err, out)
		}
	}
	bin := buildExamples(t, "counter")
	cmd := exec.Command(filepath.Join(bin, "counter"))
	cmd.Env = append(os.Environ(), append(env, "NODEUP_ADDRESS="+procs[0].addr())...)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "check: ") {
		t.Fatalf("a driver given n0's host:port (n2 started last): %v: %s", err, out)
	}
	// Another TMPDIR records no node: the refusal says how to reach one.
	away := []string{"TMPDIR=" + t.TempDir(), "NODEUP_TOKEN=", "NODEUP_ADDRESS="}
	_, errOut, code := nodeupTCP(t, away, "status", "--address", procs[0].addr(), "--timeout", "5s")
	if code == 0 || !strings.Contains(errOut, "records its Unix socket") || !strings.Contains(errOut, "nodeup.sock") {
		t.Fatalf("status from another TMPDIR without a token: exit %d: %s", code, errOut)
	}
}
