package cluster

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
)

// cutLinks is the linkFilter of partition tests: dials to a cut address are
// refused, packets to it are dropped, and cutting closes the connections
// this node had opened to it. Cutting the same pair on both nodes therefore
// severs every link between them, as a partition would (except that a dial
// fails at once instead of timing out).
type cutLinks struct {
	mu    sync.Mutex
	cut   map[string]bool      // peers' RPC and gossip host:port
	conns map[*linkConn]string // open outbound connections and their address
}

func newCutLinks() *cutLinks {
	return &cutLinks{cut: map[string]bool{}, conns: map[*linkConn]string{}}
}

type linkConn struct {
	net.Conn
	l *cutLinks
}

func (c *linkConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

func (l *cutLinks) dial(ctx context.Context, addr string) (net.Conn, error) {
	if l.drop(addr) {
		return nil, fmt.Errorf("dial %s: link cut by the test", addr)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	lc := &linkConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[lc] = addr
	l.mu.Unlock()
	return lc, nil
}

func (l *cutLinks) drop(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut[addr]
}

// set cuts (or restores) the links to addrs; cutting closes the open ones.
func (l *cutLinks) set(addrs []string, cut bool) {
	l.mu.Lock()
	var closing []*linkConn
	for _, a := range addrs {
		if cut {
			l.cut[a] = true
		} else {
			delete(l.cut, a)
		}
	}
	if cut {
		for c, a := range l.conns {
			if l.cut[a] {
				closing = append(closing, c)
			}
		}
	}
	l.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
}

// withCutLinks gives every node of a testCluster a cutLinks filter.
func withCutLinks(_ int, c *Config) { c.links = newCutLinks() }

// peerAddrs are the addresses others reach nd at: RPC and gossip.
func peerAddrs(nd *Node) []string { return []string{nd.RPCAddr(), nd.ml.LocalNode().Address()} }

// partition cuts every link between the nodes of a and those of b (all
// started withCutLinks) and returns the function that heals it.
func partition(t *testing.T, a, b []*Node) (heal func()) {
	t.Helper()
	set := func(cut bool) {
		for _, x := range a {
			for _, y := range b {
				x.cfg.links.(*cutLinks).set(peerAddrs(y), cut)
				y.cfg.links.(*cutLinks).set(peerAddrs(x), cut)
			}
		}
	}
	set(true)
	return func() { set(false) }
}
