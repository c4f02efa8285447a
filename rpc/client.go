package rpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
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
	conn    net.Conn
	addr    string // peer, for error messages
	version uint16 // protocol version; the server's hello must match it
	w       *frameWriter
	closed  atomic.Bool
	// lastCall is when the latest call started, in Unix nanoseconds.
	lastCall atomic.Int64

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
	err  error // transport error

	// into is set for CallInto: the reader copies a bin result straight
	// into dst and records its length in n, or why it could not in bad.
	into bool
	dst  []byte
	n    int
	bad  error
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func putCall(cl *call) {
	cl.resp, cl.err = Frame{}, nil
	cl.into, cl.dst, cl.n, cl.bad = false, nil, 0, nil
	callPool.Put(cl)
}

// Dial connects to addr on network ("tcp", "unix", ...), writes preamble
// (nil for none; nodeup node ports expect wire.PreambleRPC) and the hello of
// protocol version, with the token of a WithToken option if one is given,
// and returns a Client for the connection. ctx bounds the connect and those
// writes. Errors are transport errors naming addr (also for a token over
// MaxTokenSize); a server of another version fails the Client's calls with
// a *VersionError.
func Dial(ctx context.Context, network, addr string, preamble []byte, version uint16, opts ...DialOption) (*Client, error) {
	var o dialOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkToken(o.token); err != nil {
		return nil, &callError{addr: addr, err: err, transport: true}
	}
	var d net.Dialer
	dial := o.dial
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}
	}
	conn, err := dialConn(ctx, dial, addr, preamble, version, o.token)
	if err != nil {
		return nil, &callError{addr: addr, err: err, transport: true}
	}
	return newClient(conn, addr, version), nil
}

// DialOption changes how Dial connects.
type DialOption func(*dialOptions)

type dialOptions struct {
	token string
	dial  DialFunc
}

// WithDialer makes Dial connect with dial (a TLS dial, say) instead of a
// plain dial of network; the preamble and hello go over what it returns.
func WithDialer(dial DialFunc) DialOption {
	return func(o *dialOptions) { o.dial = dial }
}

// WithToken makes the connection present token in its hello (see
// HelloSize), for the server's Auth to resolve; "" presents none.
func WithToken(token string) DialOption {
	return func(o *dialOptions) { o.token = token }
}

// checkToken refuses a token the hello cannot carry.
func checkToken(token string) error {
	if len(token) > MaxTokenSize {
		return fmt.Errorf("token of %d bytes: the most a hello carries is %d", len(token), MaxTokenSize)
	}
	return nil
}

// DialFunc connects to an address ("host:port" for TCP, or UnixPrefix and
// a socket path); ctx bounds the connect.
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// UnixPrefix starts an address that names a Unix socket by its path:
// "unix:///var/lib/nodeup/nodeup.sock". Pools and PlainDial dial such an
// address over the socket, any other over TCP.
const UnixPrefix = "unix://"

// PlainDial is the DialFunc a Pool uses unless SetDialer replaced it: a
// Unix socket for an address starting with UnixPrefix, else TCP.
func PlainDial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	if path, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		return d.DialContext(ctx, "unix", path)
	}
	return d.DialContext(ctx, "tcp", addr)
}

// dialConn connects and writes preamble and the hello (carrying token
// unless it is empty) in one write; the server's hello is read by the
// client's reader, so a call costs no extra round trip.
func dialConn(ctx context.Context, dial DialFunc, addr string, preamble []byte, version uint16, token string) (net.Conn, error) {
	conn, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetWriteDeadline(dl)
	}
	if _, err := conn.Write(AppendHelloToken(append([]byte(nil), preamble...), version, token)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("write preamble and hello: %w", err)
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// NewClient returns a Client speaking protocol version on an established
// conn (any preamble already sent): it writes the hello, blocking until
// the peer takes it, and returns the write's error. The Client owns conn
// and closes it, also on error.
func NewClient(conn net.Conn, version uint16) (*Client, error) {
	if _, err := conn.Write(AppendHello(nil, version)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("write hello: %w", err)
	}
	return newClient(conn, remoteAddr(conn), version), nil
}

func newClient(conn net.Conn, addr string, version uint16) *Client {
	c := &Client{
		conn:    conn,
		addr:    addr,
		version: version,
		w:       newFrameWriter(conn),
		pending: make(map[uint64]*call),
	}
	c.lastCall.Store(time.Now().UnixNano())
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
	cl, err := c.call(ctx, method, req, nil, false)
	if err != nil {
		return err
	}
	defer putCall(cl)
	if resp != nil {
		if err := decodeBody(cl.resp.Body, resp); err != nil {
			return &callError{method: method, addr: c.addr, err: fmt.Errorf("decode response: %w", err)}
		}
	}
	return nil
}

// CallInto is Call for a method whose result is a msgpack bin, such as a
// handler returning *Bulk: the client's reader copies the bin's bytes from
// the connection straight into dst, with no intermediate buffer, and
// CallInto returns their count n <= len(dst). Errors are Call's; a result
// that is not a single bin, or is longer than dst, is a local error (the
// connection stays usable) and leaves dst's contents unspecified.
//
// dst is not written after CallInto returns. Once the result has begun to
// arrive, CallInto therefore waits for the rest of it even if ctx ends (at
// most one frame of MaxFrameSize bytes, unless the connection stalls).
func (c *Client) CallInto(ctx context.Context, method string, req any, dst []byte) (n int, err error) {
	cl, err := c.call(ctx, method, req, dst, true)
	if err != nil {
		return 0, err
	}
	defer putCall(cl)
	if cl.bad != nil {
		return 0, &callError{method: method, addr: c.addr, err: fmt.Errorf("decode response: %w", cl.bad)}
	}
	return cl.n, nil
}

// call sends the request and waits for its answer. On success the caller
// owns cl (a response frame, with the bin already in dst when into is set)
// and must putCall it; errors are the *Error of an error response or a
// callError.
func (c *Client) call(ctx context.Context, method string, req any, dst []byte, into bool) (*call, error) {
	if err := ctx.Err(); err != nil {
		return nil, &callError{method: method, addr: c.addr, err: err}
	}
	buf, err := encodeBody(req)
	if err != nil {
		return nil, &callError{method: method, addr: c.addr, err: fmt.Errorf("encode request: %w", err)}
	}

	cl := callPool.Get().(*call)
	cl.into, cl.dst = into, dst
	c.mu.Lock()
	if c.closeErr != nil {
		err := c.closeErr
		c.mu.Unlock()
		putBuf(buf)
		putCall(cl)
		return nil, &callError{method: method, addr: c.addr, err: err, transport: true}
	}
	c.seq++
	seq := c.seq
	c.pending[seq] = cl
	c.mu.Unlock()
	c.lastCall.Store(time.Now().UnixNano())

	f := Frame{Seq: seq, Kind: KindRequest, Method: method, Body: buf.Bytes()}
	err = c.w.write(&f, nil)
	putBuf(buf)
	if err != nil {
		if errors.Is(err, ErrFrameTooLarge) {
			// Nothing was written; the connection is fine.
			if c.forget(seq) {
				putCall(cl)
			}
			return nil, &callError{method: method, addr: c.addr, err: err}
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
			return nil, &callError{method: method, addr: c.addr, err: ctx.Err()}
		}
		// The answer raced the cancellation and is already on its way
		// (for CallInto, perhaps being copied into dst): wait for it rather
		// than discard a completed call.
		<-cl.done
	}
	if cl.err != nil {
		err := &callError{method: method, addr: c.addr, err: cl.err, transport: true}
		putCall(cl)
		return nil, err
	}
	if cl.resp.Kind == KindError {
		err := &Error{Code: cl.resp.Code, Message: cl.resp.Error}
		putCall(cl)
		return nil, err
	}
	return cl, nil
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
// A response to a CallInto is copied from the connection straight into the
// caller's buffer; the call is taken off the pending set before that, so a
// caller whose context ends meanwhile waits for the copy to finish.
func (c *Client) readLoop() {
	br := bufio.NewReaderSize(c.conn, bufSize)
	if err := readHello(br, c.addr, c.version); err != nil {
		c.shutdown(fmt.Errorf("%w: %w", ErrClosed, err))
		return
	}
	for {
		var f Frame
		rest, err := readFrameHead(br, &f, MaxFrameSize)
		if err != nil {
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
		switch {
		case cl != nil && cl.into && f.Kind == KindResponse:
			body := br
			if f.Body != nil { // the header filled the read buffer; the body came with it
				body, rest = bufio.NewReader(bytes.NewReader(f.Body)), len(f.Body)
				f.Body = nil
			}
			cl.n, cl.bad, err = readBulk(body, rest, cl.dst)
		case cl == nil && rest > 0:
			// A response nobody waits for any more (the caller gave up) is
			// skipped, to keep the stream in step.
			_, err = br.Discard(rest)
			err = unexpectedEOF(err)
		case rest > 0:
			f.Body, err = readPayload(br, rest)
		}
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrClosed, err)
			if cl != nil {
				cl.err = err
				cl.done <- struct{}{}
			}
			c.shutdown(err)
			return
		}
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

// reuse reports whether the client may take another call: false when it
// has no call pending and started none for at least idle. When true it
// counts as a call started now, so that another check does not find it
// idle before the caller gets to use it.
func (c *Client) reuse(idle time.Duration) bool {
	now := time.Now()
	if now.Sub(time.Unix(0, c.lastCall.Load())) >= idle {
		c.mu.Lock()
		quiet := len(c.pending) == 0
		c.mu.Unlock()
		if quiet {
			return false
		}
	}
	c.lastCall.Store(now.UnixNano())
	return true
}

// Closed reports whether the client is dead, by Close or by connection
// failure.
func (c *Client) Closed() bool {
	return c.closed.Load()
}
