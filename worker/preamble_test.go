package worker

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// TestSilentConnDoesNotDelayOthers: a peer that connects to a core
// worker's port and sends nothing must not hold up other connections, and
// one that sends the wrong preamble is closed.
// With a worker certificate, the same holds for plain and TLS callers.
func TestSilentConnDoesNotDelayOthers(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testSilentConn(t, nil) })
	t.Run("tls", func(t *testing.T) { testSilentConn(t, testWorkerTLS(t)) })
}

// testWorkerTLS is a workerTLS with a certificate from a new CA.
func testWorkerTLS(t *testing.T) *workerTLS {
	t.Helper()
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueWorker("job1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := pki.NewWorkerTLS(certPEM, keyPEM, ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	w := &workerTLS{client: cred.ClientConfig()}
	w.cred.Store(cred)
	w.server = pki.WorkerServerConfig(func() *tls.Certificate { return &w.cred.Load().Cert })
	return w
}

func testSilentConn(t *testing.T, wt *workerTLS) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer(nil, wire.ProtocolVersion)
	s.Register("Test.Ping", func(ctx context.Context, body []byte) (any, error) { return "pong", nil })
	go func() { _ = s.Serve(&sniffListener{Listener: ln, tls: wt}) }()
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
	if wt != nil {
		var d nodeDialer
		d.worker.Store(wt.client)
		p := rpc.NewPool([]byte{wire.PreambleRPC}, wire.ProtocolVersion, time.Second)
		defer p.Close()
		p.SetDialer(d.dial)
		got = ""
		if err := p.Call(ctx, ln.Addr().String(), "Test.Ping", nil, &got); err != nil || got != "pong" {
			t.Fatalf("call over TLS beside a silent connection: %q, %v", got, err)
		}
		if n, m := wt.tlsAccepts.Load(), wt.plainAccepts.Load(); n != 1 || m != 1 {
			t.Fatalf("accepted %d TLS and %d plain connections, want 1 and 1", n, m)
		}
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
