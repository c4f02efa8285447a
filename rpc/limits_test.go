package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// limitedServer serves the test methods on loopback under limits.
func limitedServer(t *testing.T, release <-chan struct{}, limits Limits) string {
	t.Helper()
	s := newTestServer(release)
	s.SetLimits(limits)
	return serveTCP(t, s)
}

// closedWithin dials addr, writes data and reports how long the server
// took to close the connection, failing if it keeps it past wait.
func closedWithin(t *testing.T, addr string, data []byte, wait time.Duration) time.Duration {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := conn.Write(helloed(data)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(start.Add(wait))
	_, err = io.ReadAll(conn)
	if isTimeout(err) {
		t.Fatalf("server kept the connection open for %s", wait)
	}
	return time.Since(start)
}

func TestSlowFrameIsClosed(t *testing.T) {
	addr := limitedServer(t, nil, Limits{FrameTimeout: 200 * time.Millisecond})
	// Three bytes of a length prefix, then nothing: slowloris.
	if d := closedWithin(t, addr, []byte{0, 0, 0}, 5*time.Second); d < 150*time.Millisecond {
		t.Fatalf("closed after %s, before the frame timeout", d)
	}
	// A header that promises a body that never comes.
	frame := rawRequest(1, "Test.Echo", []byte{0x80})
	binary.BigEndian.PutUint32(frame, 1000)
	closedWithin(t, addr, frame, 5*time.Second)
}

func TestIdleConnIsClosedButNotWhileARequestRuns(t *testing.T) {
	release := make(chan struct{})
	addr := limitedServer(t, release, Limits{IdleTimeout: 200 * time.Millisecond})
	if d := closedWithin(t, addr, nil, 5*time.Second); d < 150*time.Millisecond {
		t.Fatalf("closed after %s, before the idle timeout", d)
	}
	c := dialTCP(t, addr)
	go func() {
		time.Sleep(700 * time.Millisecond) // several idle timeouts
		close(release)
	}()
	var resp echoResp
	if err := c.Call(context.Background(), "Test.Block", &echoReq{N: 4}, &resp); err != nil || resp.N != 4 {
		t.Fatalf("blocking call across idle timeouts: %+v, %v", resp, err)
	}
}

func TestMaxConns(t *testing.T) {
	addr := limitedServer(t, nil, Limits{MaxConns: 2})
	a, b := dialTCP(t, addr), dialTCP(t, addr)
	checkEcho(t, a, 1) // both are registered once they have answered
	checkEcho(t, b, 2)
	closedWithin(t, addr, nil, 5*time.Second)
	a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The server notices a's close asynchronously.
	testutil.Until(t, 5*time.Second, "room for a connection after one closed", func() error {
		return dialTCP(t, addr).Call(ctx, "Test.Echo", &echoReq{}, nil)
	})
}

func TestRequestsOverThePendingLimitsAreRefused(t *testing.T) {
	release := make(chan struct{})
	addr := limitedServer(t, release, Limits{MaxPending: 2, MaxPendingBytes: 4000})
	c := dialTCP(t, addr)
	ctx := context.Background()
	var wg sync.WaitGroup
	block := func(text string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Call(ctx, "Test.Block", &echoReq{Text: text}, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	refused := func(what string, req *echoReq) {
		t.Helper()
		var re *Error
		if err := c.Call(ctx, "Test.Echo", req, nil); !errors.As(err, &re) || re.Code != CodeOverloaded {
			t.Fatalf("%s: got %v, want an error with code %q", what, err, CodeOverloaded)
		}
	}
	block(strings.Repeat("b", 5000)) // over MaxPendingBytes, but alone: runs
	time.Sleep(100 * time.Millisecond)
	refused("a body over MaxPendingBytes with one running", &echoReq{Text: "x"})
	close(release)
	wg.Wait()

	release = make(chan struct{})
	addr = limitedServer(t, release, Limits{MaxPending: 2})
	c = dialTCP(t, addr)
	block("")
	block("")
	time.Sleep(100 * time.Millisecond)
	refused("a third request with two running", &echoReq{})
	close(release)
	wg.Wait()
	checkEcho(t, c, 7)
}

func TestUnknownMethodBodyIsNotKept(t *testing.T) {
	addr := hostileServer(t)
	c := dialTCP(t, addr)
	body := make([]byte, 8<<20)
	var err error
	n := allocatedBytes(func() { err = c.Call(context.Background(), "No.Such", body, nil) })
	var re *Error
	if !errors.As(err, &re) || re.Code != CodeUnknownMethod {
		t.Fatalf("got %v, want unknown_method", err)
	}
	// The client encodes the 8 MiB body (about 16 MiB with buffer growth);
	// the server must not allocate another 8 MiB to hold it.
	if n > 20<<20 {
		t.Fatalf("an 8 MiB request to an unknown method allocated %d bytes", n)
	}
}

func TestBadFrameWarningsAreRateLimited(t *testing.T) {
	var logs testutil.SyncBuffer
	s := NewServer(slog.New(slog.NewTextHandler(&logs, nil)), testVersion)
	addr := serveTCP(t, s)
	bad := []byte{0, 0, 0, 1, 0x01}
	for range 20 {
		closedWithin(t, addr, bad, 5*time.Second)
	}
	if n := strings.Count(logs.String(), "bad frame"); n != 1 {
		t.Fatalf("%d warnings for 20 bad frames within a second, want 1:\n%s", n, logs.String())
	}
	time.Sleep(warnInterval)
	closedWithin(t, addr, bad, 5*time.Second)
	out := logs.String()
	if n := strings.Count(out, "bad frame"); n != 2 || !strings.Contains(out, "suppressed=19") {
		t.Fatalf("after the interval: %d warnings, want 2, the second counting 19 suppressed:\n%s", n, out)
	}
	if !strings.Contains(out, "remote=127.0.0.1:") || !strings.Contains(out, "malformed frame") {
		t.Fatalf("warning does not name the peer and the cause:\n%s", out)
	}
}

func TestPoolDropsIdleClients(t *testing.T) {
	addr := serveTCP(t, newTestServer(nil))
	p := NewPool(nil, testVersion, time.Second)
	defer p.Close()
	ctx := context.Background()
	first, err := p.client(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	first.lastCall.Store(time.Now().Add(-PoolIdleTimeout).UnixNano())
	again, err := p.client(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if again == first || !first.Closed() {
		t.Fatal("pool reused a client idle for PoolIdleTimeout")
	}
	if err := p.Call(ctx, addr, "Test.Echo", &echoReq{}, nil); err != nil {
		t.Fatal(err)
	}
}
