package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// mapTokens is a tokenAuthority over a map, standing in for raftTokens.
type mapTokens map[string]pki.Role

func (m mapTokens) RoleOf(token string, now time.Time) (pki.Role, error) {
	t, err := pki.ParseToken(token)
	if err != nil {
		return "", err
	}
	r, ok := m[token]
	if !ok {
		return "", fmt.Errorf("token %s: unknown", t.ID)
	}
	return r, nil
}

// newTestToken makes a token string of a made-up cluster.
func newTestToken(t *testing.T) string {
	t.Helper()
	tok, err := pki.NewToken("sha256:" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	return tok.String()
}

// dialNode opens an RPC client to addr ("host:port" or unix://path)
// presenting token ("" for none).
func dialNode(t *testing.T, addr, token string) *rpc.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	network := "tcp"
	if p, ok := strings.CutPrefix(addr, rpc.UnixPrefix); ok {
		network, addr = "unix", p
	}
	c, err := rpc.Dial(ctx, network, addr, []byte{wire.PreambleRPC}, wire.ProtocolVersion, rpc.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialTLS opens an RPC client to nd's TCP port over TLS verified against
// its CA's pin, as the CLI and SDK do with a token, presenting token.
func dialTLS(t *testing.T, nd *Node, token string) *rpc.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg := pki.PinnedConfig(nd.sec.ca.Hash())
	c, err := rpc.Dial(ctx, "tcp", nd.RPCAddr(), []byte{wire.PreambleRPC}, wire.ProtocolVersion, rpc.WithToken(token),
		rpc.WithDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return pki.DialTLS(ctx, nil, addr, cfg)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func wantDenied(t *testing.T, err error, want ...string) {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodePermissionDenied {
		t.Fatalf("got %v, want a %s error", err, wire.CodePermissionDenied)
	}
	for _, w := range want {
		if !strings.Contains(re.Message, w) {
			t.Errorf("refusal %q does not say %q", re.Message, w)
		}
	}
}

// With a token authority the node enforces wire.MethodRoles: no token is
// refused, a read token may read but not submit, a submit token may
// submit, and a client on the node's Unix socket (this test's uid is the
// node's) may do everything without a token.
func TestRolesEnforcedWithTokenAuthority(t *testing.T) {
	read, submit, revoked := newTestToken(t), newTestToken(t), newTestToken(t)
	tokens := mapTokens{read: pki.RoleRead, submit: pki.RoleSubmit}
	nd := testCluster(t, 1, func(_ int, c *Config) { c.tokens = tokens })[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kvSet := &wire.KVRequest{Key: "k", Value: []byte("v")}

	anon := dialTLS(t, nd, "")
	wantDenied(t, anon.Call(ctx, wire.MethodJobRegister, &wire.JobRegisterRequest{}, nil),
		"Job.Register needs role submit", "anonymous with role none", "NODEUP_TOKEN")
	wantDenied(t, anon.Call(ctx, wire.MethodStatus, &wire.Empty{}, nil), "Cluster.Status needs role read")
	// The open methods answer anonymous callers (a joining node's hello).
	if err := anon.Call(ctx, wire.MethodHello, &wire.Empty{}, &wire.HelloResponse{}); err != nil {
		t.Fatalf("anonymous Cluster.Hello over TLS: %v", err)
	}

	// Plaintext TCP is anonymous even with a good token (it would travel
	// in the clear), and the refusal says to use TLS or the socket.
	plain := dialNode(t, nd.RPCAddr(), read)
	wantDenied(t, plain.Call(ctx, wire.MethodStatus, &wire.Empty{}, nil),
		"Cluster.Status needs role read", "anonymous", "this node requires TLS", "Unix socket", "NODEUP_TOKEN")

	reader := dialTLS(t, nd, read)
	id, _ := pki.ParseToken(read)
	wantDenied(t, reader.Call(ctx, wire.MethodKVSet, kvSet, nil),
		"KV.Set needs role submit", "token "+id.ID+" with role read", "--token")
	// The refusal maps to the SDK's sentinel code.
	var st wire.StatusResponse
	if err := reader.Call(ctx, wire.MethodStatus, &wire.Empty{}, &st); err != nil {
		t.Fatalf("read token calling Cluster.Status: %v", err)
	}

	writer := dialTLS(t, nd, submit)
	if err := writer.Call(ctx, wire.MethodKVSet, kvSet, &wire.KVResponse{}); err != nil {
		t.Fatalf("submit token calling KV.Set: %v", err)
	}
	// Node-only methods need more than submit.
	wantDenied(t, writer.Call(ctx, wire.MethodNodeHeartbeat, &wire.HeartbeatRequest{}, nil), "Node.Heartbeat needs role admin")

	bad := dialTLS(t, nd, revoked)
	rid, _ := pki.ParseToken(revoked)
	err := bad.Call(ctx, wire.MethodStatus, &wire.Empty{}, nil)
	wantDenied(t, err, "token "+rid.ID+": unknown")
	if strings.Contains(err.Error(), rid.Secret) {
		t.Fatalf("refusal %q carries the token's secret", err)
	}

	if nd.SocketAddr() == "" {
		t.Fatal("node has no Unix socket")
	}
	local := dialNode(t, nd.SocketAddr(), "")
	if err := local.Call(ctx, wire.MethodKVSet, kvSet, &wire.KVResponse{}); err != nil {
		t.Fatalf("local Unix-socket client calling KV.Set: %v", err)
	}
}

// With --insecure a node has no token authority: every call is allowed,
// plaintext TCP and the Unix socket alike, without a token.
func TestNoTokenAuthorityAllowsAll(t *testing.T) {
	nd := testCluster(t, 1, insecure)[0]
	if nd.cfg.tokens != nil {
		t.Fatal("an --insecure node has a token authority")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, addr := range []string{nd.RPCAddr(), nd.SocketAddr()} {
		c := dialNode(t, addr, "")
		if err := c.Call(ctx, wire.MethodKVSet, &wire.KVRequest{Key: "k", Value: []byte("v")}, &wire.KVResponse{}); err != nil {
			t.Fatalf("KV.Set at %s without a token authority: %v", addr, err)
		}
	}
}

// Every method a node registers has a role in wire.MethodRoles.
func TestEveryRegisteredMethodHasARole(t *testing.T) {
	nd := testCluster(t, 1, nil)[0]
	methods := nd.rpcServer.Methods()
	if len(methods) < 40 {
		t.Fatalf("node registered %d methods, want more than 40", len(methods))
	}
	for _, m := range methods {
		if _, ok := wire.MethodRole(m); !ok {
			t.Errorf("method %s has no entry in wire.MethodRoles: a node enforcing roles refuses it to everyone", m)
		}
	}
}

// The peer-credential check: the node's uid and root are local, another
// uid is refused in one line naming it unless in the socket group (its
// primary group or a supplementary one).
func TestUnixPeerCredentials(t *testing.T) {
	a := &authenticator{uid: 1000, gid: -1, groupsOf: func(int32) ([]int, error) { return []int{50, 60}, nil }}
	check := func(cred peerCreds) error {
		a.peerCred = func(*net.UnixConn) (peerCreds, error) { return cred, nil }
		p, err := a.local(nil)
		if err == nil && p.Grants != wire.GrantAll {
			t.Fatalf("local principal %+v does not hold every role", p)
		}
		return err
	}
	for _, uid := range []int{1000, 0} {
		if err := check(peerCreds{PID: 7, UID: uid, GID: 1}); err != nil {
			t.Errorf("uid %d refused: %v", uid, err)
		}
	}
	err := check(peerCreds{PID: 7, UID: 1001, GID: 60})
	if err == nil || !strings.Contains(err.Error(), "uid 1001 (pid 7) is not the node's uid 1000 or root") {
		t.Fatalf("uid 1001 without a socket group: got %v, want a refusal naming it", err)
	}
	a.gid = 60
	if err := check(peerCreds{PID: 7, UID: 1001, GID: 60}); err != nil {
		t.Errorf("uid 1001 of primary group 60 = --socket-group refused: %v", err)
	}
	if err := check(peerCreds{PID: 7, UID: 1001, GID: 1}); err != nil {
		t.Errorf("uid 1001 with supplementary group 60 = --socket-group refused: %v", err)
	}
	a.gid = 70
	if err := check(peerCreds{PID: 7, UID: 1001, GID: 1}); err == nil || !strings.Contains(err.Error(), "or in group 70") {
		t.Fatalf("uid 1001 outside group 70: got %v, want refused", err)
	}
}

// The HTTP API: /v1/health is open; other endpoints need a bearer token
// (401 without one or with one the authority refuses), and one of too
// small a role is 403. Each refusal is JSON naming the role.
func TestHTTPTokenAuth(t *testing.T) {
	read, join := newTestToken(t), newTestToken(t)
	nd := testCluster(t, 1, func(_ int, c *Config) {
		c.HTTPPort = 0
		c.tokens = mapTokens{read: pki.RoleRead, join: pki.RoleJoin}
	})[0]
	get := func(path, token string) (int, map[string]string) {
		t.Helper()
		code, b := httpDo(t, http.MethodGet, "http://"+nd.HTTPAddr()+path, token, "")
		var body map[string]string
		_ = json.Unmarshal(b, &body)
		return code, body
	}
	// Health is 503 until the node has elected itself leader.
	testutil.Until(t, 10*time.Second, "/v1/health without a token is 200", func() error {
		if code, body := get("/v1/health", ""); code != http.StatusOK {
			return fmt.Errorf("/v1/health: %d %v, want 200", code, body)
		}
		return nil
	})
	for _, path := range []string{"/v1/status", "/metrics", "/v1/actors", "/v1/placement-groups"} {
		code, body := get(path, "")
		if code != http.StatusUnauthorized || body["role"] != "read" || !strings.Contains(body["error"], "needs role read") {
			t.Errorf("%s without a token: %d %v, want 401 naming role read", path, code, body)
		}
		if code, body := get(path, read); code != http.StatusOK {
			t.Errorf("%s with a read token: %d %v, want 200", path, code, body)
		}
	}
	// The dashboard's page holds no data: open, as /v1/health.
	if code, _ := get("/", ""); code != http.StatusOK {
		t.Errorf("the dashboard page without a token: %d, want 200", code)
	}
	if code, body := get("/v1/status", newTestToken(t)); code != http.StatusUnauthorized || !strings.Contains(body["error"], "unknown") {
		t.Errorf("/v1/status with an unknown token: %d %v, want 401 saying why", code, body)
	}
	if code, body := get("/v1/status", read); code != http.StatusOK {
		t.Errorf("/v1/status with a read token: %d %v, want 200", code, body)
	}
	if code, _ := get("/metrics", read); code != http.StatusOK {
		t.Errorf("/metrics with a read token: %d, want 200", code)
	}

	// No endpoint needs more than read yet: a write one behind the same
	// check refuses read and join tokens with 403, no token with 401.
	h := nd.requireRole("POST /v1/test", pki.RoleSubmit, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for tok, want := range map[string]int{read: http.StatusForbidden, join: http.StatusForbidden, "": http.StatusUnauthorized} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/v1/test", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		h.ServeHTTP(rec, req)
		var body map[string]string
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != want || body["role"] != "submit" || !strings.Contains(body["error"], "POST /v1/test needs role submit") {
			t.Errorf("write endpoint: got %d %v, want %d naming role submit", rec.Code, body, want)
		}
	}
}

// envPeerCredDial makes TestPeerCredChild dial the Unix socket it names.
const envPeerCredDial = "NODEUP_TEST_PEERCRED_DIAL"

// TestPeerCredChild is the child of TestUnixSocketOtherUID: it calls
// Cluster.Status over the socket and prints the outcome. It does nothing
// in an ordinary run.
func TestPeerCredChild(t *testing.T) {
	path := os.Getenv(envPeerCredDial)
	if path == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, "unix", path, []byte{wire.PreambleRPC}, wire.ProtocolVersion)
	if err != nil {
		fmt.Println("DIAL:", err)
		return
	}
	defer c.Close()
	if err := c.Call(ctx, wire.MethodStatus, &wire.Empty{}, &wire.StatusResponse{}); err != nil {
		fmt.Println("CALL:", err)
		return
	}
	fmt.Println("CALL: ok")
}

// A real process of another uid on the node's Unix socket (made
// world-writable here, so that the kernel lets it connect) is refused by
// its SO_PEERCRED credentials, naming its uid; the same child as root is
// the local principal.
func TestUnixSocketOtherUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to start a child of another uid")
	}
	nd := testCluster(t, 1, func(_ int, c *Config) { c.tokens = mapTokens{} })[0]
	dir, err := os.MkdirTemp("", "nodeup-peercred-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	closed := newRaftLayer(ln.Addr())
	_ = closed.Close()
	m := newMux(ln, nd.rpcServer.ServeConn, closed, nd.logger)
	go m.serve()
	t.Cleanup(func() { ln.Close(); m.wg.Wait() })

	// The test binary, where another uid may run it.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(dir, "cluster.test")
	if err := os.WriteFile(child, b, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(cred *syscall.Credential) string {
		cmd := exec.Command(child, "-test.run=^TestPeerCredChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envPeerCredDial+"="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return string(out)
	}
	out := run(&syscall.Credential{Uid: 65534, Gid: 65534})
	if !strings.Contains(out, "CALL:") || !strings.Contains(out, "permission_denied") ||
		!strings.Contains(out, "unix socket peer uid 65534") {
		t.Fatalf("child of uid 65534: %s\nwant permission_denied naming the peer's uid", out)
	}
	if out := run(nil); !strings.Contains(out, "CALL: ok") {
		t.Fatalf("child as root: %s\nwant the call answered", out)
	}
}

// tlsPair returns both ends of a TLS 1.3 connection between a server with
// a node certificate of a fresh cluster CA, verifying client certificates
// when given, and a client that shows one when withCert is set.
func tlsPair(t *testing.T, withCert bool) (server, client *tls.Conn) {
	t.Helper()
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	identity := func(nodeID string) *pki.Identity {
		key, err := pki.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		csr, err := pki.NewCSR(key, nodeID)
		if err != nil {
			t.Fatal(err)
		}
		certPEM, err := ca.SignNode(csr, nodeID, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, err := pki.KeyPEM(key)
		if err != nil {
			t.Fatal(err)
		}
		id, err := pki.NewIdentity(certPEM, keyPEM, ca.CertPEM())
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	srvID, cliID := identity("server"), identity("client")
	scfg := srvID.ServerConfig()
	scfg.ClientAuth = tls.VerifyClientCertIfGiven // a joining node has none yet
	ccfg := cliID.ClientConfig()
	if !withCert {
		ccfg.Certificates = nil
	}
	a, b := net.Pipe()
	server, client = tls.Server(a, scfg), tls.Client(b, ccfg)
	t.Cleanup(func() { server.Close(); client.Close() })
	done := make(chan error, 1)
	go func() { done <- client.Handshake() }()
	if err := server.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return server, client
}

// A TLS peer with a certificate of the cluster CA is the node principal;
// one without a certificate is what its token says.
func TestTLSPeerIsNode(t *testing.T) {
	join := newTestToken(t)
	a := newAuthenticator(mapTokens{join: pki.RoleJoin}, -1, true)
	server, _ := tlsPair(t, true)
	if p := a.authenticate(server, ""); p.Name != principalNode.Name || p.Grants != wire.GrantAll {
		t.Fatalf("TLS peer with a cluster certificate: %+v, want the node principal", p)
	}
	server, _ = tlsPair(t, false)
	p := a.authenticate(server, join)
	if p.Role != string(pki.RoleJoin) || p.Grants != wire.GrantsOf(pki.RoleJoin) {
		t.Fatalf("TLS peer without a certificate, with a join token: %+v, want role join", p)
	}
	if p := a.authenticate(server, ""); p.Name != "anonymous" || p.Grants != wire.GrantOpen {
		t.Fatalf("TLS peer without a certificate or token: %+v, want anonymous", p)
	}
}

// A secure node (no --insecure) enforces the role table with the tokens in
// Raft, no Config.SetTokenAuthority needed: over TLS no token is refused a
// submit method, a read token may read but is refused a submit method
// naming the method and the role, a revoked one is refused; plaintext TCP
// is refused with the TLS note.
func TestSecureNodeEnforcesRaftTokens(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	nd := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	read := createToken(t, nd, "read", time.Hour).Token
	id, _ := pki.ParseToken(read)
	kvSet := &wire.KVRequest{Key: "k", Value: []byte("v")}

	wantDenied(t, dialTLS(t, nd, "").Call(ctx, wire.MethodJobRegister, &wire.JobRegisterRequest{}, nil),
		"Job.Register needs role submit", "anonymous")
	reader := dialTLS(t, nd, read)
	if err := reader.Call(ctx, wire.MethodStatus, &wire.Empty{}, &wire.StatusResponse{}); err != nil {
		t.Fatalf("read token calling Cluster.Status over TLS: %v", err)
	}
	wantDenied(t, reader.Call(ctx, wire.MethodKVSet, kvSet, nil), "KV.Set needs role submit", "token "+id.ID+" with role read")
	wantDenied(t, dialNode(t, nd.RPCAddr(), read).Call(ctx, wire.MethodStatus, &wire.Empty{}, nil), "this node requires TLS")

	if err := nd.forward(ctx, wire.MethodTokenRevoke, &wire.TokenRevokeRequest{ID: id.ID}, &wire.Empty{}); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, dialTLS(t, nd, read).Call(ctx, wire.MethodStatus, &wire.Empty{}, nil), "token "+id.ID+": revoked")
	// The local principal (this test's uid on the socket) needs no token.
	if err := dialNode(t, nd.SocketAddr(), "").Call(ctx, wire.MethodKVSet, kvSet, &wire.KVResponse{}); err != nil {
		t.Fatalf("KV.Set over the Unix socket: %v", err)
	}
}

// An --insecure cluster of two nodes forms and answers without any token.
func TestInsecureClusterNeedsNoToken(t *testing.T) {
	nodes := testCluster(t, 2, insecure)
	waitFormed(t, nodes, 2, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, nd := range nodes {
		if err := dialNode(t, nd.RPCAddr(), "").Call(ctx, wire.MethodKVSet, &wire.KVRequest{Key: "k", Value: []byte("v")}, &wire.KVResponse{}); err != nil {
			t.Fatalf("KV.Set over plaintext TCP at %s: %v", nd.RPCAddr(), err)
		}
	}
}
