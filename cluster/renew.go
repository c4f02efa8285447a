package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// certValidity is how long the node certificates this node signs last.
func (n *Node) certValidity() time.Duration {
	if n.cfg.nodeCertValidity > 0 {
		return n.cfg.nodeCertValidity
	}
	return pki.NodeCertValidity
}

// renewLoop renews the node's certificate at pki.RenewAt (two thirds of its
// life), retrying every minute on failure, until the node stops.
func (n *Node) renewLoop(ctx context.Context) {
	floor := n.cfg.renewFloor
	if floor <= 0 {
		floor = time.Minute
	}
	for {
		leaf := n.sec.ident.Load().Cert.Leaf
		wait := max(time.Until(pki.RenewAt(leaf.NotBefore, leaf.NotAfter)), floor)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err := n.renewCert(ctx); err != nil {
			n.logger.Warn("renew the node certificate (retried)", "expires", leaf.NotAfter, "err", err)
			continue
		}
	}
}

// renewCert asks the leader for a certificate of a new key, proving who
// this node is with its current key, and swaps it in (files and TLS).
func (n *Node) renewCert(ctx context.Context) error {
	cur := n.sec.ident.Load()
	curKey, ok := cur.Cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return fmt.Errorf("current node key is a %T, want ECDSA", cur.Cert.PrivateKey)
	}
	key, err := pki.NewKey()
	if err != nil {
		return err
	}
	csr, err := pki.NewCSR(key, n.id.NodeID)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(csr)
	proof, err := ecdsa.SignASN1(rand.Reader, curKey, sum[:])
	if err != nil {
		return fmt.Errorf("sign the renewal: %w", err)
	}
	req := &wire.RenewRequest{NodeID: n.id.NodeID, CSR: csr, Proof: proof,
		Current: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cur.Cert.Leaf.Raw})}
	var resp wire.RenewResponse
	if err := n.forward(ctx, wire.MethodNodeRenew, req, &resp); err != nil {
		return err
	}
	keyPEM, err := pki.KeyPEM(key)
	if err != nil {
		return err
	}
	id, err := chainedIdentity(resp.NodeCert, keyPEM, n.sec.caPEM, n.sec.ca)
	if err != nil {
		return fmt.Errorf("the renewed certificate: %w", err)
	}
	// The key first, then the certificate: a crash between them leaves a
	// pair that does not match, which start reports rather than uses.
	if err := writeFileMode(n.dir.file(nodeKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeFileMode(n.dir.file(nodeCertFile), resp.NodeCert, 0o644); err != nil {
		return err
	}
	n.sec.ident.Store(id)
	n.logger.Info("renewed the node certificate", "expires", id.Cert.Leaf.NotAfter)
	return nil
}

// nodeRenew signs a new certificate for a node that proves it holds its
// current, unexpired certificate of the cluster CA.
func (n *Node) nodeRenew(ctx context.Context, req *wire.RenewRequest) (*wire.RenewResponse, error) {
	if n.sec.insecure {
		return nil, errInsecure("certificate renewal")
	}
	deny := func(format string, args ...any) error {
		msg := fmt.Sprintf("renew node %s: ", short(req.NodeID)) + fmt.Sprintf(format, args...)
		n.logger.Warn("refused a certificate renewal: " + msg)
		return &rpc.Error{Code: wire.CodePermissionDenied, Message: msg}
	}
	if len(req.CSR) == 0 || len(req.CSR) > wire.MaxCSRBytes || len(req.Current) > 8<<10 || len(req.Proof) > 256 {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("renew: request of %d, certificate of %d, proof of %d bytes: too large or empty", len(req.CSR), len(req.Current), len(req.Proof))}
	}
	block, _ := pem.Decode(req.Current)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, deny("no current certificate")
	}
	cur, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, deny("current certificate: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(n.sec.ca.Cert)
	if _, err := cur.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, deny("current certificate: %v", err)
	}
	if cur.Subject.CommonName != req.NodeID {
		return nil, deny("current certificate is node %s's", short(cur.Subject.CommonName))
	}
	pub, ok := cur.PublicKey.(*ecdsa.PublicKey)
	sum := sha256.Sum256(req.CSR)
	if !ok || !ecdsa.VerifyASN1(pub, sum[:], req.Proof) {
		return nil, deny("the proof is not signed by the current certificate's key")
	}
	cert, err := n.sec.ca.SignNode(req.CSR, req.NodeID, n.certValidity())
	if err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	return &wire.RenewResponse{NodeCert: cert}, nil
}
