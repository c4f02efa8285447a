package worker

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// TestSilentConnDoesNotDelayOthers: a peer that connects to a core
// worker's port and sends nothing must not hold up other connections, and
// one that sends the wrong preamble is closed.
func TestSilentConnDoesNotDelayOthers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer(nil, wire.ProtocolVersion)
	s.Register("Test.Ping", func(ctx context.Context, body []byte) (any, error) { return "pong", nil })
	go func() { _ = s.Serve(&preambleListener{ln}) }()
	t.Cleanup(s.Close)

	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	time.Sleep(50 * time.Millisecond) // accepted first

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, "tcp", ln.Addr().String(), []byte{wire.PreambleRPC}, wire.ProtocolVersion)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got string
	if err := c.Call(ctx, "Test.Ping", nil, &got); err != nil || got != "pong" {
		t.Fatalf("call beside a silent connection: %q, %v", got, err)
	}

	wrong, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	_, _ = wrong.Write([]byte{0x02, 0, 0, 0, 1})
	_ = wrong.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = io.ReadAll(wrong) // EOF or a reset: closed either way
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection with a wrong preamble kept open")
	}
}
