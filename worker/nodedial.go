package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
)

// nodeDialer dials this process's pool: nodes' TCP ports over TLS when the
// process holds a credential for them, other core workers' ports over TLS
// when it holds a worker certificate (workertls.go), everything else (Unix
// sockets, an --insecure cluster) plainly. A secure
// node refuses plaintext TCP callers everything but Cluster.Hello.
type nodeDialer struct {
	secure rpc.DialFunc // nil: no credential, nodes are dialed plainly
	nodes  sync.Map     // TCP addresses known to be nodes' ports
	// worker is the TLS configuration other core workers' ports are
	// dialed with (workertls.go); nil: plainly.
	worker atomic.Pointer[tls.Config]
	// selfHost is the IP this process serves on, its node's: core workers
	// there are on the same machine, so they are dialed plainly (the
	// bytes never leave it, and TLS would only cost latency).
	selfHost atomic.Pointer[string]
}

// sameHost reports whether addr ("host:port") is on the IP this process
// serves on.
func (d *nodeDialer) sameHost(addr string) bool {
	self := d.selfHost.Load()
	host, _, err := net.SplitHostPort(addr)
	return self != nil && err == nil && host == *self
}

// markNode records addr as a node's port, so calls to it take TLS.
func (d *nodeDialer) markNode(addr string) {
	if addr != "" && !strings.HasPrefix(addr, rpc.UnixPrefix) {
		d.nodes.Store(addr, struct{}{})
	}
}

// dial is the pool's DialFunc.
func (d *nodeDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	_, node := d.nodes.Load(addr)
	if node && d.secure != nil {
		return d.secure(ctx, addr)
	}
	if cfg := d.worker.Load(); cfg != nil && !node && !strings.HasPrefix(addr, rpc.UnixPrefix) && !d.sameHost(addr) {
		return pki.DialTLS(ctx, nil, addr, cfg)
	}
	return rpc.PlainDial(ctx, addr)
}

// nodeCredential returns how this process dials nodes' ports over TLS, nil
// for plainly: with a token (Token, NODEUP_TOKEN), TLS verified against
// the CA pin it carries, the token presented in the hello; without one, a
// process whose node is on this machine (its Unix socket, sock) presents
// that node's certificate when it may read it (the node's user: the
// socket already trusts it with everything), so its spillback leases and
// frees reach other nodes as that node. The node's files are
// <data-dir>/tls/{node.pem,node-key.pem,ca.pem} (cluster/security.go).
func nodeCredential(token, sock string) (rpc.DialFunc, error) {
	if token != "" {
		d, err := pki.TokenDialer(token)
		if err != nil {
			return nil, fmt.Errorf("nodeup: Token: %w", err)
		}
		return d, nil
	}
	path, ok := strings.CutPrefix(sock, rpc.UnixPrefix)
	if !ok {
		return nil, nil
	}
	dir := filepath.Join(filepath.Dir(path), "tls")
	load := func() (*tls.Config, error) {
		read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }
		certPEM, err := read("node.pem")
		if err != nil {
			return nil, err
		}
		keyPEM, err := read("node-key.pem")
		if err != nil {
			return nil, err
		}
		caPEM, err := read("ca.pem")
		if err != nil {
			return nil, err
		}
		id, err := pki.NewIdentity(certPEM, keyPEM, caPEM)
		if err != nil {
			return nil, fmt.Errorf("nodeup: the node's certificate in %s: %w", dir, err)
		}
		return id.ClientConfig(), nil
	}
	if _, err := load(); err != nil {
		// An --insecure node has no tls/ (no TLS anywhere); a process
		// of another user cannot read it, and reaches other nodes only
		// with a token (its own node still answers on the socket).
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, nil
		}
		return nil, err
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		// Read at every dial: the node renews its certificate.
		cfg, err := load()
		if err != nil {
			return nil, fmt.Errorf("TLS with %s: %w", addr, err)
		}
		return pki.DialTLS(ctx, nil, addr, cfg)
	}, nil
}
