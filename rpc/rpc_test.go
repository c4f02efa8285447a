package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type echoReq struct {
	N    int
	Text string
}

type echoResp struct {
	N    int
	Text string
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testVersion is the protocol version the tests' clients and servers speak.
const testVersion uint16 = 9

// helloed returns data after the hello of testVersion, as a client sends
// it on a fresh connection.
func helloed(data []byte) []byte { return append(AppendHello(nil, testVersion), data...) }

// newTestServer returns a server with the methods the tests use. release
// gates Test.Block.
func newTestServer(release <-chan struct{}) *Server {
	s := NewServer(quietLogger(), testVersion)
	Handle(s, "Test.Echo", func(ctx context.Context, req *echoReq) (*echoResp, error) {
		return &echoResp{N: req.N * 2, Text: req.Text}, nil
	})
	Handle(s, "Test.Fail", func(ctx context.Context, req *echoReq) (*echoResp, error) {
		return nil, fmt.Errorf("wrapped: %w", &Error{Code: "not_found", Message: "no such " + req.Text})
	})
	Handle(s, "Test.PlainFail", func(ctx context.Context, req *echoReq) (*echoResp, error) {
		return nil, errors.New("plain failure")
	})
	Handle(s, "Test.Panic", func(ctx context.Context, req *echoReq) (*echoResp, error) {
		panic("kaboom")
	})
	Handle(s, "Test.Block", func(ctx context.Context, req *echoReq) (*echoResp, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &echoResp{N: req.N}, nil
	})
	s.Register("Test.Raw", func(ctx context.Context, body []byte) (any, error) {
		return len(body), nil
	})
	return s
}

// serveTCP starts s on a loopback port and returns its address.
func serveTCP(t testing.TB, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	})
	return l.Addr().String()
}

func dialTCP(t testing.TB, addr string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), "tcp", addr, nil, testVersion)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func pipeClient(t *testing.T, s *Server) *Client {
	t.Helper()
	cc, sc := net.Pipe()
	go s.ServeConn(sc)
	c, err := NewClient(cc, testVersion)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func checkEcho(t *testing.T, c *Client, n int) {
	t.Helper()
	var resp echoResp
	if err := c.Call(context.Background(), "Test.Echo", &echoReq{N: n, Text: "hi"}, &resp); err != nil {
		t.Fatalf("Echo(%d): %v", n, err)
	}
	if resp.N != 2*n || resp.Text != "hi" {
		t.Fatalf("Echo(%d) = %+v", n, resp)
	}
}

func TestRoundTripPipe(t *testing.T) {
	t.Parallel()
	c := pipeClient(t, newTestServer(nil))
	checkEcho(t, c, 21)
	// A nil request decodes as the zero value; a nil resp discards.
	if err := c.Call(context.Background(), "Test.Echo", nil, nil); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.Call(context.Background(), "Test.Raw", []byte("abc"), &n); err != nil || n != 5 {
		t.Fatalf("Raw = %d, %v; want 5 (bin8 header + 3 bytes)", n, err)
	}
}

func TestRoundTripTCP(t *testing.T) {
	t.Parallel()
	c := dialTCP(t, serveTCP(t, newTestServer(nil)))
	checkEcho(t, c, 21)
}

func TestRoundTripUnixWithPreamble(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rpc.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := newTestServer(nil)
	defer s.Close()
	go func() {
		// Mimic the node port multiplexer: consume the first byte.
		conn, err := l.Accept()
		if err != nil {
			return
		}
		var b [1]byte
		if _, err := io.ReadFull(conn, b[:]); err != nil || b[0] != 0x01 {
			t.Errorf("preamble = %v, %v", b, err)
			conn.Close()
			return
		}
		s.ServeConn(conn)
	}()
	c, err := Dial(context.Background(), "unix", path, []byte{0x01}, testVersion)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkEcho(t, c, 5)
}

func TestConcurrentCalls(t *testing.T) {
	t.Parallel()
	c := dialTCP(t, serveTCP(t, newTestServer(nil)))
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp echoResp
			text := fmt.Sprint("call-", i)
			if err := c.Call(context.Background(), "Test.Echo", &echoReq{N: i, Text: text}, &resp); err != nil {
				errs <- err
				return
			}
			if resp.N != 2*i || resp.Text != text {
				errs <- fmt.Errorf("call %d got %+v", i, resp)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestContextDeadline(t *testing.T) {
	release := make(chan struct{})
	c := dialTCP(t, serveTCP(t, newTestServer(release)))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Call(ctx, "Test.Block", &echoReq{N: 1}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if IsTransport(err) {
		t.Fatalf("deadline reported as transport error: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("call returned after %v", el)
	}
	if !strings.Contains(err.Error(), "Test.Block") {
		t.Fatalf("error does not name the method: %v", err)
	}
	close(release)
	// The late response to the abandoned call is dropped; the client works.
	checkEcho(t, c, 3)
	var resp echoResp
	if err := c.Call(context.Background(), "Test.Block", &echoReq{N: 9}, &resp); err != nil || resp.N != 9 {
		t.Fatalf("Block after release = %+v, %v", resp, err)
	}

	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := c.Call(cctx, "Test.Echo", &echoReq{}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: got %v", err)
	}
}

func TestRemoteErrors(t *testing.T) {
	t.Parallel()
	c := dialTCP(t, serveTCP(t, newTestServer(nil)))
	ctx := context.Background()

	err := c.Call(ctx, "Test.Fail", &echoReq{Text: "widget"}, nil)
	var re *Error
	if !errors.As(err, &re) || re.Code != "not_found" || re.Message != "no such widget" {
		t.Fatalf("Fail: got %#v", err)
	}
	if IsTransport(err) {
		t.Fatal("remote error reported as transport error")
	}

	err = c.Call(ctx, "Test.PlainFail", &echoReq{}, nil)
	if !errors.As(err, &re) || re.Code != "" || re.Message != "plain failure" {
		t.Fatalf("PlainFail: got %#v", err)
	}

	err = c.Call(ctx, "No.Such", &echoReq{}, nil)
	if !errors.As(err, &re) || re.Code != CodeUnknownMethod || !strings.Contains(re.Message, "No.Such") {
		t.Fatalf("unknown method: got %#v", err)
	}

	err = c.Call(ctx, "Test.Echo", "not a struct", nil)
	if !errors.As(err, &re) || re.Code != CodeBadRequest {
		t.Fatalf("bad request: got %#v", err)
	}
	checkEcho(t, c, 1)
}

func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	c := dialTCP(t, serveTCP(t, newTestServer(nil)))
	err := c.Call(context.Background(), "Test.Panic", &echoReq{}, nil)
	var re *Error
	if !errors.As(err, &re) || re.Code != CodeInternal || !strings.Contains(re.Message, "kaboom") {
		t.Fatalf("got %#v", err)
	}
	checkEcho(t, c, 2)
}

func TestGarbageClosesOnlyThatConn(t *testing.T) {
	s := newTestServer(nil)
	addr := serveTCP(t, s)
	good := dialTCP(t, addr)
	checkEcho(t, good, 1)

	for _, garbage := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), // huge length prefix
		{0, 0, 0, 3, 0xff, 0xff, 0xff},              // bad header
		{0xff, 0xff, 0xff, 0xff},                    // 4 GiB prefix
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(helloed(garbage)); err != nil {
			t.Fatal(err)
		}
		// The server must close the connection: reads end in EOF (or a
		// reset), not the deadline.
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("server kept connection open after %q", garbage)
		}
		conn.Close()
	}

	checkEcho(t, good, 2)
	checkEcho(t, dialTCP(t, addr), 3)
}

func TestResponseFrameToServerClosesConn(t *testing.T) {
	t.Parallel()
	s := newTestServer(nil)
	cc, sc := net.Pipe()
	done := make(chan struct{})
	go func() { s.ServeConn(sc); close(done) }()
	go func() { _, _ = io.Copy(io.Discard, cc) }() // the server's hello
	if _, err := cc.Write(helloed(nil)); err != nil {
		t.Fatal(err)
	}
	w := newFrameWriter(cc)
	if err := w.write(&Frame{Seq: 1, Kind: KindResponse}, nil); err != nil {
		t.Fatal(err)
	}
	<-done
	cc.Close()
}

func TestConnectionLossFailsPendingCalls(t *testing.T) {
	t.Parallel()
	s := NewServer(quietLogger(), testVersion)
	entered := make(chan struct{})
	s.Register("Test.Hang", func(ctx context.Context, body []byte) (any, error) {
		close(entered)
		<-ctx.Done() // cancelled when the server closes the connection
		return nil, nil
	})
	c := dialTCP(t, serveTCP(t, s))
	errc := make(chan error, 1)
	go func() { errc <- c.Call(context.Background(), "Test.Hang", nil, nil) }()
	<-entered
	s.Close()
	err := <-errc
	if !IsTransport(err) || !errors.Is(err, ErrClosed) || !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want transport error wrapping ErrClosed and io.EOF", err)
	}
	if !strings.HasPrefix(err.Error(), "rpc call Test.Hang to 127.0.0.1:") || !strings.HasSuffix(err.Error(), ": connection closed: EOF") {
		t.Fatalf("error message %q", err)
	}
	if !c.Closed() {
		t.Fatal("client not marked closed")
	}
	if err := c.Call(context.Background(), "Test.Echo", &echoReq{}, nil); !IsTransport(err) {
		t.Fatalf("call on dead client: %v", err)
	}
}

func TestClientClose(t *testing.T) {
	t.Parallel()
	c := pipeClient(t, newTestServer(nil))
	checkEcho(t, c, 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	err := c.Call(context.Background(), "Test.Echo", &echoReq{}, nil)
	if !IsTransport(err) || !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v", err)
	}
}

func TestRequestTooLarge(t *testing.T) {
	t.Parallel()
	c := pipeClient(t, newTestServer(nil))
	err := c.Call(context.Background(), "Test.Raw", make([]byte, MaxFrameSize), nil)
	if !errors.Is(err, ErrFrameTooLarge) || IsTransport(err) {
		t.Fatalf("got %v", err)
	}
	checkEcho(t, c, 1)
}

func TestDialFailure(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if _, err := Dial(context.Background(), "tcp", addr, nil, testVersion); !IsTransport(err) {
		t.Fatalf("Dial: got %v", err)
	}
	p := NewPool(nil, testVersion, time.Second)
	defer p.Close()
	err = p.Call(context.Background(), addr, "Test.Echo", &echoReq{}, nil)
	if !IsTransport(err) || !strings.Contains(err.Error(), "Test.Echo") {
		t.Fatalf("Pool.Call: got %v", err)
	}
}

func TestPoolRedials(t *testing.T) {
	t.Parallel()
	s := newTestServer(nil)
	addr := serveTCP(t, s)
	p := NewPool(nil, testVersion, time.Second)
	defer p.Close()
	ctx := context.Background()
	var resp echoResp
	if err := p.Call(ctx, addr, "Test.Echo", &echoReq{N: 1}, &resp); err != nil || resp.N != 2 {
		t.Fatalf("%+v %v", resp, err)
	}
	first, err := p.client(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := p.client(ctx, addr); again != first {
		t.Fatal("pool did not reuse its client")
	}
	first.Close()
	if err := p.Call(ctx, addr, "Test.Echo", &echoReq{N: 2}, &resp); err != nil || resp.N != 4 {
		t.Fatalf("after close: %+v %v", resp, err)
	}
	if again, _ := p.client(ctx, addr); again == first {
		t.Fatal("pool kept a closed client")
	}
	p.Close()
	if err := p.Call(ctx, addr, "Test.Echo", &echoReq{}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after pool close: %v", err)
	}
}

// A pool with SetDialer connects only through it: a refusing dialer's error
// comes back as a transport error naming the address.
func TestPoolSetDialer(t *testing.T) {
	t.Parallel()
	addr := serveTCP(t, newTestServer(nil))
	p := NewPool(nil, testVersion, time.Second)
	defer p.Close()
	var dialed []string
	refuse := false
	p.SetDialer(func(ctx context.Context, a string) (net.Conn, error) {
		dialed = append(dialed, a)
		if refuse {
			return nil, errors.New("link cut")
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", a)
	})
	ctx := context.Background()
	var resp echoResp
	if err := p.Call(ctx, addr, "Test.Echo", &echoReq{N: 1}, &resp); err != nil || resp.N != 2 {
		t.Fatalf("%+v %v", resp, err)
	}
	c, _ := p.client(ctx, addr)
	c.Close()
	refuse = true
	err := p.Call(ctx, addr, "Test.Echo", &echoReq{N: 1}, &resp)
	if !IsTransport(err) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "link cut") {
		t.Fatalf("call through a refusing dialer: %v (want a transport error naming %s)", err, addr)
	}
	if len(dialed) != 2 || dialed[0] != addr || dialed[1] != addr {
		t.Fatalf("dialer saw %q, want %s twice", dialed, addr)
	}
}

func TestDuplicateRegisterPanics(t *testing.T) {
	t.Parallel()
	s := NewServer(quietLogger(), testVersion)
	s.Register("A.B", func(context.Context, []byte) (any, error) { return nil, nil })
	defer func() {
		if recover() == nil {
			t.Fatal("no panic on duplicate registration")
		}
	}()
	s.Register("A.B", func(context.Context, []byte) (any, error) { return nil, nil })
}

// TestDrainWaitsForRunningHandlers: after Close, Drain reports running
// handlers until the last returns, and no handler starts after Close.
func TestDrainWaitsForRunningHandlers(t *testing.T) {
	t.Parallel()
	s := NewServer(quietLogger(), testVersion)
	entered, release := make(chan struct{}), make(chan struct{})
	var late atomic.Bool
	s.Register("Test.Stubborn", func(ctx context.Context, body []byte) (any, error) {
		close(entered)
		<-release // ignores its cancelled context, as a handler mid-write might
		return nil, nil
	})
	s.Register("Test.Late", func(ctx context.Context, body []byte) (any, error) {
		late.Store(true)
		return nil, nil
	})
	c := dialTCP(t, serveTCP(t, s))
	go func() { _ = c.Call(context.Background(), "Test.Stubborn", nil, nil) }()
	<-entered
	s.Close()
	if s.Drain(20 * time.Millisecond) {
		t.Fatal("Drain reported no handlers while one still runs")
	}
	close(release)
	if !s.Drain(5 * time.Second) {
		t.Fatal("Drain still waiting after the last handler returned")
	}
	// A request that reaches a closed server's worker is not handled.
	cc, sc := net.Pipe()
	defer cc.Close()
	defer sc.Close()
	w := workItem{sc: &serverConn{s: s, conn: sc, w: newFrameWriter(sc)}, ctx: context.Background(), req: Frame{Kind: KindRequest, Method: "Test.Late"}}
	s.worker(w)
	if late.Load() {
		t.Fatal("a handler ran after Close")
	}
}

// A handler that gives up at a deadline of its own, or whose work is
// cancelled, answers with the code timeout or cancelled, not an empty one,
// so a caller can branch on it without reading the text.
func TestContextErrorsCarryTheirCode(t *testing.T) {
	s := NewServer(quietLogger(), testVersion)
	Handle(s, "Test.Deadline", func(ctx context.Context, req *echoReq) (*echoResp, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		defer cancel()
		<-ctx.Done()
		return nil, fmt.Errorf("wait for %s: %w", req.Text, ctx.Err())
	})
	Handle(s, "Test.Cancelled", func(ctx context.Context, req *echoReq) (*echoResp, error) {
		ctx, cancel := context.WithCancel(ctx)
		cancel() // as a Cancel from elsewhere would
		<-ctx.Done()
		return nil, fmt.Errorf("run %s: %w", req.Text, ctx.Err())
	})
	Handle(s, "Test.PlainFail", func(ctx context.Context, req *echoReq) (*echoResp, error) { return nil, errors.New("plain failure") })
	c := pipeClient(t, s)
	for method, want := range map[string]string{"Test.Deadline": CodeTimeout, "Test.Cancelled": CodeCancelled, "Test.PlainFail": ""} {
		err := c.Call(context.Background(), method, &echoReq{Text: "x"}, &echoResp{})
		var re *Error
		if !errors.As(err, &re) || re.Code != want || (want != "" && !strings.Contains(re.Message, "x")) {
			t.Errorf("%s: %v (code %q), want code %q", method, err, codeOf(re), want)
		}
	}
}

func codeOf(e *Error) string {
	if e == nil {
		return "<no *Error>"
	}
	return e.Code
}
