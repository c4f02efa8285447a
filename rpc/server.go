package rpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/internal/mpsafe"
	"github.com/nodeup/nodeup/internal/ratelog"
)

// Handler serves one method. body is the msgpack-encoded argument (0xc0 for
// a nil argument); the handler owns it and may retain it. The returned value
// is msgpack-encoded as the result. A returned *Error (possibly wrapped)
// keeps its Code across the wire; any other error is sent with the code
// CodeTimeout when it wraps context.DeadlineExceeded, CodeCancelled when it
// wraps context.Canceled, else with an empty Code. ctx is cancelled when
// the connection closes.
type Handler func(ctx context.Context, body []byte) (any, error)

// Server dispatches requests arriving on connections to registered
// handlers. Requests run concurrently, each on its own (reused) goroutine;
// responses are written in completion order.
type Server struct {
	logger  *slog.Logger
	version uint16 // protocol version exchanged in every connection's hello

	regMu    sync.Mutex                       // serialises Register and SetAuth
	handlers atomic.Pointer[map[string]entry] // copy-on-write: lookups take no lock
	auth     atomic.Pointer[Auth]             // nil: every call allowed
	observe  atomic.Pointer[Observer]         // nil: nothing observed

	// Request goroutines are reused: a new request goes to an idle worker
	// if one is waiting on work, else to a new goroutine. Reuse keeps
	// goroutine creation and stack growth (msgpack decoding grows a fresh
	// 2 KiB stack several times) off the per-call path.
	work chan workItem // unbuffered: a send succeeds only to an idle worker
	idle atomic.Int32  // workers waiting on work
	done chan struct{} // closed by Close; stops idle workers

	// inflight counts running handlers and stopping is set by Close, so
	// that Drain can wait for them and no handler starts after Close.
	inflight atomic.Int64
	stopping atomic.Bool

	warnings *ratelog.Limiter // rate-limits the warnings peers can trigger

	mu        sync.Mutex
	closed    bool
	limits    Limits
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
}

// NewServer returns a server with no methods that speaks protocol version
// (wire.ProtocolVersion in nodeup) and refuses clients of any other (see
// HelloSize). logger receives connection and handler-panic events; nil
// means slog.Default().
func NewServer(logger *slog.Logger, version uint16) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{
		logger:    logger,
		version:   version,
		work:      make(chan workItem),
		done:      make(chan struct{}),
		warnings:  ratelog.New(warnInterval),
		limits:    DefaultLimits(),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
	}
	s.handlers.Store(&map[string]entry{})
	return s
}

// Observer is told of every call a server handled to a registered method:
// its name, how long the handler took (the answer's writing not included)
// and its error code ("" for success). It runs on the request's goroutine,
// so it must be quick; the methods are the registered ones only, so a
// metric keyed by method stays bounded whatever peers send.
type Observer func(method string, took time.Duration, code string)

// SetObserver makes o observe every handled call from now on (nil: none).
func (s *Server) SetObserver(o Observer) {
	if o == nil {
		s.observe.Store(nil)
		return
	}
	s.observe.Store(&o)
}

// Register installs h for method, conventionally "Service.Method". It may
// be called while serving. It panics if method is already registered or h
// is nil, since that is a programming error found at startup.
func (s *Server) Register(method string, h Handler) {
	if h == nil {
		panic("rpc: nil handler for " + method)
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	old := *s.handlers.Load()
	if _, dup := old[method]; dup {
		panic("rpc: duplicate registration of " + method)
	}
	m := make(map[string]entry, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[method] = s.entryFor(method, h)
	s.handlers.Store(&m)
}

// Handle registers a typed handler for method: the request body is decoded
// into a fresh Req (a nil or empty body leaves it zero), and *Resp is
// encoded as the result. A body that does not decode yields an error
// response with Code "bad_request".
func Handle[Req, Resp any](s *Server, method string, fn func(ctx context.Context, req *Req) (*Resp, error)) {
	s.Register(method, func(ctx context.Context, body []byte) (any, error) {
		req := new(Req)
		if len(body) > 0 {
			// The read loop has checked the body (checkBody).
			if err := mpsafe.Decode(body, req); err != nil {
				return nil, &Error{Code: CodeBadRequest, Message: fmt.Sprintf("decode %s request: %v", method, err)}
			}
		}
		resp, err := fn(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp, nil
	})
}

// Serve accepts connections on l and serves each with ServeConn in its own
// goroutine. It returns ErrClosed after Close, or the listener's error.
// Temporary accept errors (such as running out of file descriptors) are
// retried with backoff.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrClosed
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logger.Warn("rpc accept failed; retrying", "addr", l.Addr().String(), "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		go s.ServeConn(conn)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops every Serve loop and closes all live connections; handlers
// still running see their context cancelled. Close is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.stopping.Store(true)
	close(s.done)
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
}

// Drain waits, after Close, until no handler is running or timeout passes,
// and reports whether none is. Closing cancelled the handlers' contexts and
// no handler starts after Close, so a node that drains before removing its
// files knows no late request is still writing them.
func (s *Server) Drain(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for s.inflight.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// serverConn is the per-connection state shared by the read loop and the
// handler goroutines.
type serverConn struct {
	s      *Server
	conn   net.Conn
	w      *frameWriter
	remote string
	limits Limits
	// principal is who the connection is (Auth); nil when the server
	// checks nothing. hint ends refusals.
	principal *Principal
	hint      string

	// pending and pendingBytes count the connection's running requests
	// and the payload bytes they hold.
	pending      atomic.Int64
	pendingBytes atomic.Int64
}

// ServeConn reads requests from conn until it closes, sends a malformed
// frame, stalls inside a frame or idles past the limits (see Limits), then
// closes it. It blocks until then; handlers that are still running have
// their context cancelled and their responses are dropped. A connection
// beyond Limits.MaxConns is closed at once.
func (s *Server) ServeConn(conn net.Conn) {
	limits, err := s.admit(conn)
	if err != nil {
		if !errors.Is(err, ErrClosed) {
			s.warn("rpc refusing connection", "remote", remoteAddr(conn), "err", err)
		}
		conn.Close()
		return
	}
	sc := &serverConn{s: s, conn: conn, w: newFrameWriter(conn), remote: remoteAddr(conn), limits: limits}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		conn.Close()
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
	}()
	sc.logReadError(sc.readLoop(ctx))
}

// admit registers conn and returns the limits it is served under, or an
// error wrapping ErrClosed or ErrTooManyConns.
func (s *Server) admit(conn net.Conn) (Limits, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return Limits{}, ErrClosed
	case len(s.conns) >= s.limits.MaxConns:
		return Limits{}, fmt.Errorf("%w: %d open", ErrTooManyConns, len(s.conns))
	}
	s.conns[conn] = struct{}{}
	return s.limits, nil
}

// readLoop reads requests and dispatches them until the connection fails.
// Its read buffer is small (readBufSize): a payload that does not fit is
// read into a buffer of its own, grown only as its bytes arrive. It never
// stops reading while handlers run, so that it sees the peer go away and
// cancels them; a request over the connection's limits is refused.
func (sc *serverConn) readLoop(ctx context.Context) error {
	br := bufio.NewReaderSize(sc.conn, readBufSize)
	token, err := sc.hello(br)
	if err != nil {
		return err
	}
	if a := sc.s.auth.Load(); a != nil && a.Authenticate != nil {
		p := a.Authenticate(sc.conn, token)
		sc.principal, sc.hint = &p, a.Hint
	}
	for {
		if err := sc.awaitFrame(br); err != nil {
			return err
		}
		f, h, refused, err := sc.readRequest(br)
		switch {
		case err != nil:
			return err
		case refused != nil:
			if err := sc.refuse(&f, refused); err != nil {
				return err
			}
		default:
			sc.pending.Add(1)
			sc.pendingBytes.Add(int64(len(f.Body)))
			sc.s.dispatch(workItem{sc: sc, ctx: ctx, req: f, h: h})
		}
	}
}

// overloaded returns the error refusing f, whose body holds size bytes,
// if the connection already runs Limits.MaxPending requests or their
// bodies and f's would exceed Limits.MaxPendingBytes; else nil. A request
// alone on its connection is never refused for its size.
func (sc *serverConn) overloaded(f *Frame, size int) *Error {
	n, held := sc.pending.Load(), sc.pendingBytes.Load()
	switch {
	case n >= int64(sc.limits.MaxPending):
		return &Error{Code: CodeOverloaded, Message: fmt.Sprintf(
			"rpc: %s refused: %d requests already running on this connection (limit %d)", f.Method, n, sc.limits.MaxPending)}
	case n > 0 && held+int64(size) > int64(sc.limits.MaxPendingBytes):
		return &Error{Code: CodeOverloaded, Message: fmt.Sprintf(
			"rpc: %s refused: its %d-byte body and the %d bytes held by requests running on this connection exceed %d",
			f.Method, size, held, sc.limits.MaxPendingBytes)}
	}
	return nil
}

// refuse answers f with e from the read loop, and logs it (rate-limited).
func (sc *serverConn) refuse(f *Frame, e *Error) error {
	sc.s.warn("rpc refusing request", "remote", sc.remote, "method", f.Method, "seq", f.Seq, "err", e.Message)
	return sc.w.write(&Frame{Seq: f.Seq, Kind: KindError, Code: e.Code, Error: e.Message}, nil)
}

// finished records the end of a request whose payload held n bytes.
func (sc *serverConn) finished(n int) {
	sc.pendingBytes.Add(-int64(n))
	sc.pending.Add(-1)
}

// awaitFrame waits for the first byte of the next frame. It gives up with
// errIdle once Limits.IdleTimeout passes with nothing received and no
// request running (a running request restarts the wait).
func (sc *serverConn) awaitFrame(br *bufio.Reader) error {
	for br.Buffered() == 0 {
		_ = sc.conn.SetReadDeadline(time.Now().Add(sc.limits.IdleTimeout))
		_, err := br.Peek(1)
		switch {
		case err == nil:
			return nil
		case !isTimeout(err):
			return err
		case sc.pending.Load() == 0:
			return fmt.Errorf("%w: nothing received for %s", errIdle, sc.limits.IdleTimeout)
		}
	}
	return nil
}

// readRequest reads one request frame, which must arrive within
// Limits.FrameTimeout of its first byte plus a second per minFrameRate
// bytes of payload, and returns it with its method's handler (nil when
// nobody serves it). It skips, unread, the body of a request that it
// refuses (returned as refused: overloaded, or not allowed to the
// connection's principal) or whose method nobody serves; any other body
// must be one well-formed msgpack value (mpsafe.Check), else the frame is
// malformed.
func (sc *serverConn) readRequest(br *bufio.Reader) (f Frame, h Handler, refused *Error, err error) {
	start := time.Now()
	_ = sc.conn.SetReadDeadline(start.Add(sc.limits.FrameTimeout))
	rest, err := readFrameHead(br, &f, sc.limits.MaxRequestSize)
	if err == nil && f.Kind != KindRequest {
		err = fmt.Errorf("%w: %s frame (seq %d) sent to a server", ErrMalformedFrame, f.Kind, f.Seq)
	}
	if err != nil {
		return f, nil, nil, err
	}
	e, ok := (*sc.s.handlers.Load())[f.Method]
	if ok {
		refused = denied(sc.principal, f.Method, &e, sc.hint)
	}
	if refused == nil {
		refused = sc.overloaded(&f, rest+len(f.Body))
	}
	if refused != nil {
		f.Body = nil // set when the header filled the read buffer
		_, err = br.Discard(rest)
		return f, nil, refused, unexpectedEOF(err)
	}
	if rest == 0 {
		return f, e.h, nil, sc.checkBody(&f)
	}
	if slack := time.Duration(rest) * time.Second / minFrameRate; slack > 0 {
		_ = sc.conn.SetReadDeadline(start.Add(sc.limits.FrameTimeout + slack))
	}
	if !ok {
		_, err = br.Discard(rest)
		return f, nil, nil, unexpectedEOF(err)
	}
	if f.Body, err = readPayload(br, rest); err != nil {
		return f, nil, nil, err
	}
	return f, e.h, nil, sc.checkBody(&f)
}

// checkBody returns an error wrapping ErrMalformedFrame if f's body is
// neither empty nor one well-formed msgpack value. Every body a handler
// gets has passed it, so Handle decodes without checking again.
func (sc *serverConn) checkBody(f *Frame) error {
	if len(f.Body) == 0 {
		return nil
	}
	if err := mpsafe.Check(f.Body); err != nil {
		return fmt.Errorf("%w: %s request body (seq %d): %w", ErrMalformedFrame, f.Method, f.Seq, err)
	}
	return nil
}

// maxIdleWorkers bounds the goroutines kept waiting for requests.
const maxIdleWorkers = 256

// workItem is one request for a worker.
type workItem struct {
	sc  *serverConn
	ctx context.Context
	req Frame
	h   Handler // nil: nobody serves req.Method
}

func (s *Server) dispatch(w workItem) {
	select {
	case s.work <- w:
	default:
		go s.worker(w)
	}
}

// worker handles w, then serves further requests until it would exceed
// maxIdleWorkers idle ones or the server closes.
func (s *Server) worker(w workItem) {
	for {
		if s.inflight.Add(1); !s.stopping.Load() {
			w.sc.handle(w.ctx, w.req, w.h)
		}
		s.inflight.Add(-1)
		w.sc.finished(len(w.req.Body))
		w = workItem{} // hold no request memory while idle
		if s.idle.Add(1) > maxIdleWorkers {
			s.idle.Add(-1)
			return
		}
		select {
		case w = <-s.work:
			s.idle.Add(-1)
		case <-s.done:
			s.idle.Add(-1)
			return
		}
	}
}

// logReadError logs why the read loop ended: a warning (rate-limited) for
// what a broken or hostile peer causes, debug for an ordinary close.
func (sc *serverConn) logReadError(err error) {
	var ve *VersionError
	switch {
	case errors.As(err, &ve):
		sc.s.warn("rpc refusing connection: protocol version", "remote", sc.remote, "err", err)
	case errors.Is(err, ErrMalformedFrame), errors.Is(err, ErrFrameTooLarge):
		sc.s.warn("rpc closing connection: bad frame", "remote", sc.remote, "err", err)
	case isTimeout(err), errors.Is(err, io.ErrUnexpectedEOF):
		sc.s.warn("rpc closing connection: frame not completed", "remote", sc.remote, "err", err,
			"frame_timeout", sc.limits.FrameTimeout)
	case errors.Is(err, errIdle):
		sc.s.logger.Debug("rpc closing idle connection", "remote", sc.remote, "err", err)
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, ErrClosed):
		sc.s.logger.Debug("rpc connection closed", "remote", sc.remote)
	default:
		sc.s.logger.Debug("rpc connection read failed", "remote", sc.remote, "err", err)
	}
}

// handle runs one request with h (nil when nobody serves its method) and
// writes its response.
func (sc *serverConn) handle(ctx context.Context, req Frame, h Handler) {
	resp := Frame{Seq: req.Seq, Kind: KindResponse}
	var tail []byte
	if h == nil {
		resp.Kind, resp.Code = KindError, CodeUnknownMethod
		resp.Error = fmt.Sprintf("rpc: unknown method %q", req.Method)
	} else {
		start := time.Now()
		b, bulk, err := sc.invoke(ctx, h, &req)
		if o := sc.s.observe.Load(); o != nil {
			code := ""
			if err != nil {
				code, _ = errorCodeMessage(err)
			}
			(*o)(req.Method, time.Since(start), code)
		}
		switch {
		case err != nil:
			resp.Kind = KindError
			resp.Code, resp.Error = errorCodeMessage(err)
		case bulk != nil:
			defer bulk.release()
			var hdr [5]byte
			resp.Body = appendBinHeader(hdr[:0], len(bulk.Data))
			tail = bulk.Data
		default:
			resp.Body = b.Bytes()
			defer putBuf(b)
		}
	}
	err := sc.w.write(&resp, tail)
	if errors.Is(err, ErrFrameTooLarge) {
		resp = Frame{Seq: req.Seq, Kind: KindError, Code: CodeInternal, Error: err.Error()}
		err = sc.w.write(&resp, nil)
	}
	if err != nil {
		sc.s.logger.Debug("rpc response write failed; closing connection", "remote", sc.remote, "method", req.Method, "err", err)
		sc.conn.Close()
	}
}

// invoke calls h and encodes its result (a non-nil *Bulk is returned as it
// is, to be written without encoding), turning a panic in either into an
// internal error so that one bad handler cannot take the process down.
func (sc *serverConn) invoke(ctx context.Context, h Handler, req *Frame) (b *bytes.Buffer, bulk *Bulk, err error) {
	defer func() {
		if r := recover(); r != nil {
			sc.s.logger.Error("rpc handler panicked", "method", req.Method, "remote", sc.remote, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			b, bulk, err = nil, nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("panic in %s: %v", req.Method, r)}
		}
	}()
	result, err := h(ctx, req.Body)
	if err != nil {
		return nil, nil, err
	}
	if bulk, ok := result.(*Bulk); ok && bulk != nil {
		return nil, bulk, nil
	}
	b, err = encodeBody(result)
	if err != nil {
		return nil, nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("encode %s result: %v", req.Method, err)}
	}
	return b, nil, nil
}

// errorCodeMessage maps a handler error to its wire code and message.
func errorCodeMessage(err error) (code, msg string) {
	var re *Error
	if errors.As(err, &re) {
		if re == nil { // a typed nil *Error would panic below
			return CodeInternal, "handler returned a nil *rpc.Error"
		}
		return re.Code, re.Message
	}
	// A deadline or cancellation is a category of its own, whichever
	// handler hit it, so callers need not read the text.
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout, err.Error()
	case errors.Is(err, context.Canceled):
		return CodeCancelled, err.Error()
	}
	return "", err.Error()
}

func remoteAddr(conn net.Conn) string {
	if a := conn.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}
