package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Files of the cluster identity, under the data dir's tls/ (mode 0700);
// keys and tokens are 0600 (docs/security.md).
const (
	tlsDir            = "tls"
	caCertFile        = "tls/ca.pem"
	caKeyFile         = "tls/ca-key.pem" // servers only
	nodeCertFile      = "tls/node.pem"
	nodeKeyFile       = "tls/node-key.pem"
	gossipKeyringFile = "tls/gossip.keyring"
	// InitialTokenFile is where nodeup start --head writes the first join
	// token (mode 0600), relative to the data dir, for scripts and tests.
	InitialTokenFile = "tls/initial-join-token"
)

// gossipKeyLen is memberlist's AES-256 key length.
const gossipKeyLen = 32

// security is a node's cluster identity: the CA (with its key on servers),
// its own certificate, and the gossip keys. insecure (--insecure) means
// none of it: plaintext, no tokens.
type security struct {
	insecure bool
	ca       *pki.CA
	caPEM    []byte
	ident    atomic.Pointer[pki.Identity] // replaced on renewal
	gossipMu sync.Mutex
	gossip   [][]byte // primary first; what a joining node gets
	newToken string   // the first join token, on the start that made the cluster
}

// gossipKeys returns the gossip keys, the primary first.
func (s *security) gossipKeys() [][]byte {
	s.gossipMu.Lock()
	defer s.gossipMu.Unlock()
	return slices.Clone(s.gossip)
}

// setGossip records keys (the primary first) after a keyring change.
func (s *security) setGossip(keys [][]byte) {
	s.gossipMu.Lock()
	s.gossip = keys
	s.gossipMu.Unlock()
}

// NewClusterToken is the first join token when this start made the
// cluster's identity (nodeup start --head on a new data dir), else "".
func (n *Node) NewClusterToken() string { return n.sec.newToken }

// Insecure reports whether the node runs with --insecure.
func (n *Node) Insecure() bool { return n.sec.insecure }

// chainedIdentity loads a node identity whose TLS chain carries the CA too,
// so a joining node, which knows only the CA's pin, can check the chain.
func chainedIdentity(certPEM, keyPEM, caPEM []byte, ca *pki.CA) (*pki.Identity, error) {
	id, err := pki.NewIdentity(certPEM, keyPEM, caPEM)
	if err != nil {
		return nil, err
	}
	id.Cert.Certificate = append(id.Cert.Certificate, ca.Cert.Raw)
	return id, nil
}

// serverConfig accepts TLS 1.3 with the node's certificate. A client
// certificate, when given, must chain to the cluster CA; a client without
// one may only join (mux.routeTLS).
func (s *security) serverConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Cert)
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &s.ident.Load().Cert, nil
		},
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  pool,
		// Full 16 KiB records from the first byte: object pulls are bulk.
		DynamicRecordSizingDisabled: true,
	}
}

// clientConfig dials another node: its certificate must chain to the
// cluster CA, and this node presents its own.
func (s *security) clientConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Cert)
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &s.ident.Load().Cert, nil
		},
		RootCAs:                     pool,
		ServerName:                  pki.NodeServerName,
		DynamicRecordSizingDisabled: true,
	}
}

// dialNode connects to another node's port: over mutual TLS with the
// cluster CA, or plaintext with --insecure. Its own Unix socket (the route
// of its calls to itself) speaks no TLS: there the peer's credentials
// make the node's calls the local principal.
func (n *Node) dialNode(ctx context.Context, addr string) (net.Conn, error) {
	if n.sec.insecure || strings.HasPrefix(addr, rpc.UnixPrefix) {
		return n.dialTCP(ctx, addr)
	}
	c, err := pki.DialTLS(ctx, n.dialTCP, addr, n.sec.clientConfig())
	if ua := (x509.UnknownAuthorityError{}); errors.As(err, &ua) {
		return nil, fmt.Errorf("TLS with %s: its certificate is not signed by this cluster's CA (%s): it belongs to another cluster: %w", addr, n.sec.ca.Hash(), errors.Unwrap(err))
	}
	return c, err
}

// setupSecurity loads the node's cluster identity from tls/, makes a new
// cluster's at the head's first start, or joins with cfg.Token.
func (n *Node) setupSecurity(ctx context.Context, peers []peerRecord) error {
	n.sec = &security{insecure: n.cfg.Insecure}
	if n.cfg.Insecure {
		return nil
	}
	if err := os.MkdirAll(n.dir.file(tlsDir), 0o700); err != nil {
		return fmt.Errorf("tls dir: %w", err)
	}
	certPEM, err := os.ReadFile(n.dir.file(nodeCertFile))
	switch {
	case err == nil:
		return n.loadSecurity(certPEM)
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("node certificate: %w", err)
	case n.cfg.Head && n.cfg.Token == "":
		return n.newClusterIdentity()
	}
	var join []string
	join = append(join, n.cfg.Join...)
	for _, p := range peers {
		join = append(join, p.RPC)
	}
	if n.cfg.Token == "" {
		return fmt.Errorf("%w: this node has no cluster certificate yet: pass --token (printed by nodeup start --head, or made with nodeup token create --role join), NODEUP_TOKEN or --token-file", ErrNoToken)
	}
	return n.joinWithToken(ctx, join)
}

// ErrNoToken is returned by Start for a node that must join a secure
// cluster and was given no token.
var ErrNoToken = errors.New("no join token")

// loadSecurity reads the identity files of a node that has joined before.
func (n *Node) loadSecurity(certPEM []byte) error {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(n.dir.file(name))
		if err != nil {
			return nil, fmt.Errorf("cluster identity: %w", err)
		}
		return b, nil
	}
	keyPEM, err := read(nodeKeyFile)
	if err != nil {
		return err
	}
	if n.sec.caPEM, err = read(caCertFile); err != nil {
		return err
	}
	caKey, err := os.ReadFile(n.dir.file(caKeyFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cluster identity: %w", err)
	}
	if n.sec.ca, err = pki.ParseCA(n.sec.caPEM, caKey); err != nil {
		return fmt.Errorf("cluster identity in %s: %w", n.dir.file(tlsDir), err)
	}
	if b, _ := pem.Decode(certPEM); b != nil {
		if leaf, err := x509.ParseCertificate(b.Bytes); err == nil && time.Now().After(leaf.NotAfter) {
			return fmt.Errorf("this node's certificate %s expired at %s (the node was down past its renewal): move %s away and join again with a token (nodeup token create)",
				n.dir.file(nodeCertFile), leaf.NotAfter.UTC().Format(time.RFC3339), n.dir.file(tlsDir))
		}
	}
	id, err := chainedIdentity(certPEM, keyPEM, n.sec.caPEM, n.sec.ca)
	if err != nil {
		return fmt.Errorf("cluster identity in %s: %w", n.dir.file(tlsDir), err)
	}
	n.sec.ident.Store(id)
	keys, err := read(gossipKeyringFile)
	if err != nil {
		return err
	}
	if n.sec.gossip, err = parseKeyring(keys); err != nil {
		return fmt.Errorf("%s: %w", n.dir.file(gossipKeyringFile), err)
	}
	return nil
}

// newClusterIdentity makes a new cluster's CA, this node's certificate,
// the gossip key and the first join token (written to InitialTokenFile;
// its record reaches Raft once this node leads, ensureInitialToken).
func (n *Node) newClusterIdentity() error {
	ca, err := pki.NewCA(n.cfg.ClusterName, pki.CAValidity)
	if err != nil {
		return err
	}
	n.sec.ca, n.sec.caPEM = ca, ca.CertPEM()
	caKey, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	key, err := pki.NewKey()
	if err != nil {
		return err
	}
	csr, err := pki.NewCSR(key, n.id.NodeID)
	if err != nil {
		return err
	}
	certPEM, err := ca.SignNode(csr, n.id.NodeID, n.certValidity())
	if err != nil {
		return err
	}
	keyPEM, err := pki.KeyPEM(key)
	if err != nil {
		return err
	}
	gk := make([]byte, gossipKeyLen)
	if _, err := rand.Read(gk); err != nil {
		return fmt.Errorf("gossip key: %w", err)
	}
	n.sec.gossip = [][]byte{gk}
	tok, err := pki.NewToken(ca.Hash())
	if err != nil {
		return err
	}
	id, err := chainedIdentity(certPEM, keyPEM, n.sec.caPEM, ca)
	if err != nil {
		return err
	}
	n.sec.ident.Store(id)
	// The node certificate last: its presence means the identity is whole.
	for _, f := range []struct {
		name string
		b    []byte
		mode os.FileMode
	}{
		{caCertFile, n.sec.caPEM, 0o644}, {caKeyFile, caKey, 0o600}, {nodeKeyFile, keyPEM, 0o600},
		{gossipKeyringFile, formatKeyring(n.sec.gossip), 0o600}, {InitialTokenFile, []byte(tok.String() + "\n"), 0o600},
		{nodeCertFile, certPEM, 0o644},
	} {
		if err := writeFileMode(n.dir.file(f.name), f.b, f.mode); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	n.sec.newToken = tok.String()
	n.logger.Info("made a new cluster CA, this node's certificate, the gossip key and the first join token",
		"ca", ca.Hash(), "token_id", tok.ID, "token_file", n.dir.file(InitialTokenFile))
	return nil
}

// joinWithToken asks the peers in turn for a node certificate, over TLS
// pinned to the token's CA hash, and writes what it gets.
func (n *Node) joinWithToken(ctx context.Context, peers []string) error {
	tok, err := pki.ParseToken(n.cfg.Token)
	if err != nil {
		return err
	}
	if len(peers) == 0 {
		return errNoPeers(n.cfg.DataDir)
	}
	key, err := pki.NewKey()
	if err != nil {
		return err
	}
	csr, err := pki.NewCSR(key, n.id.NodeID)
	if err != nil {
		return err
	}
	pool := rpc.NewPool([]byte{connRPC}, wire.ProtocolVersion, 5*time.Second)
	defer pool.Close()
	cfg := pki.PinnedConfig(tok.CAHash)
	pool.SetDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return pki.DialTLS(ctx, n.dialTCP, addr, cfg)
	})
	req := &wire.JoinRequest{Token: tok.String(), NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, CSR: csr, Server: n.cfg.Server}
	var resp wire.JoinResponse
	var errs []error
	for _, p := range peers {
		addr := p
		if _, _, err := net.SplitHostPort(p); err != nil {
			addr = hostPort(p, DefaultPort)
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = pool.Call(cctx, addr, wire.MethodNodeJoin, req, &resp)
		cancel()
		if err == nil {
			break
		}
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == wire.CodePermissionDenied {
			return fmt.Errorf("join through %s refused: %s", addr, re.Message)
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	if err != nil {
		return fmt.Errorf("join with token %s: %w: %w", tok.ID, ErrNoPeerAnswered, errors.Join(errs...))
	}
	keyPEM, err := pki.KeyPEM(key)
	if err != nil {
		return err
	}
	if n.sec.ca, err = pki.ParseCA(resp.CACert, resp.CAKey); err != nil {
		return fmt.Errorf("join: the leader's CA: %w", err)
	}
	if n.sec.ca.Hash() != tok.CAHash {
		return fmt.Errorf("join: the leader sent CA %s, the token pins %s", n.sec.ca.Hash(), tok.CAHash)
	}
	n.sec.caPEM = resp.CACert
	id, err := chainedIdentity(resp.NodeCert, keyPEM, resp.CACert, n.sec.ca)
	if err != nil {
		return fmt.Errorf("join: the certificate the leader signed: %w", err)
	}
	for _, k := range resp.GossipKeys {
		if len(k) != gossipKeyLen {
			return fmt.Errorf("join: gossip key of %d bytes, want %d", len(k), gossipKeyLen)
		}
	}
	if len(resp.GossipKeys) == 0 {
		return errors.New("join: the leader sent no gossip key")
	}
	n.sec.gossip = resp.GossipKeys
	n.sec.ident.Store(id)
	files := []struct {
		name string
		b    []byte
		mode os.FileMode
	}{{caCertFile, resp.CACert, 0o644}, {nodeKeyFile, keyPEM, 0o600}, {gossipKeyringFile, formatKeyring(resp.GossipKeys), 0o600}}
	if len(resp.CAKey) > 0 {
		files = append(files, struct {
			name string
			b    []byte
			mode os.FileMode
		}{caKeyFile, resp.CAKey, 0o600})
	}
	files = append(files, struct {
		name string
		b    []byte
		mode os.FileMode
	}{nodeCertFile, resp.NodeCert, 0o644})
	for _, f := range files {
		if err := writeFileMode(n.dir.file(f.name), f.b, f.mode); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	n.logger.Info("joined with a token: got a node certificate from the cluster CA", "token_id", tok.ID, "ca", tok.CAHash)
	return nil
}

// writeFileMode writes b to path atomically with mode.
func writeFileMode(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil { // WriteFile keeps an old file's mode
		return err
	}
	return os.Rename(tmp, path)
}

// formatKeyring is the gossip keyring file: one base64 key a line, the
// primary first.
func formatKeyring(keys [][]byte) []byte {
	var b bytes.Buffer
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// parseKeyring reads formatKeyring's output.
func parseKeyring(b []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(k) != gossipKeyLen {
			return nil, fmt.Errorf("gossip key %d: want %d bytes in base64", len(keys)+1, gossipKeyLen)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no gossip key")
	}
	return keys, nil
}

// ReadInitialToken returns the first join token a head wrote to its data
// dir (InitialTokenFile), for scripts and test harnesses; an error when
// there is none (not a head, --insecure, or the file was removed).
func ReadInitialToken(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, InitialTokenFile))
	if err != nil {
		return "", fmt.Errorf("initial join token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
