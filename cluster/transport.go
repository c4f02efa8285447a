package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nodeup/nodeup/internal/ratelog"
	"github.com/nodeup/nodeup/wire"
)

// The node's one TCP port carries several protocols; the first byte a client
// sends picks one (as Consul and Nomad multiplex their server port).
const (
	connRPC       = wire.PreambleRPC
	connRaft byte = 0x02
	// connTLS is the first byte of a TLS record (a handshake): the
	// connection is TLS, and its first inner byte picks RPC or Raft.
	connTLS byte = 0x16
)

// firstByteTimeout bounds how long an accepted connection may stay silent
// before it is dropped, so idle garbage cannot pin goroutines.
const firstByteTimeout = 10 * time.Second

const (
	// maxSniffing is the most accepted connections that may be waiting
	// for their protocol byte at once; more are closed at once.
	maxSniffing = 256
	// maxRaftConns is the most inbound Raft connections open at once;
	// more are closed at once. Raft's transport gives each one buffers of
	// a few hundred KiB and no idle timeout, and a leader opens a handful
	// per follower.
	maxRaftConns = 128
)

// mux accepts on the node's port and routes each connection by its first
// byte. It holds no buffer of its own: the byte is read on its own, and the
// connection is handed on as it is.
type mux struct {
	ln     net.Listener
	rpc    func(net.Conn)
	raft   *raftLayer
	logger *slog.Logger
	// wg counts the connections being routed; mu and closed keep its Add
	// from racing with close's Wait (a WaitGroup's Add at zero must happen
	// before its Wait): serve adds only while the mux is open.
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool

	// tls, when set (a secure node), accepts TLS connections. Plaintext
	// Raft is then refused; plaintext RPC reaches rpc, whose authenticator
	// lets it call only the open methods.
	tls *tls.Config

	sniffing  chan struct{} // one token per connection waiting for its first byte
	raftConns chan struct{} // one token per inbound Raft connection
	warnings  *ratelog.Limiter
}

func newMux(ln net.Listener, rpc func(net.Conn), raft *raftLayer, logger *slog.Logger) *mux {
	return &mux{
		ln: ln, rpc: rpc, raft: raft, logger: logger,
		sniffing:  make(chan struct{}, maxSniffing),
		raftConns: make(chan struct{}, maxRaftConns),
		warnings:  ratelog.New(time.Second),
	}
}

func (m *mux) serve() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			m.logger.Warn("accept failed", "err", err)
			time.Sleep(50 * time.Millisecond) // back off on EMFILE and the like
			continue
		}
		if !take(m.sniffing) {
			m.warnings.Warn(m.logger, "closing connection: too many waiting for their protocol byte", "remote", c.RemoteAddr().String(), "limit", maxSniffing)
			c.Close()
			continue
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			<-m.sniffing
			c.Close()
			return
		}
		m.wg.Add(1)
		m.mu.Unlock()
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
}

// close stops routing new connections and waits for those being routed
// (its listener is closed by its owner).
func (m *mux) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.wg.Wait()
}

// take takes a token from sem if one is free.
func take(sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (m *mux) route(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(firstByteTimeout))
	var b [1]byte
	_, err := io.ReadFull(c, b[:])
	if err != nil {
		<-m.sniffing
		c.Close()
		return
	}
	if b[0] == connTLS && m.tls != nil {
		c = m.handshake(c, b[0]) // holds the sniffing slot until done
	}
	<-m.sniffing
	if c == nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	ic, isTLS := c.(*innerConn)
	verified := isTLS && len(ic.ConnectionState().PeerCertificates) > 0
	if isTLS {
		b[0] = ic.inner
	}
	switch b[0] {
	case connRPC:
		// The RPC server's authenticator decides who the connection is:
		// a node (certificate), a token's role, or anonymous.
		m.rpc(c)
	case connRaft:
		if !verified && m.tls != nil {
			m.warnings.Warn(m.logger, "refusing Raft connection without a node certificate of the cluster CA", "remote", c.RemoteAddr().String())
			c.Close()
			return
		}
		m.routeRaft(c)
	default:
		m.logger.Debug("dropping connection with unknown protocol byte", "remote", c.RemoteAddr().String(), "byte", b[0])
		c.Close()
	}
}

// handshake completes a TLS handshake on c, whose first byte first was
// already read, and reads the inner protocol byte; nil (c closed) when
// either fails within firstByteTimeout. A client certificate of another
// CA fails the handshake: one warning line names the peer and why.
func (m *mux) handshake(c net.Conn, first byte) net.Conn {
	_ = c.SetDeadline(time.Now().Add(firstByteTimeout))
	tc := tls.Server(&prefixConn{Conn: c, first: first, pending: true}, m.tls)
	if err := tc.Handshake(); err != nil {
		m.warnings.Warn(m.logger, "refused a TLS connection: "+err.Error(), "remote", c.RemoteAddr().String())
		c.Close()
		return nil
	}
	var b [1]byte
	if _, err := io.ReadFull(tc, b[:]); err != nil {
		tc.Close()
		return nil
	}
	_ = c.SetDeadline(time.Time{})
	return &innerConn{Conn: tc, inner: b[0]}
}

// innerConn is an accepted TLS connection and its inner protocol byte.
type innerConn struct {
	*tls.Conn
	inner byte
}

// NodePrincipal returns the node ID (certificate common name) of a peer
// that presented a node certificate of the cluster CA: the principal
// "node", which may call every method. ok is false for a TLS client
// without a certificate (it may only join).
func (c *innerConn) NodePrincipal() (nodeID string, ok bool) {
	certs := c.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return "", false
	}
	return certs[0].Subject.CommonName, true
}

// prefixConn gives back the one byte the mux read before it knew the
// connection is TLS.
type prefixConn struct {
	net.Conn
	first   byte
	pending bool
}

// Read returns the held byte first.
func (c *prefixConn) Read(p []byte) (int, error) {
	if c.pending && len(p) > 0 {
		p[0], c.pending = c.first, false
		return 1, nil
	}
	return c.Conn.Read(p)
}

// routeRaft hands c to Raft if fewer than maxRaftConns are open.
func (m *mux) routeRaft(c net.Conn) {
	if !take(m.raftConns) {
		m.warnings.Warn(m.logger, "closing Raft connection: too many open", "remote", c.RemoteAddr().String(), "limit", maxRaftConns)
		c.Close()
		return
	}
	rc := &releasingConn{Conn: c, release: func() { <-m.raftConns }}
	if !m.raft.handoff(rc) {
		rc.Close()
	}
}

// releasingConn calls release once, when it is first closed.
type releasingConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// Close closes the connection and releases its slot.
func (c *releasingConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// raftLayer is a raft.StreamLayer over the shared port: inbound conns come
// from the mux, outbound ones write the Raft protocol byte first.
type raftLayer struct {
	addr   net.Addr
	dial   func(ctx context.Context, addr string) (net.Conn, error) // the node's dialer
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once

	// open holds the conns handed to or dialled for Raft and not closed
	// yet: Raft's transport leaves them open at its Close, and a reader
	// goroutine with each inbound one, so the layer's Close closes them.
	mu   sync.Mutex
	open map[*releasingConn]struct{}
}

func newRaftLayer(addr net.Addr) *raftLayer {
	return &raftLayer{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{}), open: map[*releasingConn]struct{}{}}
}

func (l *raftLayer) handoff(c net.Conn) bool {
	tc, ok := l.track(c)
	if !ok {
		return false
	}
	select {
	case l.conns <- tc:
		return true
	case <-l.closed:
		tc.Close()
		return false
	}
}

// track returns c counted in open until it is closed; false (c not
// counted) once the layer is closed.
func (l *raftLayer) track(c net.Conn) (net.Conn, bool) {
	rc := &releasingConn{Conn: c}
	rc.release = func() {
		l.mu.Lock()
		delete(l.open, rc)
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		return nil, false
	default:
	}
	l.open[rc] = struct{}{}
	return rc, true
}

// Accept implements net.Listener.
func (l *raftLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *raftLayer) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		close(l.closed)
		open := make([]*releasingConn, 0, len(l.open))
		for c := range l.open {
			open = append(open, c)
		}
		l.mu.Unlock()
		for _, c := range open {
			c.Close()
		}
	})
	return nil
}

// Addr implements net.Listener.
func (l *raftLayer) Addr() net.Addr { return l.addr }

// Dial implements raft.StreamLayer.
func (l *raftLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := l.dial(ctx, string(address))
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{connRaft}); err != nil {
		c.Close()
		return nil, err
	}
	tc, ok := l.track(c)
	if !ok {
		c.Close()
		return nil, net.ErrClosed
	}
	return tc, nil
}
