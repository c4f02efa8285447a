package rpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Client multiplexes concurrent calls over one connection. One reader
// goroutine per Client routes responses to the waiting callers by sequence
// number; callers write their own requests. A Client is safe for concurrent
// use. Once the connection fails or Close is called the Client is dead:
// every pending and later call fails with a transport error, and the
// caller (or Pool) must dial a new one.
type Client struct {
	conn   net.Conn
	addr   string // peer, for error messages
	w      *frameWriter
	closed atomic.Bool

	mu       sync.Mutex
	seq      uint64
	pending  map[uint64]*call
	closeErr error // set once; non-nil means no new calls are admitted
}

// call is a pending request. done is buffered so the reader never blocks
// on a caller that gave up; calls are pooled to keep the channel
// allocation off the per-call path.
type call struct {
	done chan struct{}
	resp Frame
	err  error
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func putCall(cl *call) {
	cl.resp, cl.err = Frame{}, nil
	callPool.Put(cl)
}

// Dial connects to addr on network ("tcp", "unix", ...), writes preamble
// (nil for none; nodeup node ports expect []byte{0x01}) and returns a
// Client for the connection. ctx bounds the connect and the preamble
// write. Errors are transport errors naming addr.
func Dial(ctx context.Context, network, addr string, preamble []byte) (*Client, error) {
	conn, err := dialConn(ctx, network, addr, preamble)
	if err != nil {
		return nil, &callError{addr: addr, err: err, transport: true}
	}
	return newClient(conn, addr), nil
}

func dialConn(ctx context.Context, network, addr string, preamble []byte) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if len(preamble) > 0 {
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetWriteDeadline(dl)
		}
		if _, err := conn.Write(preamble); err != nil {
			conn.Close()
			return nil, fmt.Errorf("write preamble: %w", err)
		}
		_ = conn.SetWriteDeadline(time.Time{})
	}
	return conn, nil
}

// NewClient returns a Client speaking the protocol on an established conn
// (any preamble already sent). The Client owns conn and closes it.
func NewClient(conn net.Conn) *Client {
	return newClient(conn, remoteAddr(conn))
}

func newClient(conn net.Conn, addr string) *Client {
	c := &Client{
		conn:    conn,
		addr:    addr,
		w:       newFrameWriter(conn),
		pending: make(map[uint64]*call),
	}
	go c.readLoop()
	return c
}

// Call invokes method on the peer with req as argument and decodes the
// result into resp, which must be a pointer or nil to discard the result.
// It returns nil on success; *Error if the handler failed; a wrapped
// ctx.Err() if ctx ends first (the request may still run remotely); a
// transport error (see IsTransport) if the connection fails or the Client
// is closed; or a local error if req cannot be encoded, the request exceeds
// MaxFrameSize, or the result does not decode into resp.
//
// ctx bounds the wait for the answer, not the request write: a write stuck
// on a peer that stopped reading fails the whole connection after 30–60 s.
func (c *Client) Call(ctx context.Context, method string, req, resp any) error {
	if err := ctx.Err(); err != nil {
		return &callError{method: method, addr: c.addr, err: err}
	}
	buf, err := encodeBody(req)
	if err != nil {
		return &callError{method: method, addr: c.addr, err: fmt.Errorf("encode request: %w", err)}
	}

	cl := callPool.Get().(*call)
	c.mu.Lock()
	if c.closeErr != nil {
		err := c.closeErr
		c.mu.Unlock()
		putBuf(buf)
		putCall(cl)
		return &callError{method: method, addr: c.addr, err: err, transport: true}
	}
	c.seq++
	seq := c.seq
	c.pending[seq] = cl
	c.mu.Unlock()

	f := Frame{Seq: seq, Kind: KindRequest, Method: method, Body: buf.Bytes()}
	err = c.w.write(&f)
	putBuf(buf)
	if err != nil {
		if errors.Is(err, ErrFrameTooLarge) {
			// Nothing was written; the connection is fine.
			if c.forget(seq) {
				putCall(cl)
			}
			return &callError{method: method, addr: c.addr, err: err}
		}
		// The stream may hold a partial frame: kill the connection. That
		// fails cl along with every other pending call, below.
		c.shutdown(fmt.Errorf("%w: write: %w", ErrClosed, err))
	}

	select {
	case <-cl.done:
	case <-ctx.Done():
		if c.forget(seq) {
			putCall(cl)
			return &callError{method: method, addr: c.addr, err: ctx.Err()}
		}
		// The answer raced the cancellation and is already on its way; use
		// it rather than discard a completed call.
		<-cl.done
	}
	defer putCall(cl)
	if cl.err != nil {
		return &callError{method: method, addr: c.addr, err: cl.err, transport: true}
	}
	if cl.resp.Kind == KindError {
		return &Error{Code: cl.resp.Code, Message: cl.resp.Error}
	}
	if resp != nil {
		if err := decodeBody(cl.resp.Body, resp); err != nil {
			return &callError{method: method, addr: c.addr, err: fmt.Errorf("decode response: %w", err)}
		}
	}
	return nil
}

// forget removes a pending call, reporting whether it was still pending
// (false means the reader or shutdown has taken it and will signal done).
func (c *Client) forget(seq uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[seq]; !ok {
		return false
	}
	delete(c.pending, seq)
	return true
}

// readLoop routes responses to pending calls until the connection fails.
func (c *Client) readLoop() {
	br := bufio.NewReaderSize(c.conn, bufSize)
	for {
		var f Frame
		if err := readFrame(br, &f); err != nil {
			c.shutdown(fmt.Errorf("%w: %w", ErrClosed, err))
			return
		}
		if f.Kind == KindRequest {
			c.shutdown(fmt.Errorf("%w: protocol error: peer sent a request frame (seq %d)", ErrClosed, f.Seq))
			return
		}
		c.mu.Lock()
		cl := c.pending[f.Seq]
		delete(c.pending, f.Seq)
		c.mu.Unlock()
		if cl == nil {
			continue // the caller gave up (context ended)
		}
		cl.resp = f
		cl.done <- struct{}{}
	}
}

// shutdown marks the client dead with err (the first error wins), closes
// the connection and fails every pending call.
func (c *Client) shutdown(err error) {
	c.mu.Lock()
	if c.closeErr != nil {
		c.mu.Unlock()
		return
	}
	c.closeErr = err
	c.closed.Store(true)
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()

	c.conn.Close()
	for _, cl := range pending {
		cl.err = err
		cl.done <- struct{}{}
	}
}

// Close closes the connection; pending and later calls fail with a
// transport error wrapping ErrClosed. It returns nil, also when already
// closed.
func (c *Client) Close() error {
	c.shutdown(ErrClosed)
	return nil
}

// Closed reports whether the client is dead, by Close or by connection
// failure.
func (c *Client) Closed() bool {
	return c.closed.Load()
}
