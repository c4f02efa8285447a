package pki

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// WorkerServerName is the DNS name in every core worker certificate: the
// name a core worker dialing another verifies. It differs from
// NodeServerName, so a worker certificate never passes for a node's.
const WorkerServerName = "worker.nodeup"

// WorkerCertValidity is how long a core worker certificate is valid; core
// workers fetch a new one two thirds of the way through (RenewAt).
const WorkerCertValidity = 7 * 24 * time.Hour

// IssueWorker makes a key and a certificate for a core worker of job
// jobID (a driver, task worker or actor process): subject "job <jobID>",
// DNS name WorkerServerName, usable only as a TLS server (so it cannot
// pass for a node's client certificate), valid from now for validity (at
// most the CA's own end). It returns both as PEM. The key is made here, on
// a server: a Python process has no way to make a certificate request.
func (c *CA) IssueWorker(jobID string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if c.Key == nil {
		return nil, nil, errors.New("pki: issue worker certificate: this CA has no key (only servers hold it)")
	}
	if !validName(jobID) {
		return nil, nil, fmt.Errorf("pki: issue worker certificate: job ID %q: want 1 to 128 characters without '/', NUL or newline", jobID)
	}
	key, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	end := now.Add(validity)
	if end.After(c.Cert.NotAfter) {
		end = c.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: "job " + jobID, Organization: []string{"nodeup"}},
		DNSNames:     []string{WorkerServerName},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     end,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: issue worker certificate for job %s: %w", jobID, err)
	}
	keyPEM, err = KeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// WorkerTLS is what a core worker needs for TLS with other core workers:
// its own certificate (served to callers) and the cluster CA (which the
// core workers it calls must chain to).
type WorkerTLS struct {
	Cert tls.Certificate
	CA   *x509.CertPool
}

// NewWorkerTLS reads a core worker certificate, its key and the CA
// certificate, all PEM; the certificate must chain to the CA under
// WorkerServerName as a TLS server.
func NewWorkerTLS(certPEM, keyPEM, caPEM []byte) (*WorkerTLS, error) {
	cert, pool, err := chained(certPEM, keyPEM, caPEM, "worker", WorkerServerName)
	if err != nil {
		return nil, err
	}
	return &WorkerTLS{Cert: cert, CA: pool}, nil
}

// WorkerServerConfig is the TLS configuration a core worker serves with: TLS
// 1.3 and the certificate get returns at each handshake (renewed ones
// too). No client certificate: callers present a job token inside (the
// core worker's own check), as the protocol describes.
func WorkerServerConfig(get func() *tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return get(), nil },
	}
}

// ClientConfig is the TLS configuration a core worker dials other core
// workers with: TLS 1.3, the peer's certificate verified against the
// cluster CA under WorkerServerName.
func (w *WorkerTLS) ClientConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: w.CA, ServerName: WorkerServerName}
}

// RenewAt is when w's certificate should be replaced (RenewAt of its
// validity).
func (w *WorkerTLS) RenewAt() time.Time { return RenewAt(w.Cert.Leaf.NotBefore, w.Cert.Leaf.NotAfter) }
