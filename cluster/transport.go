package cluster

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The node's one TCP port carries several protocols; the first byte a client
// sends picks one (as Consul and Nomad multiplex their server port).
const (
	connRPC  byte = 0x01
	connRaft byte = 0x02
)

// firstByteTimeout bounds how long an accepted connection may stay silent
// before it is dropped, so idle garbage cannot pin goroutines.
const firstByteTimeout = 10 * time.Second

// mux accepts on the node's port and routes each connection by its first byte.
type mux struct {
	ln     net.Listener
	rpc    func(net.Conn)
	raft   *raftLayer
	logger *slog.Logger
	wg     sync.WaitGroup
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
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
}

func (m *mux) route(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(firstByteTimeout))
	br := bufio.NewReaderSize(c, 64<<10)
	b, err := br.ReadByte()
	if err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	bc := &bufferedConn{Conn: c, r: br}
	switch b {
	case connRPC:
		m.rpc(bc)
	case connRaft:
		if !m.raft.handoff(bc) {
			c.Close()
		}
	default:
		m.logger.Debug("dropping connection with unknown protocol byte", "remote", c.RemoteAddr().String(), "byte", b)
		c.Close()
	}
}

// bufferedConn replays bytes already read into the bufio.Reader.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// raftLayer is a raft.StreamLayer over the shared port: inbound conns come
// from the mux, outbound ones write the Raft protocol byte first.
type raftLayer struct {
	addr   net.Addr
	dial   func(ctx context.Context, addr string) (net.Conn, error) // the node's dialer
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newRaftLayer(addr net.Addr) *raftLayer {
	return &raftLayer{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *raftLayer) handoff(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.closed:
		return false
	}
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
	l.once.Do(func() { close(l.closed) })
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
	return c, nil
}
