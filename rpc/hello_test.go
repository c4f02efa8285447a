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
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// fakePeer listens on loopback and runs serve on the first connection.
func fakePeer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	return l.Addr().String()
}

// A server refuses a client of another version: it answers its own hello
// and closes, runs nothing, and logs both versions.
func TestServerRefusesOtherProtocolVersion(t *testing.T) {
	var logs testutil.SyncBuffer
	s := NewServer(slog.New(slog.NewTextHandler(&logs, nil)), testVersion)
	ran := make(chan struct{}, 1)
	Handle(s, "Test.Echo", func(ctx context.Context, req *echoReq) (*echoResp, error) {
		ran <- struct{}{}
		return &echoResp{}, nil
	})
	addr := serveTCP(t, s)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := rawRequest(1, "Test.Echo", []byte{0x80})
	if _, err := conn.Write(append(AppendHello(nil, testVersion+1), req...)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("read: %v (want the server's hello, then the connection closed)", err)
	}
	if !bytes.Equal(got, AppendHello(nil, testVersion)) {
		t.Fatalf("server sent %x, want only its hello %x", got, AppendHello(nil, testVersion))
	}
	select {
	case <-ran:
		t.Fatal("the server ran a request of a client speaking another protocol version")
	default:
	}
	testutil.Until(t, 5*time.Second, "a warning naming both versions", func() error {
		if !strings.Contains(logs.String(), "protocol version 10, this process speaks version 9") {
			return fmt.Errorf("log: %q", logs.String())
		}
		return nil
	})
}

// A client refuses a server of another version: the call fails with a
// *VersionError naming both, as a transport error.
func TestClientRefusesOtherProtocolVersion(t *testing.T) {
	t.Parallel()
	addr := fakePeer(t, func(c net.Conn) {
		if _, err := io.ReadFull(c, make([]byte, HelloSize)); err != nil {
			return
		}
		_, _ = c.Write(AppendHello(nil, 1))
		_, _ = io.Copy(io.Discard, c)
	})
	p := NewPool(nil, testVersion, time.Second)
	defer p.Close()
	err := p.Call(context.Background(), addr, "Test.Echo", &echoReq{N: 1}, &echoResp{})
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Local != testVersion || ve.Remote != 1 || !IsTransport(err) {
		t.Fatalf("call to a version-1 server: %v; want a transport *VersionError{Local: %d, Remote: 1}", err, testVersion)
	}
	if msg := err.Error(); !strings.Contains(msg, "version 1, this process speaks version 9") || !strings.Contains(msg, addr) {
		t.Fatalf("error %q does not name the peer and both versions", msg)
	}
}

// A server from before the hello answers frames without one: the client
// says the peer sent no hello instead of misreading the reply.
func TestClientRefusesPeerWithoutHello(t *testing.T) {
	t.Parallel()
	addr := fakePeer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		_, _ = br.Discard(HelloSize) // an old server would read it as a frame length
		_, _ = c.Write(encodeFrame(t, &Frame{Seq: 1, Kind: KindResponse, Body: []byte{0x80}}))
		_, _ = io.Copy(io.Discard, br)
	})
	p := NewPool(nil, testVersion, time.Second)
	defer p.Close()
	err := p.Call(context.Background(), addr, "Test.Echo", &echoReq{N: 1}, &echoResp{})
	var ve *VersionError
	if !errors.As(err, &ve) || !ve.NoHello || !strings.Contains(err.Error(), "sent no protocol hello") {
		t.Fatalf("call to a server without hello: %v; want *VersionError{NoHello: true}", err)
	}
}
