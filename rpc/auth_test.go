package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Test roles: bit 1 read, bit 2 write; "all" holds both.
const (
	grantRead  Grants = 1 << 0
	grantWrite Grants = 1 << 1
)

// testAuth resolves tokens "reader" and "writer"; anything else is
// anonymous with a note. Test.Echo needs read, Test.Raw needs write, and
// Test.Fail has no requirement. tokens records what connections presented.
func testAuth(tokens *[]string, mu *sync.Mutex) *Auth {
	return &Auth{
		Authenticate: func(conn net.Conn, token string) Principal {
			mu.Lock()
			*tokens = append(*tokens, token)
			mu.Unlock()
			switch token {
			case "reader":
				return Principal{Name: "token reader", Role: "read", Grants: grantRead}
			case "writer":
				return Principal{Name: "token writer", Role: "write", Grants: grantRead | grantWrite}
			case "":
				return Principal{Name: "anonymous", Role: "none"}
			}
			return Principal{Name: "anonymous", Role: "none", Note: "token " + token + ": unknown"}
		},
		Require: func(method string) (Requirement, bool) {
			switch method {
			case "Test.Echo", "Test.Block":
				return Requirement{Role: "read", Bit: grantRead}, true
			case "Test.Raw", "Test.Panic", "Test.PlainFail":
				return Requirement{Role: "write", Bit: grantWrite}, true
			}
			return Requirement{}, false
		},
		Hint: "pass --token",
	}
}

func TestAuthRefusesByRoleAndNamesIt(t *testing.T) {
	s := newTestServer(nil)
	var (
		mu     sync.Mutex
		tokens []string
	)
	s.SetAuth(testAuth(&tokens, &mu)) // after the methods were registered
	addr := serveTCP(t, s)
	ctx := context.Background()
	dial := func(token string) *Client {
		c, err := Dial(ctx, "tcp", addr, nil, testVersion, WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	anon, reader, writer := dial(""), dial("reader"), dial("writer")
	var resp echoResp
	err := anon.Call(ctx, "Test.Echo", &echoReq{N: 1}, &resp)
	var re *Error
	if !errors.As(err, &re) || re.Code != CodePermissionDenied {
		t.Fatalf("anonymous Test.Echo: got %v, want a %s error", err, CodePermissionDenied)
	}
	for _, want := range []string{"Test.Echo", "needs role read", "anonymous with role none", "pass --token"} {
		if !strings.Contains(re.Message, want) {
			t.Errorf("refusal %q does not say %q", re.Message, want)
		}
	}
	if err := reader.Call(ctx, "Test.Echo", &echoReq{N: 2}, &resp); err != nil || resp.N != 4 {
		t.Fatalf("reader Test.Echo: %v, %+v; want N=4", err, resp)
	}
	// A refused request's body is skipped and the connection stays usable.
	var n int
	err = reader.Call(ctx, "Test.Raw", strings.Repeat("x", 100<<10), &n)
	if !errors.As(err, &re) || re.Code != CodePermissionDenied || !strings.Contains(re.Message, "Test.Raw needs role write; this connection is token reader with role read") {
		t.Fatalf("reader Test.Raw: got %v, want a refusal naming method, role and principal", err)
	}
	if err := reader.Call(ctx, "Test.Echo", &echoReq{N: 3}, &resp); err != nil || resp.N != 6 {
		t.Fatalf("reader Test.Echo after a refusal: %v, %+v", err, resp)
	}
	if err := writer.Call(ctx, "Test.Raw", "abc", &n); err != nil || n != 4 {
		t.Fatalf("writer Test.Raw: %v, n=%d", err, n)
	}
	// A method the table does not name is refused to everyone.
	err = writer.Call(ctx, "Test.Fail", &echoReq{Text: "x"}, nil)
	if !errors.As(err, &re) || re.Code != CodePermissionDenied || !strings.Contains(re.Message, "no role in the method table") {
		t.Fatalf("writer Test.Fail (no requirement): got %v, want refused", err)
	}
	// A token the authenticator did not accept is named in the refusal.
	bad := dial("wrong")
	err = bad.Call(ctx, "Test.Echo", &echoReq{}, nil)
	if !errors.As(err, &re) || !strings.Contains(re.Message, "(token wrong: unknown)") {
		t.Fatalf("bad token: got %v, want the note", err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(tokens) // connections authenticate concurrently
	if got := strings.Join(tokens, ","); got != ",reader,writer,wrong" {
		t.Errorf("authenticator saw tokens %q, want \",reader,writer,wrong\" (once per connection)", got)
	}
}

func TestNoAuthAllowsEverything(t *testing.T) {
	s := newTestServer(nil)
	c := dialTCP(t, serveTCP(t, s))
	var resp echoResp
	if err := c.Call(context.Background(), "Test.Echo", &echoReq{N: 5}, &resp); err != nil || resp.N != 10 {
		t.Fatalf("Test.Echo without Auth: %v, %+v", err, resp)
	}
}

func TestAuthPoolTokenAndUnixSocket(t *testing.T) {
	s := newTestServer(nil)
	var (
		mu     sync.Mutex
		tokens []string
	)
	s.SetAuth(testAuth(&tokens, &mu))
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Close)

	p := NewPool(nil, testVersion, time.Second)
	t.Cleanup(p.Close)
	if err := p.SetToken(strings.Repeat("x", MaxTokenSize+1)); err == nil {
		t.Fatal("SetToken accepted a token over MaxTokenSize")
	}
	if err := p.SetToken("reader"); err != nil {
		t.Fatal(err)
	}
	// The TCP-looking name routes over the socket.
	p.SetRoute("node:1", UnixPrefix+path)
	var resp echoResp
	if err := p.Call(context.Background(), "node:1", "Test.Echo", &echoReq{N: 7}, &resp); err != nil || resp.N != 14 {
		t.Fatalf("pool call over the Unix socket: %v, %+v", err, resp)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tokens) != 1 || tokens[0] != "reader" {
		t.Fatalf("authenticator saw %q, want the pool's token once", tokens)
	}
}

// A hello announcing a token longer than MaxTokenSize closes the
// connection before the server reads or allocates it.
func TestHelloTokenTooLongClosed(t *testing.T) {
	s := newTestServer(nil)
	addr := serveTCP(t, s)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hello := append([]byte{'N', 'T'}, binary.BigEndian.AppendUint16(nil, testVersion)...)
	hello = binary.BigEndian.AppendUint16(hello, MaxTokenSize+1)
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v (want the server to close)", err)
	}
	if !bytes.Equal(got, nil) {
		t.Fatalf("server answered %x to an oversized token, want a close", got)
	}
}

// The check at dispatch allocates nothing for an allowed call.
func BenchmarkCallTCPAuth(b *testing.B) {
	s := NewServer(quietLogger(), testVersion)
	Handle(s, "Bench.Submit", func(ctx context.Context, req *benchTask) (*echoResp, error) {
		return &echoResp{N: len(req.Args), Text: req.ID}, nil
	})
	s.SetAuth(&Auth{
		Authenticate: func(net.Conn, string) Principal { return Principal{Name: "bench", Role: "all", Grants: ^Grants(0)} },
		Require:      func(string) (Requirement, bool) { return Requirement{Role: "read", Bit: 1}, true },
	})
	c := dialTCP(b, serveTCP(b, s))
	req := newBenchTask()
	var resp echoResp
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, "Bench.Submit", req, &resp); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkAuthCheck measures the per-call check alone: the allowed path
// of denied, as readRequest runs it.
func BenchmarkAuthCheck(b *testing.B) {
	p := &Principal{Name: "token x", Role: "read", Grants: grantRead}
	e := entry{need: Requirement{Role: "read", Bit: grantRead}, known: true}
	b.ReportAllocs()
	for b.Loop() {
		if denied(p, "Test.Echo", &e, "") != nil {
			b.Fatal("denied")
		}
	}
}

// SetTokenFunc picks each address's token at dial: two addresses of one
// server present their own.
func TestPoolTokenFunc(t *testing.T) {
	s := newTestServer(nil)
	var (
		mu     sync.Mutex
		tokens []string
	)
	s.SetAuth(testAuth(&tokens, &mu))
	addr := serveTCP(t, s)
	p := NewPool(nil, testVersion, time.Second)
	t.Cleanup(p.Close)
	if err := p.SetToken("writer"); err != nil {
		t.Fatal(err)
	}
	p.SetRoute("a:1", addr)
	p.SetRoute("b:1", addr)
	p.SetTokenFunc(func(a string) string {
		if a == "a:1" {
			return "reader"
		}
		return ""
	})
	var resp echoResp
	if err := p.Call(context.Background(), "a:1", "Test.Echo", &echoReq{N: 1}, &resp); err != nil {
		t.Fatalf("a:1 with reader: %v", err)
	}
	err := p.Call(context.Background(), "b:1", "Test.Echo", &echoReq{N: 1}, &resp)
	var re *Error
	if !errors.As(err, &re) || re.Code != CodePermissionDenied {
		t.Fatalf("b:1 with no token: got %v, want permission_denied", err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(tokens)
	if got := strings.Join(tokens, ","); got != ",reader" {
		t.Fatalf("authenticator saw %q, want \",reader\" (the func's tokens, not SetToken's)", got)
	}
}
