package worker

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/wire"
)

// Core workers on a secure cluster talk to each other over TLS 1.3 (issue
// 15: everything between nodes is encrypted): each process gets a key and
// a certificate from the cluster CA through its node at start
// (Worker.Certificate), serves TLS with it, and dials other core workers
// verifying that their certificate chains to the CA. The job token still
// authenticates the caller, now inside TLS (jobauth.go). On an
// --insecure cluster the node answers with no certificate and everything
// stays plain.

// workerTLS is a core worker's TLS state: the credential it serves with
// (replaced on renewal) and the client configuration it dials with.
type workerTLS struct {
	cred   atomic.Pointer[pki.WorkerTLS]
	client *tls.Config // the CA does not change, so neither does this
	server *tls.Config
	// plainAccepts and tlsAccepts count connections accepted each way
	// (tests check which way core workers dial each other).
	plainAccepts, tlsAccepts atomic.Int64
}

// workerCertRetry is how long a failed renewal waits before trying again.
const workerCertRetry = time.Minute

// fetchWorkerCert asks this process's node for a core worker certificate
// (Worker.Certificate): nil, nil on an --insecure cluster.
func (cw *coreWorker) fetchWorkerCert(ctx context.Context) (*pki.WorkerTLS, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rep wire.WorkerCertReply
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodWorkerCert, &wire.WorkerCertRequest{JobID: cw.jobID}, &rep); err != nil {
		return nil, fmt.Errorf("nodeup: get this process's TLS certificate from node %s: %w", cw.nodeAddr, err)
	}
	if len(rep.CertPEM) == 0 {
		return nil, nil
	}
	w, err := pki.NewWorkerTLS(rep.CertPEM, rep.KeyPEM, rep.CAPEM)
	if err != nil {
		return nil, fmt.Errorf("nodeup: the TLS certificate node %s gave: %w", cw.nodeAddr, err)
	}
	return w, nil
}

// setupWorkerTLS gets this process's certificate, if the cluster is
// secure, and makes the dialer take TLS to other core workers. Call it
// before serve.
func (cw *coreWorker) setupWorkerTLS() error {
	cred, err := cw.fetchWorkerCert(cw.ctx)
	if err != nil || cred == nil {
		return err
	}
	t := &workerTLS{client: cred.ClientConfig()}
	t.cred.Store(cred)
	t.server = pki.WorkerServerConfig(func() *tls.Certificate { return &t.cred.Load().Cert })
	cw.tls = t
	cw.dialer.worker.Store(t.client)
	go cw.renewWorkerCert(cred.RenewAt())
	return nil
}

// renewWorkerCert replaces the certificate at renewAt, and again at each
// new one's renewal time, until the process's core worker ends.
func (cw *coreWorker) renewWorkerCert(at time.Time) {
	for {
		t := time.NewTimer(time.Until(at))
		select {
		case <-cw.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		cred, err := cw.fetchWorkerCert(cw.ctx)
		if err != nil || cred == nil {
			cw.logger.Warn("renew this process's TLS certificate failed; retrying", "err", err, "in", workerCertRetry)
			at = time.Now().Add(workerCertRetry)
			continue
		}
		cw.tls.cred.Store(cred)
		at = cred.RenewAt()
	}
}

// sniffListener hands out connections that speak TLS when their first
// byte is a TLS handshake record and plain RPC otherwise, each then
// checked for the protocol preamble. Plain connections stay accepted on a
// secure cluster: the node's own calls to its worker processes (actor
// construction, on this machine) and the CLI use them, and the job token
// authenticates every caller either way; core workers always dial each
// other with TLS.
type sniffListener struct {
	net.Listener
	tls *workerTLS // nil: plain only
}

func (l *sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.tls == nil {
		return &preambleConn{Conn: c}, nil
	}
	return &sniffConn{raw: c, tls: l.tls}, nil
}

// tlsRecordHandshake is the first byte of a TLS ClientHello.
const tlsRecordHandshake = 0x16

// sniffConn decides on its first Read (on the server goroutine serving
// it, so a silent peer delays no other) whether the connection is TLS.
type sniffConn struct {
	raw   net.Conn
	tls   *workerTLS
	mu    sync.Mutex
	inner net.Conn // set by the first Read: a *tls.Conn or a preambleConn
}

func (c *sniffConn) conn() net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner != nil {
		return c.inner
	}
	return c.raw
}

func (c *sniffConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	inner := c.inner
	c.mu.Unlock()
	if inner == nil {
		var b [1]byte
		if _, err := io.ReadFull(c.raw, b[:]); err != nil {
			return 0, err
		}
		replay := &replayConn{Conn: c.raw, first: b[0]}
		if b[0] == tlsRecordHandshake {
			c.tls.tlsAccepts.Add(1)
			inner = &preambleConn{Conn: tls.Server(replay, c.tls.server)}
		} else {
			c.tls.plainAccepts.Add(1)
			inner = &preambleConn{Conn: replay}
		}
		c.mu.Lock()
		c.inner = inner
		c.mu.Unlock()
	}
	return inner.Read(p)
}

func (c *sniffConn) Write(p []byte) (int, error)        { return c.conn().Write(p) }
func (c *sniffConn) Close() error                       { return c.conn().Close() }
func (c *sniffConn) LocalAddr() net.Addr                { return c.raw.LocalAddr() }
func (c *sniffConn) RemoteAddr() net.Addr               { return c.raw.RemoteAddr() }
func (c *sniffConn) SetDeadline(t time.Time) error      { return c.raw.SetDeadline(t) }
func (c *sniffConn) SetReadDeadline(t time.Time) error  { return c.raw.SetReadDeadline(t) }
func (c *sniffConn) SetWriteDeadline(t time.Time) error { return c.raw.SetWriteDeadline(t) }

// replayConn returns first before the rest of Conn's bytes.
type replayConn struct {
	net.Conn
	first byte
	done  bool
}

func (c *replayConn) Read(p []byte) (int, error) {
	if !c.done && len(p) > 0 {
		c.done = true
		p[0] = c.first
		return 1, nil
	}
	return c.Conn.Read(p)
}
