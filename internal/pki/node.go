package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// NodeServerName is the DNS name in every node certificate and the name a
// node verifies a peer against: any node of the cluster may serve any
// address, so the cluster's CA, not the address, is the identity (as
// Consul's server.<dc>.consul).
const NodeServerName = "node.nodeup"

// NodeCertValidity is how long a node certificate is valid; nodes renew
// theirs before two thirds of it has passed.
const NodeCertValidity = 30 * 24 * time.Hour

// NewKey makes a node's ECDSA P-256 key.
func NewKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: new key: %w", err)
	}
	return k, nil
}

// NewCSR is a DER certificate request for nodeID signed by key: what a
// joining node sends, so its key never leaves it.
func NewCSR(key *ecdsa.PrivateKey, nodeID string) ([]byte, error) {
	if !validName(nodeID) {
		return nil, fmt.Errorf("pki: certificate request: node ID %q: want 1 to 128 characters without '/', NUL or newline", nodeID)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: nodeID}}, key)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate request: %w", err)
	}
	return der, nil
}

// SignNode issues a node certificate from a certificate request: subject
// the request's node ID, DNS name NodeServerName, usable as TLS server and
// client, valid from now for validity (at most the CA's own end). The
// request's signature must hold, and its node ID must be nodeID.
func (c *CA) SignNode(csrDER []byte, nodeID string, validity time.Duration) ([]byte, error) {
	if c.Key == nil {
		return nil, errors.New("pki: sign node certificate: this CA has no key (only servers hold it)")
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, fmt.Errorf("pki: sign node certificate: request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("pki: sign node certificate: request signature: %w", err)
	}
	if csr.Subject.CommonName != nodeID {
		return nil, fmt.Errorf("pki: sign node certificate: request is for %q, want node %q", csr.Subject.CommonName, nodeID)
	}
	now := time.Now()
	end := now.Add(validity)
	if end.After(c.Cert.NotAfter) {
		end = c.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: nodeID, Organization: []string{"nodeup"}},
		DNSNames:     []string{NodeServerName},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     end,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, csr.PublicKey, c.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign node certificate for %s: %w", nodeID, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// KeyPEM is key in PEM (PKCS#8), for the node's data dir (mode 0600).
func KeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Identity is what a node presents and trusts: its certificate and key and
// the cluster CA.
type Identity struct {
	Cert tls.Certificate
	CA   *x509.CertPool
}

// NewIdentity reads a node's certificate and key PEM and the CA
// certificate PEM. The certificate must chain to the CA.
func NewIdentity(certPEM, keyPEM, caPEM []byte) (*Identity, error) {
	cert, pool, err := chained(certPEM, keyPEM, caPEM, "node", NodeServerName)
	if err != nil {
		return nil, err
	}
	return &Identity{Cert: cert, CA: pool}, nil
}

// chained reads a certificate of kind ("node", "worker"), its key and the
// CA certificate, all PEM, and checks that the certificate chains to the
// CA as a TLS server named name; it returns the certificate (Leaf set)
// and a pool holding the CA.
func chained(certPEM, keyPEM, caPEM []byte, kind, name string) (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return cert, nil, fmt.Errorf("pki: %s certificate and key: %w", kind, err)
	}
	ca, err := parseCertPEM(caPEM)
	if err != nil {
		return cert, nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return cert, nil, fmt.Errorf("pki: %s certificate: %w", kind, err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return cert, nil, fmt.Errorf("pki: %s certificate %q does not chain to the cluster CA: %w", kind, leaf.Subject.CommonName, err)
	}
	cert.Leaf = leaf
	return cert, pool, nil
}

// ServerConfig is the TLS configuration a node serves with: TLS 1.3, its
// certificate, and a client certificate from the cluster CA required.
func (id *Identity) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.Cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    id.CA,
	}
}

// ClientConfig is the TLS configuration a node dials peers with: TLS 1.3,
// its certificate, and the peer's verified against the cluster CA under
// NodeServerName.
func (id *Identity) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.Cert},
		RootCAs:      id.CA,
		ServerName:   NodeServerName,
	}
}

// RenewAt is when a certificate valid until notAfter, issued at notBefore,
// should be renewed: two thirds of the way through its validity.
func RenewAt(notBefore, notAfter time.Time) time.Time {
	return notBefore.Add(notAfter.Sub(notBefore) * 2 / 3)
}
