package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
)

// PinnedConfig is the TLS configuration of a client that knows the cluster
// only by the CA pin a token carries ("sha256:" + 64 hex characters), as
// kubeadm's discovery hash: the server's chain must end in a CA whose
// public key hash is pin and its certificate must chain to that CA under
// NodeServerName. Nothing is sent before that check. A joining node and
// the CLI and SDKs with a token dial this way; no client certificate.
func PinnedConfig(pin string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // verified below, against the pin rather than a pool
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) < 2 {
				return fmt.Errorf("the peer sent %d certificates, want its own and the cluster CA's", len(raw))
			}
			certs := make([]*x509.Certificate, len(raw))
			for i, b := range raw {
				c, err := x509.ParseCertificate(b)
				if err != nil {
					return fmt.Errorf("the peer's certificate %d: %w", i, err)
				}
				certs[i] = c
			}
			ca := certs[len(certs)-1]
			if got := CertHash(ca); got != pin || !ca.IsCA {
				return fmt.Errorf("the peer's cluster CA is %s, the token pins %s: this is not the cluster the token was made for", got, pin)
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca)
			if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: NodeServerName,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("the peer's certificate does not chain to the pinned CA: %w", err)
			}
			return nil
		},
	}
}

// TokenDialer returns a dial function for a client holding token: TCP to
// addr ("host:port"), then a TLS 1.3 handshake verifying the server
// against the CA pin the token carries (PinnedConfig). The error of a bad
// token names what part is wrong; a handshake failure names addr.
func TokenDialer(token string) (func(ctx context.Context, addr string) (net.Conn, error), error) {
	tok, err := ParseToken(token)
	if err != nil {
		return nil, err
	}
	cfg := PinnedConfig(tok.CAHash)
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return DialTLS(ctx, nil, addr, cfg)
	}, nil
}

// DialTLS connects to addr with dial (nil: a plain TCP dial) and runs a
// TLS client handshake with cfg, closing the connection when it fails.
// A handshake error names addr and wraps the TLS error.
func DialTLS(ctx context.Context, dial func(ctx context.Context, addr string) (net.Conn, error), addr string, cfg *tls.Config) (net.Conn, error) {
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	c, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS with %s: %w", addr, err)
	}
	return tc, nil
}
