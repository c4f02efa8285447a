package cluster

import (
	"context"
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
	wg     sync.WaitGroup

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
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
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
	<-m.sniffing
	if err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	switch b[0] {
	case connRPC:
		m.rpc(c)
	case connRaft:
		m.routeRaft(c)
	default:
		m.logger.Debug("dropping connection with unknown protocol byte", "remote", c.RemoteAddr().String(), "byte", b[0])
		c.Close()
	}
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
