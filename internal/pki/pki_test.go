package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// node issues a node identity from ca the way a joining node gets one:
// its own key, a request, the CA's signature.
func node(t *testing.T, ca *CA, id string) *Identity {
	t.Helper()
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NewCSR(key, id)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignNode(csr, id, NodeCertValidity)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	ident, err := NewIdentity(certPEM, keyPEM, ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	return ident
}

func newCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// handshake runs a TLS handshake between a server and a client identity
// over a pipe and returns each side's error.
func handshake(server, client *tls.Config) (serverErr, clientErr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(a, server)
		err := s.Handshake()
		if err != nil {
			a.Close() // the client's read ends too
		}
		done <- err
	}()
	c := tls.Client(b, client)
	if err := c.Handshake(); err != nil {
		b.Close()
		return <-done, err
	}
	// The client's handshake ends before the server has checked the client
	// certificate; TLS 1.3 reports a refusal on the client's first read.
	// The read also takes the session tickets the server writes after a
	// success, which the pipe would otherwise block on.
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	if serverErr = <-done; serverErr != nil {
		return serverErr, <-read
	}
	return nil, nil // the deferred closes end the read
}

func TestNodesOfOneCAAuthenticateEachOther(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "lab")
	a, b := node(t, ca, "node-a"), node(t, ca, "node-b")
	if serr, cerr := handshake(a.ServerConfig(), b.ClientConfig()); serr != nil || cerr != nil {
		t.Fatalf("handshake between two nodes of one CA: server %v, client %v", serr, cerr)
	}
}

func TestAnotherCAsNodeIsRefused(t *testing.T) {
	t.Parallel()
	ours, theirs := newCA(t, "lab"), newCA(t, "lab") // same name, other key
	a, stranger := node(t, ours, "node-a"), node(t, theirs, "node-x")
	// Each side is checked alone: the other trusts both CAs, so that its
	// own refusal cannot stand in for the one under test.
	trustsBoth := stranger.ClientConfig()
	trustsBoth.RootCAs = a.CA.Clone()
	trustsBoth.RootCAs.AddCert(theirs.Cert)
	if serr, cerr := handshake(a.ServerConfig(), trustsBoth); serr == nil {
		t.Errorf("server accepted a client certificate from another CA (client: %v)", cerr)
	}
	acceptsBoth := stranger.ServerConfig()
	acceptsBoth.ClientCAs = trustsBoth.RootCAs
	if serr, cerr := handshake(acceptsBoth, a.ClientConfig()); cerr == nil || strings.Contains(cerr.Error(), "remote error") {
		t.Errorf("client accepted a server certificate from another CA: client %v, server %v", cerr, serr)
	}
	noCert := a.ClientConfig()
	noCert.Certificates = nil
	if serr, _ := handshake(a.ServerConfig(), noCert); serr == nil {
		t.Error("server accepted a client without a certificate")
	}
}

func TestCAPEMRoundTripAndPin(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "lab")
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCA(ca.CertPEM(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if back.Hash() != ca.Hash() || !strings.HasPrefix(ca.Hash(), "sha256:") || len(ca.Hash()) != 7+64 {
		t.Fatalf("pin %q after the round trip, want %q", back.Hash(), ca.Hash())
	}
	other := newCA(t, "lab")
	otherKey, _ := other.KeyPEM()
	if _, err := ParseCA(ca.CertPEM(), otherKey); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("CA certificate with another CA's key: %v", err)
	}
	verifyOnly, err := ParseCA(ca.CertPEM(), nil)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := NewKey()
	csr, _ := NewCSR(key, "n1")
	if _, err := verifyOnly.SignNode(csr, "n1", time.Hour); err == nil || !strings.Contains(err.Error(), "no key") {
		t.Errorf("signing without the CA key: %v", err)
	}
	if _, err := ParseCA([]byte("garbage"), nil); err == nil {
		t.Error("garbage parsed as a CA")
	}
	nodePEM, err := ca.SignNode(csr, "n1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCA(nodePEM, nil); err == nil || !strings.Contains(err.Error(), "not a CA certificate") {
		t.Errorf("node certificate parsed as a CA: %v", err)
	}
}

func TestSignNodeChecksTheRequest(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "lab")
	key, _ := NewKey()
	csr, err := NewCSR(key, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.SignNode(csr, "node-b", time.Hour); err == nil || !strings.Contains(err.Error(), `"node-a"`) {
		t.Errorf("request for node-a signed as node-b: %v", err)
	}
	tampered := append([]byte{}, csr...)
	tampered[len(tampered)-5] ^= 0xff
	if _, err := ca.SignNode(tampered, "node-a", time.Hour); err == nil {
		t.Error("tampered request signed")
	}
	for _, bad := range []string{"", "a/b", "a\x00b", strings.Repeat("n", 200)} {
		if _, err := NewCSR(key, bad); err == nil {
			t.Errorf("request for node ID %q made", bad)
		}
	}
}

func TestNodeCertificateEndsWithTheCA(t *testing.T) {
	t.Parallel()
	ca, err := NewCA("lab", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := NewKey()
	csr, _ := NewCSR(key, "n1")
	certPEM, err := ca.SignNode(csr, "n1", NodeCertValidity)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := parseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("node certificate valid until %s, its CA until %s", leaf.NotAfter, ca.Cert.NotAfter)
	}
}

func TestExpiredNodeCertificateRefused(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "lab")
	key, _ := NewKey()
	csr, _ := NewCSR(key, "old")
	certPEM, err := ca.SignNode(csr, "old", -2*time.Minute) // ended a minute before it began
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := KeyPEM(key)
	if _, err := NewIdentity(certPEM, keyPEM, ca.CertPEM()); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired node certificate: %v", err)
	}
}

func TestTokenRoundTripAndChecks(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "lab")
	tok, err := NewToken(ca.Hash())
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseToken(" " + tok.String() + "\n")
	if err != nil || back != tok {
		t.Fatalf("parse %q: %+v, %v", tok.String(), back, err)
	}
	if strings.Contains(tok.SecretHash(), tok.Secret) {
		t.Fatal("the stored hash contains the secret")
	}
	now := time.Now()
	rec := Record{ID: tok.ID, SecretHash: tok.SecretHash(), Role: RoleSubmit, Expires: now.Add(time.Hour)}
	if err := rec.Check(tok, RoleSubmit, now); err != nil {
		t.Errorf("valid submit token: %v", err)
	}
	if err := rec.Check(tok, RoleRead, now); err != nil {
		t.Errorf("submit token reading: %v", err)
	}
	wrong := tok
	wrong.Secret = strings.Repeat("0", 32)
	for _, c := range []struct {
		name string
		rec  Record
		tok  Token
		need Role
		want string
	}{
		{"wrong secret", rec, wrong, RoleSubmit, "wrong secret"},
		{"another token's record", Record{ID: "ffffffff", SecretHash: rec.SecretHash, Role: RoleSubmit}, tok, RoleSubmit, "wrong secret"},
		{"expired", rec, tok, RoleSubmit, "expired"},
		{"revoked", Record{ID: rec.ID, SecretHash: rec.SecretHash, Role: RoleSubmit, Revoked: true}, tok, RoleSubmit, "revoked"},
		{"read token submitting", Record{ID: rec.ID, SecretHash: rec.SecretHash, Role: RoleRead}, tok, RoleSubmit, "does not allow submit"},
		{"submit token joining", rec, tok, RoleJoin, "does not allow join"},
	} {
		at := now
		if c.name == "expired" {
			at = now.Add(2 * time.Hour)
		}
		if err := c.rec.Check(c.tok, c.need, at); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		} else if strings.Contains(err.Error(), tok.Secret) {
			t.Errorf("%s: the error shows the secret", c.name)
		}
	}
	if err := (Record{ID: rec.ID, SecretHash: rec.SecretHash, Role: RoleAdmin}).Check(tok, RoleJoin, now); err != nil {
		t.Errorf("admin token joining: %v", err)
	}
}

func TestParseTokenRefusesMalformed(t *testing.T) {
	t.Parallel()
	good := "nodeup1.0123abcd." + strings.Repeat("a", 32) + "." + strings.Repeat("b", 64)
	if _, err := ParseToken(good); err != nil {
		t.Fatalf("well-formed token: %v", err)
	}
	for _, bad := range []string{
		"", "nodeup1.", "abc", strings.Replace(good, "nodeup1", "nodeup2", 1),
		"nodeup1.0123abcd." + strings.Repeat("a", 32), // no pin
		"nodeup1.0123ABCD." + strings.Repeat("a", 32) + "." + strings.Repeat("b", 64),
		"nodeup1.0123abcd." + strings.Repeat("a", 31) + "." + strings.Repeat("b", 64),
		"nodeup1.0123abcd." + strings.Repeat("a", 32) + "." + strings.Repeat("b", 63),
		good + ".extra",
	} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("malformed token %q parsed", bad)
		} else if strings.Contains(err.Error(), strings.Repeat("a", 31)) {
			t.Errorf("error for %q shows the secret: %v", bad, err)
		}
	}
	if _, err := ParseRole("superuser"); err == nil || !strings.Contains(err.Error(), "read, submit, join or admin") {
		t.Errorf("unknown role: %v", err)
	}
}

func TestRenewAtTwoThirds(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got, want := RenewAt(start, start.Add(30*time.Hour)), start.Add(20*time.Hour); !got.Equal(want) {
		t.Errorf("renew at %s, want %s", got, want)
	}
}

// A worker certificate chains to its CA under WorkerServerName and serves
// TLS to a client of the same cluster; a client of another cluster, and a
// client verifying a node's name, refuse it; it cannot be a client
// certificate.
func TestWorkerCertificates(t *testing.T) {
	ca, err := NewCA("c1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("c2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueWorker("ab12cd34", WorkerCertValidity)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorkerTLS(certPEM, keyPEM, ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	if w.Cert.Leaf.NotAfter.After(ca.Cert.NotAfter) || w.Cert.Leaf.Subject.CommonName != "job ab12cd34" {
		t.Errorf("certificate: until %v (CA until %v), subject %q", w.Cert.Leaf.NotAfter, ca.Cert.NotAfter, w.Cert.Leaf.Subject.CommonName)
	}
	if slices.Contains(w.Cert.Leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Error("a worker certificate is usable as a client certificate")
	}
	if _, err := NewWorkerTLS(certPEM, keyPEM, other.CertPEM()); err == nil || !strings.Contains(err.Error(), "does not chain to the cluster CA") {
		t.Errorf("against another CA: %v", err)
	}
	if _, _, err := ca.IssueWorker("a/b", time.Hour); err == nil {
		t.Error("a job ID with '/' was accepted")
	}
	ow, err := func() (*WorkerTLS, error) {
		c, k, err := other.IssueWorker("x", time.Hour)
		if err != nil {
			return nil, err
		}
		return NewWorkerTLS(c, k, other.CertPEM())
	}()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", WorkerServerConfig(func() *tls.Certificate { return &w.Cert }))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	handshake := func(client *tls.Config) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), client)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := handshake(w.ClientConfig()); err != nil {
		t.Errorf("same cluster: %v", err)
	}
	if err := handshake(ow.ClientConfig()); err == nil {
		t.Error("a client of another cluster accepted the worker's certificate")
	}
	asNode := w.ClientConfig()
	asNode.ServerName = NodeServerName
	if err := handshake(asNode); err == nil {
		t.Error("a worker certificate passed for a node's")
	}
}
