// Package pki is the cluster's identity (issue 15): a cluster certificate
// authority that signs node certificates, the pin of that CA a join token
// carries (as kubeadm's discovery hash), join and client tokens stored
// hashed, and the mutual-TLS configurations nodes speak to each other with.
// It uses only the standard library (crypto/x509, crypto/ecdsa, crypto/tls).
//
// The CA key never leaves a server's data dir (mode 0600); a joining node
// makes its own key and sends a certificate request, so private keys are
// never on the wire.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// CAValidity is how long a new cluster CA is valid (10 years, as kubeadm's).
const CAValidity = 10 * 365 * 24 * time.Hour

// CA is the cluster's certificate authority: its certificate, and its key
// on servers (nil elsewhere: such a CA verifies but cannot sign).
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a cluster CA for clusterName (its subject's common name), an
// ECDSA P-256 key and a self-signed certificate valid from now for validity.
func NewCA(clusterName string, validity time.Duration) (*CA, error) {
	if clusterName == "" {
		return nil, errors.New("pki: new CA: empty cluster name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: new CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "nodeup CA " + clusterName, Organization: []string{"nodeup"}},
		NotBefore:             now.Add(-time.Minute), // clock skew between nodes
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: self-sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse new CA: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Hash is the CA's pin: "sha256:" and the hex sha256 of its certificate's
// SubjectPublicKeyInfo (kubeadm's --discovery-token-ca-cert-hash). A join
// token carries it, so a joining node trusts only the cluster it meant.
func (c *CA) Hash() string { return CertHash(c.Cert) }

// CertHash is the pin of cert (see CA.Hash).
func CertHash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CertPEM is the CA certificate in PEM.
func (c *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Cert.Raw})
}

// KeyPEM is the CA key in PEM (PKCS#8); an error when this CA has no key.
func (c *CA) KeyPEM() ([]byte, error) {
	if c.Key == nil {
		return nil, errors.New("pki: this CA has no key (only servers hold it)")
	}
	return KeyPEM(c.Key)
}

// ParseCA reads a CA from its certificate PEM and, when keyPEM is not
// empty, its key PEM. Errors name what is wrong: not PEM, not a CA
// certificate, a key that does not match the certificate.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: CA certificate %q is not a CA certificate", cert.Subject.CommonName)
	}
	ca := &CA{Cert: cert}
	if len(keyPEM) == 0 {
		return ca, nil
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("pki: CA key does not match the CA certificate")
	}
	ca.Key = key
	return ca, nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseKeyPEM(b []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM PRIVATE KEY block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T key, want ECDSA", k)
	}
	return ek, nil
}

// randomSerial is a 128-bit positive serial number.
func randomSerial() *big.Int {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[0] &= 0x7f
	return new(big.Int).SetBytes(b)
}

// validName reports whether s is fit for a certificate name field.
func validName(s string) bool {
	return s != "" && len(s) <= 128 && !strings.ContainsAny(s, "\x00/\n")
}
