package cluster

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/nodeup/nodeup/rpc"
)

// linkFilter cuts a node's links to chosen peers, so tests can partition a
// cluster inside one process (no network namespaces). Every connection a
// node opens (RPC, Raft, gossip streams) goes through dial, and every gossip
// packet it sends is first checked with drop; a filter on both sides of a
// link therefore cuts it both ways. Only tests set one (Config.links).
type linkFilter interface {
	// dial connects to addr ("host:port") or refuses because the link is cut.
	dial(ctx context.Context, addr string) (net.Conn, error)
	// drop reports whether a gossip packet to addr is lost.
	drop(addr string) bool
}

// dialTCP connects to a peer's host:port, through the test link filter when
// one is set. ctx bounds the connect. Unacknowledged data aborts the
// connection after tcpUserTimeout (sockopt_linux.go).
func (n *Node) dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	if strings.HasPrefix(addr, rpc.UnixPrefix) { // the node's own socket (listenSocket)
		return rpc.PlainDial(ctx, addr)
	}
	if n.cfg.links != nil {
		return n.cfg.links.dial(ctx, addr)
	}
	d := net.Dialer{Control: dialControl}
	return d.DialContext(ctx, "tcp", addr)
}

// gossipTransport is memberlist's UDP and TCP transport with two changes:
// its TCP dials end when the node stops (a rejoin attempt toward a peer
// behind a partition would otherwise hold shutdown for memberlist's
// TCPTimeout, 10 s), and they and its packets go through the node's link
// filter, so a test partition cuts gossip too.
type gossipTransport struct {
	*memberlist.NetTransport
	n *Node
}

// newGossipTransport binds the gossip port on bind; port 0 picks a port free
// for both TCP and UDP (retried, as memberlist does, since the TCP port may
// be taken for UDP in between).
func newGossipTransport(n *Node, bind string, port int, logger *log.Logger) (*gossipTransport, error) {
	tries := 1
	if port == 0 {
		tries = 10
	}
	var err error
	for i := 0; i < tries; i++ {
		var nt *memberlist.NetTransport
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{bind}, BindPort: port, Logger: logger})
		if err == nil {
			return &gossipTransport{NetTransport: nt, n: n}, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("gossip port %d on %s: %w", port, bind, err)
}

// DialTimeout implements memberlist.Transport.
func (t *gossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(t.n.ctx, timeout)
	defer cancel()
	return t.n.dialTCP(ctx, addr)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *gossipTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// WriteTo implements memberlist.Transport.
func (t *gossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.n.cfg.links != nil && t.n.cfg.links.drop(addr) {
		return time.Now(), nil // lost on the way, as UDP may be
	}
	return t.NetTransport.WriteTo(b, addr)
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *gossipTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// FreezeLinks is a link filter for tests outside this package (in-process
// clusters): it makes chosen peers look frozen, as a SIGSTOPped node is, not
// gone: data written to a frozen peer is swallowed, and what it would have
// answered never arrives; its gossip packets are lost. A dial to it
// connects (its kernel accepts) into such a silent connection. Give each node of a
// test cluster its own filter (SetFreezeLinks) and freeze the same pair on
// both nodes to freeze the link both ways.
type FreezeLinks struct {
	mu     sync.Mutex
	frozen map[string]bool // peers' RPC and gossip host:port
}

// NewFreezeLinks returns a filter with no link frozen.
func NewFreezeLinks() *FreezeLinks { return &FreezeLinks{frozen: map[string]bool{}} }

// SetFreezeLinks routes the node's links through f (tests only).
func (c *Config) SetFreezeLinks(f *FreezeLinks) { c.links = f }

// Freeze freezes the links to addrs.
func (f *FreezeLinks) Freeze(addrs []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range addrs {
		f.frozen[a] = true
	}
}

// Thaw unfreezes the links to addrs, as SIGCONT resumes a stopped node.
func (f *FreezeLinks) Thaw(addrs []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range addrs {
		delete(f.frozen, a)
	}
}

func (f *FreezeLinks) drop(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen[addr]
}

func (f *FreezeLinks) dial(ctx context.Context, addr string) (net.Conn, error) {
	// A frozen peer's kernel still accepts the connection; nothing reads it.
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &frozenConn{Conn: c, f: f, addr: addr}, nil
}

// frozenConn is a connection that goes silent once its peer is frozen.
type frozenConn struct {
	net.Conn
	f    *FreezeLinks
	addr string
}

func (c *frozenConn) Write(b []byte) (int, error) {
	if c.f.drop(c.addr) {
		return len(b), nil // in the peer's socket buffer, never read
	}
	return c.Conn.Write(b)
}

func (c *frozenConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.f.drop(c.addr) {
			return n, err
		}
	}
}

// PeerAddrs are the addresses other nodes reach this one at: RPC and gossip
// (for FreezeLinks).
func (n *Node) PeerAddrs() []string { return []string{n.RPCAddr(), n.ml.LocalNode().Address()} }
