package rpc

import (
	"context"
	"sync"
	"time"
)

// PoolIdleTimeout is how long a pooled client may sit with no call before
// the Pool closes it and dials afresh: less than the servers' default
// Limits.IdleTimeout, so that a call is never sent on a connection the
// server is about to close for idleness.
const PoolIdleTimeout = 2 * time.Minute

// Pool keeps one Client per address and redials when the cached one has
// died or idled for PoolIdleTimeout. It is safe for concurrent use. Every
// connection presents the pool's token (SetToken), if any.
// Calls are never retried: a transport error is returned to the caller,
// and the next call to that address dials afresh.
type Pool struct {
	preamble    []byte
	version     uint16
	dialTimeout time.Duration
	dial        DialFunc
	token       string
	tokenFor    func(addr string) string // SetTokenFunc; nil: token for all
	routes      map[string]string        // address -> the address dialed for it

	mu      sync.Mutex
	closed  bool
	entries map[string]*poolEntry
}

// poolEntry serialises dialing per address so a burst of calls to a fresh
// or dead address makes one connection, not one each.
type poolEntry struct {
	mu     sync.Mutex
	client *Client
}

// NewPool returns an empty pool whose connections send preamble (may be
// nil) and the hello of protocol version after connecting. dialTimeout
// bounds each connect, in addition to the caller's context; zero means only
// the context bounds it.
func NewPool(preamble []byte, version uint16, dialTimeout time.Duration) *Pool {
	return &Pool{
		preamble:    preamble,
		version:     version,
		dialTimeout: dialTimeout,
		dial:        PlainDial,
		entries:     make(map[string]*poolEntry),
	}
}

// SetDialer makes the pool connect with dial instead of a plain TCP dial
// (a node routes its links through it, so tests can cut them). Call it
// before the pool's first use.
func (p *Pool) SetDialer(dial DialFunc) {
	p.mu.Lock()
	p.dial = dial
	p.mu.Unlock()
}

// SetToken makes every connection the pool dials from now on present
// token in its hello (WithToken); it returns an error, changing nothing,
// for a token longer than MaxTokenSize. Call it before the pool's first
// use: connections already open keep the principal they have.
func (p *Pool) SetToken(token string) error {
	if err := checkToken(token); err != nil {
		return err
	}
	p.mu.Lock()
	p.token = token
	p.mu.Unlock()
	return nil
}

// SetTokenFunc makes each connection the pool dials from now on present
// tokenFor(addr) in its hello, addr being the address called (before any
// route), instead of SetToken's one token; "" presents none. It is asked
// once per dial, never per call. A token longer than MaxTokenSize fails
// that dial with an error. nil goes back to SetToken's token. (A node
// calls each of its worker processes with the token of the worker's job.)
func (p *Pool) SetTokenFunc(tokenFor func(addr string) string) {
	p.mu.Lock()
	p.tokenFor = tokenFor
	p.mu.Unlock()
}

// SetRoute makes calls to addr dial via instead (a driver reaches its
// node's TCP address over the node's Unix socket, "unix:///path", while
// the TCP address stays the node's name in everything it sends); "" for
// via removes the route. Connections already open are kept.
func (p *Pool) SetRoute(addr, via string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if via == "" {
		delete(p.routes, addr)
		return
	}
	if p.routes == nil {
		p.routes = make(map[string]string)
	}
	p.routes[addr] = via
}

// Call is Client.Call on the pooled client for addr ("host:port", or a
// Unix socket as UnixPrefix and its path),
// dialing it first if needed. A dial failure is a transport error naming
// method and addr; after Close it returns a transport error wrapping
// ErrClosed.
func (p *Pool) Call(ctx context.Context, addr, method string, req, resp any) error {
	c, err := p.client(ctx, addr)
	if err != nil {
		return &callError{method: method, addr: addr, err: err, transport: true}
	}
	return c.Call(ctx, method, req, resp)
}

// CallInto is Client.CallInto on the pooled client for addr, dialing it
// first if needed; dial failures are reported as for Call.
func (p *Pool) CallInto(ctx context.Context, addr, method string, req any, dst []byte) (int, error) {
	c, err := p.client(ctx, addr)
	if err != nil {
		return 0, &callError{method: method, addr: addr, err: err, transport: true}
	}
	return c.CallInto(ctx, method, req, dst)
}

func (p *Pool) client(ctx context.Context, addr string) (*Client, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	e := p.entries[addr]
	if e == nil {
		e = new(poolEntry)
		p.entries[addr] = e
	}
	dial, token, tokenFor, dialAddr := p.dial, p.token, p.tokenFor, addr
	if via, ok := p.routes[addr]; ok {
		dialAddr = via
	}
	p.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client != nil && !e.client.Closed() {
		if e.client.reuse(PoolIdleTimeout) {
			return e.client, nil
		}
		e.client.Close()
	}
	if tokenFor != nil {
		token = tokenFor(addr)
		if err := checkToken(token); err != nil {
			return nil, err
		}
	}
	dctx := ctx
	if p.dialTimeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, p.dialTimeout)
		defer cancel()
	}
	conn, err := dialConn(dctx, dial, dialAddr, p.preamble, p.version, token)
	if err != nil {
		return nil, err
	}
	c := newClient(conn, addr, p.version)

	// Close may have run while we dialed; do not leak the new client.
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		c.Close()
		return nil, ErrClosed
	}
	e.client = c
	return c, nil
}

// Close closes every pooled client; pending calls on them fail with
// transport errors and later Calls fail with ErrClosed.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	entries := p.entries
	p.entries = make(map[string]*poolEntry)
	p.mu.Unlock()
	for _, e := range entries {
		e.mu.Lock()
		if e.client != nil {
			e.client.Close()
		}
		e.mu.Unlock()
	}
}
