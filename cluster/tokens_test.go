package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// createToken makes a token through nd (forwarded to the leader).
func createToken(t *testing.T, nd *Node, role string, ttl time.Duration) wire.TokenCreateResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp wire.TokenCreateResponse
	if err := nd.forward(ctx, wire.MethodTokenCreate, &wire.TokenCreateRequest{Role: role, TTLNanos: int64(ttl)}, &resp); err != nil {
		t.Fatalf("create a %s token: %v", role, err)
	}
	return resp
}

func listTokens(t *testing.T, nd *Node) map[string]wire.TokenRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp wire.TokenListResponse
	if err := nd.forward(ctx, wire.MethodTokenList, &wire.Empty{}, &resp); err != nil {
		t.Fatalf("list tokens: %v", err)
	}
	out := map[string]wire.TokenRecord{}
	for _, r := range resp.Tokens {
		out[r.ID] = r
	}
	return out
}

func TestTokenCreateListRevoke(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	head := nodes[0]
	initial, err := pki.ParseToken(headToken(t, head))
	if err != nil {
		t.Fatal(err)
	}
	// The head writes its first token's record once it leads.
	testutil.Until(t, 10*time.Second, "the first join token in Raft", func() error {
		rec, err := head.State().TokenByID(initial.ID)
		if err == nil && rec == nil {
			err = errors.New("not yet")
		}
		return err
	})
	made := createToken(t, head, "submit", time.Hour)
	tok, err := pki.ParseToken(made.Token)
	if err != nil || tok.CAHash != head.sec.ca.Hash() || made.Record.Role != "submit" {
		t.Fatalf("created %q (%v), record %+v; want a submit token pinned to %s", made.Token, err, made.Record, head.sec.ca.Hash())
	}
	list := listTokens(t, head)
	if len(list) != 2 || list[initial.ID].Role != "join" || list[tok.ID].Role != "submit" || list[tok.ID].Expires == 0 {
		t.Fatalf("tokens listed: %+v; want the first join token %s and the submit token %s", list, initial.ID, tok.ID)
	}
	for id, r := range list {
		if r.SecretHash != "" {
			t.Errorf("listing carries token %s's secret hash", id)
		}
	}
	if role, err := head.tokens().RoleOf(made.Token, time.Now()); err != nil || role != pki.RoleSubmit {
		t.Fatalf("RoleOf the new token: %s, %v", role, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := head.forward(ctx, wire.MethodTokenRevoke, &wire.TokenRevokeRequest{ID: tok.ID}, &wire.Empty{}); err != nil {
		t.Fatal(err)
	}
	if !listTokens(t, head)[tok.ID].Revoked {
		t.Fatalf("token %s not revoked in the listing", tok.ID)
	}
	_, err = head.tokens().RoleOf(made.Token, time.Now())
	if err == nil || !strings.Contains(err.Error(), tok.ID+": revoked") {
		t.Fatalf("RoleOf a revoked token: %v", err)
	}
	if strings.Contains(err.Error(), tok.Secret) {
		t.Fatal("the refusal shows the secret")
	}
	err = head.forward(ctx, wire.MethodTokenRevoke, &wire.TokenRevokeRequest{ID: "ffffffff"}, &wire.Empty{})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeNotFound {
		t.Fatalf("revoke of an unknown token: %v, want not_found", err)
	}
	if err := head.forward(ctx, wire.MethodTokenCreate, &wire.TokenCreateRequest{Role: "root"}, &wire.TokenCreateResponse{}); err == nil || !strings.Contains(err.Error(), `role "root"`) {
		t.Fatalf("token with role root: %v", err)
	}
}

// A node cannot join without a token, nor with a wrong, unknown, expired,
// revoked or submit-only one, nor with another cluster's; each refusal is
// one line naming the token ID and why, on the joiner and in the leader's
// log, and the joiner keeps no certificate.
func TestJoinRefusedWithoutAValidToken(t *testing.T) {
	var headLog testutil.SyncBuffer
	nodes := testCluster(t, 1, func(_ int, c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&headLog, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	waitFormed(t, nodes, 1, 1)
	head := nodes[0]
	good, _ := pki.ParseToken(headToken(t, head))
	wrong := good
	wrong.Secret = strings.Repeat("0", 32)
	unknown, _ := pki.NewToken(head.sec.ca.Hash())
	expired, _ := pki.ParseToken(createToken(t, head, "join", time.Nanosecond).Token)
	revoked, _ := pki.ParseToken(createToken(t, head, "join", 0).Token)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := head.forward(ctx, wire.MethodTokenRevoke, &wire.TokenRevokeRequest{ID: revoked.ID}, &wire.Empty{}); err != nil {
		t.Fatal(err)
	}
	submit, _ := pki.ParseToken(createToken(t, head, "submit", 0).Token)
	otherCA, _ := pki.NewCA("other", time.Hour)
	stranger, _ := pki.NewToken(otherCA.Hash())

	dir := t.TempDir()
	for _, c := range []struct {
		name, token, want, logged string
	}{
		{"no token", "", "pass --token", ""},
		{"wrong secret", wrong.String(), "token " + good.ID + ": wrong secret", "token " + good.ID + ": wrong secret"},
		{"unknown", unknown.String(), "token " + unknown.ID + ": unknown", "token " + unknown.ID + ": unknown"},
		{"expired", expired.String(), "token " + expired.ID + ": expired", "token " + expired.ID + ": expired"},
		{"revoked", revoked.String(), "token " + revoked.ID + ": revoked", "token " + revoked.ID + ": revoked"},
		{"submit role", submit.String(), "token " + submit.ID + ": role submit does not allow join", "token " + submit.ID + ": role submit does not allow join"},
		{"another cluster's", stranger.String(), "not the cluster the token was made for", ""},
		{"garbage", "hunter2", "want nodeup1.", ""},
	} {
		cfg := testConfig(t, dir, strings.ReplaceAll(c.name, " ", "-"))
		cfg.Join, cfg.Token = []string{head.RPCAddr()}, c.token
		nd, err := Start(context.Background(), cfg)
		if err == nil {
			nd.Kill()
			t.Errorf("%s: joined", c.name)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: joiner's error %q, want one line containing %q", c.name, msg, c.want)
		}
		if parts := strings.Split(c.token, "."); len(parts) == 4 && strings.Contains(err.Error(), parts[2]) {
			t.Errorf("%s: the error shows the secret: %v", c.name, err)
		}
		if c.logged != "" && !strings.Contains(headLog.String(), "refused a node's join: "+c.logged) {
			t.Errorf("%s: the leader's log does not say %q:\n%s", c.name, c.logged, headLog.String())
		}
		if _, err := os.Stat(filepath.Join(cfg.DataDir, nodeCertFile)); err == nil {
			t.Errorf("%s: the refused node kept a certificate", c.name)
		}
	}
	// The right token joins.
	cfg := testConfig(t, dir, "good")
	cfg.Join, cfg.Token = []string{head.RPCAddr()}, good.String()
	nd, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("join with the head's token: %v", err)
	}
	t.Cleanup(nd.Kill)
	if _, err := os.Stat(filepath.Join(cfg.DataDir, caKeyFile)); err != nil {
		t.Errorf("a server joined without the CA key: %v", err)
	}
}

// tlsCall opens a TLS connection to nd's port with cfg, sends the RPC
// preamble and hello, and calls method; the error of the first step that
// fails.
func tlsCall(nd *Node, cfg *tls.Config, method string) error {
	pool := rpc.NewPool([]byte{connRPC}, wire.ProtocolVersion, 2*time.Second)
	defer pool.Close()
	pool.SetDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return pki.DialTLS(ctx, nil, addr, cfg)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return pool.Call(ctx, nd.RPCAddr(), method, &wire.Empty{}, &wire.StatusResponse{})
}

// A TLS peer with a certificate of another CA is refused, one without a
// certificate or token may only say hello and join (the open methods), and Raft needs a node
// certificate of the cluster CA.
func TestPeerOfAnotherCARefused(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	nd := nodes[0]

	theirs, _ := pki.NewCA("nodeup", time.Hour)
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, "intruder")
	certPEM, _ := theirs.SignNode(csr, "intruder", time.Hour)
	keyPEM, _ := pki.KeyPEM(key)
	intruder, err := pki.NewIdentity(certPEM, keyPEM, theirs.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	cfg := intruder.ClientConfig()
	cfg.RootCAs.AddCert(nd.sec.ca.Cert) // trusts the node, so only the node can refuse
	if err := tlsCall(nd, cfg, wire.MethodStatus); err == nil {
		t.Fatal("a client certificate of another CA called Cluster.Status")
	}
	if err := tlsCall(nd, cfg, wire.MethodHello); err == nil {
		t.Fatal("a client certificate of another CA got an answer")
	}

	noCert := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: intruder.CA.Clone(), ServerName: pki.NodeServerName}
	noCert.RootCAs.AddCert(nd.sec.ca.Cert)
	if err := tlsCall(nd, noCert, wire.MethodHello); err != nil {
		t.Fatalf("hello without a certificate (what a joining node sends first): %v", err)
	}
	var re *rpc.Error
	if err := tlsCall(nd, noCert, wire.MethodStatus); !errors.As(err, &re) || re.Code != wire.CodePermissionDenied ||
		!strings.Contains(err.Error(), "anonymous") {
		t.Fatalf("Cluster.Status without a certificate or token: %v, want permission_denied for anonymous", err)
	}
	// Raft without a node certificate: the connection is closed unread.
	for _, c := range []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"plaintext", func() (net.Conn, error) { return net.Dial("tcp", nd.RPCAddr()) }},
		{"TLS without a certificate", func() (net.Conn, error) { return tls.Dial("tcp", nd.RPCAddr(), noCert) }},
	} {
		conn, err := c.dial()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte{connRaft, 0, 0, 0}); err != nil {
			conn.Close()
			continue
		}
		if _, err := io.ReadAll(conn); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
			t.Errorf("%s Raft: %v, want the connection closed", c.name, err)
		}
		conn.Close()
	}
}

// Gossip from a node without the cluster's key, or with another key, is
// dropped: it cannot join the ring.
func TestGossipWithoutTheKeyIgnored(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	nd := nodes[0]
	other := make([]byte, gossipKeyLen)
	other[0] = 1
	for _, key := range [][]byte{nil, other} {
		mc := memberlist.DefaultLANConfig()
		mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = "stranger", "127.0.0.1", 0, 0
		mc.Label = "nodeup/" + nd.ClusterID() // the label matches: only the key is missing
		mc.Logger = nil
		mc.LogOutput = io.Discard
		mc.TCPTimeout = 2 * time.Second
		if key != nil {
			mc.Keyring, _ = memberlist.NewKeyring(nil, key)
		}
		ml, err := memberlist.Create(mc)
		if err != nil {
			t.Fatal(err)
		}
		n, err := ml.Join([]string{nd.ml.LocalNode().Address()})
		_ = ml.Shutdown()
		if err == nil || n != 0 {
			t.Errorf("gossip with key %x joined %d members (err %v)", key, n, err)
		}
		for _, m := range nd.ml.Members() {
			if m.Name == "stranger" {
				t.Errorf("the node lists the stranger (key %x) as a member", key)
			}
		}
	}
}

// Node certificates renew themselves before they expire, and the renewed
// one is what the node then serves and keeps on disk; a node joins after.
// Node certificates start a minute in the past (clock skew), so one of
// validity v renews 2v/3 - 20 s after it was signed: 33 s certificates
// renew 2 s in, and leave half a minute before any expires, however slow
// the cluster forms under load. The test waits for the renewal, not for
// the clock.
func TestNodeCertificatesRenew(t *testing.T) {
	nodes := testCluster(t, 2, func(_ int, c *Config) {
		c.nodeCertValidity, c.renewFloor = 33*time.Second, 500*time.Millisecond
	})
	waitFormed(t, nodes, 2, 2)
	for _, nd := range nodes {
		first := nd.sec.ident.Load().Cert.Leaf
		if renewIn := time.Until(pki.RenewAt(first.NotBefore, first.NotAfter)); renewIn > 5*time.Second {
			t.Fatalf("%s's certificate renews in %s: the test expects seconds", nd.Name(), renewIn)
		}
		testutil.Until(t, 20*time.Second, nd.Name()+"'s certificate renewed", func() error {
			if now := nd.sec.ident.Load().Cert.Leaf; now.SerialNumber.Cmp(first.SerialNumber) == 0 || !now.NotAfter.After(first.NotAfter) {
				return fmt.Errorf("serial %s until %s", now.SerialNumber, now.NotAfter)
			}
			return nil
		})
		// What the node serves is a renewed certificate, not the first.
		c, err := tls.Dial("tcp", nd.RPCAddr(), pki.PinnedConfig(nd.sec.ca.Hash()))
		if err != nil {
			t.Fatalf("TLS with %s: %v", nd.Name(), err)
		}
		served := c.ConnectionState().PeerCertificates[0]
		c.Close()
		if served.SerialNumber.Cmp(first.SerialNumber) == 0 || served.Subject.CommonName != nd.ID() {
			t.Fatalf("%s serves serial %s of %s, the first was %s", nd.Name(), served.SerialNumber, served.Subject.CommonName, first.SerialNumber)
		}
		onDisk, err := os.ReadFile(filepath.Join(nd.DataDir(), nodeCertFile))
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, _ := os.ReadFile(filepath.Join(nd.DataDir(), nodeKeyFile))
		id, err := pki.NewIdentity(onDisk, keyPEM, nd.sec.caPEM)
		if err != nil {
			t.Fatalf("the renewed certificate and key on disk: %v", err)
		}
		if id.Cert.Leaf.SerialNumber.Cmp(first.SerialNumber) == 0 {
			t.Fatalf("%s still has its first certificate on disk", nd.Name())
		}
	}
	dir := t.TempDir()
	cfg := testConfig(t, dir, "late")
	cfg.Join, cfg.Token = []string{nodes[0].RPCAddr()}, headToken(t, nodes[0])
	late, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("join after the certificates renewed: %v", err)
	}
	t.Cleanup(late.Kill)
	waitFormed(t, []*Node{nodes[0], nodes[1], late}, 3, 3)
}

// A renewal must be signed by the node's current key: a forged proof, or
// another node's certificate, is refused.
func TestRenewalNeedsTheCurrentKey(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	nd := nodes[0]
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, nd.ID())
	cur, _ := os.ReadFile(filepath.Join(nd.DataDir(), nodeCertFile))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := nd.forward(ctx, wire.MethodNodeRenew, &wire.RenewRequest{NodeID: nd.ID(), CSR: csr, Current: cur, Proof: []byte("forged")}, &wire.RenewResponse{})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodePermissionDenied || !strings.Contains(re.Message, "proof") {
		t.Fatalf("renewal with a forged proof: %v", err)
	}
	otherCSR, _ := pki.NewCSR(key, "someone-else")
	err = nd.forward(ctx, wire.MethodNodeRenew, &wire.RenewRequest{NodeID: "someone-else", CSR: otherCSR, Current: cur, Proof: []byte("x")}, &wire.RenewResponse{})
	if !errors.As(err, &re) || re.Code != wire.CodePermissionDenied {
		t.Fatalf("renewal for another node with this node's certificate: %v", err)
	}
}

// Keyring rotation: every node ends on one new key, gossip still works (a
// node joins afterwards), and the old key no longer gets in.
func TestKeyringRotate(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	old := nodes[0].sec.gossipKeys()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var resp wire.KeyringRotateResponse
	if err := nodes[2].forward(ctx, wire.MethodKeyringRotate, &wire.Empty{}, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Nodes) != 3 {
		t.Fatalf("rotated on %v, want 3 nodes", resp.Nodes)
	}
	var key []byte
	for _, nd := range nodes {
		keys := nd.keyring.GetKeys()
		b, _ := os.ReadFile(filepath.Join(nd.DataDir(), gossipKeyringFile))
		onDisk, err := parseKeyring(b)
		if len(keys) != 1 || err != nil || len(onDisk) != 1 || !bytes.Equal(onDisk[0], keys[0]) || bytes.Equal(keys[0], old) {
			t.Fatalf("%s after rotation: %d keys in memberlist, file %d keys (%v); want one new key", nd.Name(), len(keys), len(onDisk), err)
		}
		if key == nil {
			key = keys[0]
		} else if !bytes.Equal(key, keys[0]) {
			t.Fatalf("%s uses another key than %s", nd.Name(), nodes[0].Name())
		}
	}
	cfg := testConfig(t, t.TempDir(), "after")
	cfg.Join, cfg.Token = []string{nodes[1].RPCAddr()}, headToken(t, nodes[0])
	late, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(late.Kill)
	waitFormed(t, append(nodes, late), 4, 3)

	mc := memberlist.DefaultLANConfig()
	mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = "old-key", "127.0.0.1", 0, 0
	mc.Label, mc.LogOutput, mc.Logger = "nodeup/"+nodes[0].ClusterID(), io.Discard, nil
	mc.Keyring, _ = memberlist.NewKeyring(nil, old)
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	if n, err := ml.Join([]string{nodes[0].ml.LocalNode().Address()}); err == nil || n != 0 {
		t.Errorf("gossip with the old key joined %d (err %v)", n, err)
	}
}

// A node whose certificate expired while it was down says how to come
// back rather than failing a handshake later.
func TestExpiredCertificateAtStartSaysRejoin(t *testing.T) {
	nodes := testCluster(t, 2, nil)
	waitFormed(t, nodes, 2, 2)
	nd := nodes[1]
	nd.Kill()
	// Replace its certificate and key by a pair of the cluster CA that
	// ended a minute ago.
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, nd.ID())
	old, err := nodes[0].sec.ca.SignNode(csr, nd.ID(), -2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	newKey, _ := pki.KeyPEM(key)
	if err := os.WriteFile(filepath.Join(nd.DataDir(), nodeCertFile), old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nd.DataDir(), nodeKeyFile), newKey, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := nd.cfg
	cfg.Port, cfg.GossipPort = 0, 0
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), "join again with a token") {
		t.Fatalf("start with an expired certificate: %v", err)
	}
}
