package cli

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/testutil"
)

// fakeSystemd is a NOTIFY_SOCKET: a unixgram socket in a temp dir, as
// systemd listens on, set in the environment for the test.
func fakeSystemd(t *testing.T) *net.UnixConn {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd") // short: sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return conn
}

// next returns the next datagram, failing t after within.
func next(t *testing.T, conn *net.UnixConn, within time.Duration) string {
	t.Helper()
	buf := make([]byte, 512)
	_ = conn.SetReadDeadline(time.Now().Add(within))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no sd_notify message within %s: %v", within, err)
	}
	return string(buf[:n])
}

// queued returns the datagrams already waiting. (A deadline already past
// fails a read before it looks, so it allows 20 ms.)
func queued(conn *net.UnixConn) []string {
	var out []string
	buf := make([]byte, 512)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := conn.Read(buf)
		if err != nil {
			return out
		}
		out = append(out, string(buf[:n]))
	}
}

type fakeNode struct {
	registered chan struct{}
	dead       atomic.Bool
	aliveCalls atomic.Int64
}

func (f *fakeNode) Registered() <-chan struct{} { return f.registered }
func (f *fakeNode) Alive() error {
	f.aliveCalls.Add(1)
	if f.dead.Load() {
		return errors.New("agent loop stalled")
	}
	return nil
}

func TestSystemdReadyOnlyAfterRegisteredAndWatchdogPings(t *testing.T) {
	conn := fakeSystemd(t)
	t.Setenv("WATCHDOG_USEC", "40000") // pings every 20 ms
	t.Setenv("WATCHDOG_PID", "")
	node := &fakeNode{registered: make(chan struct{})}
	stop := notifySystemd(context.Background(), node, testutil.Logger())
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	// Three watchdog pings while unregistered: time passes, and no READY=1.
	for range 3 {
		if m := next(t, conn, 10*time.Second); m != "WATCHDOG=1" {
			t.Fatalf("before registration got %q, want only WATCHDOG=1", m)
		}
	}
	close(node.registered)
	testutil.Until(t, 10*time.Second, "READY=1 after registration", func() error {
		if m := next(t, conn, 10*time.Second); m != "READY=1" {
			return errors.New("got " + m)
		}
		return nil
	})

	// A node that is not alive gets no pings.
	node.dead.Store(true)
	calls := node.aliveCalls.Load()
	testutil.Until(t, 10*time.Second, "the pinger asked Alive twice more", func() error {
		if node.aliveCalls.Load() < calls+2 {
			return errors.New("not yet")
		}
		return nil
	})
	queued(conn) // pings from before the node died
	calls = node.aliveCalls.Load()
	testutil.Until(t, 10*time.Second, "the pinger asked Alive three more times", func() error {
		if node.aliveCalls.Load() < calls+3 {
			return errors.New("not yet")
		}
		return nil
	})
	if got := queued(conn); len(got) != 0 {
		t.Fatalf("pings while not alive: %q", got)
	}

	stop()
	stopped = true
	if got := queued(conn); len(got) != 1 || got[0] != "STOPPING=1" {
		t.Fatalf("at stop got %q, want [STOPPING=1]", got)
	}
}

func TestSystemdNoWatchdogWithoutWatchdogUsec(t *testing.T) {
	conn := fakeSystemd(t)
	t.Setenv("WATCHDOG_USEC", "")
	node := &fakeNode{registered: make(chan struct{})}
	close(node.registered)
	stop := notifySystemd(context.Background(), node, testutil.Logger())
	if m := next(t, conn, 10*time.Second); m != "READY=1" {
		t.Fatalf("got %q, want READY=1", m)
	}
	stop()
	if got := queued(conn); strings.Join(got, ",") != "STOPPING=1" {
		t.Fatalf("got %q, want [STOPPING=1] (no WATCHDOG=1 without WATCHDOG_USEC)", got)
	}
	if node.aliveCalls.Load() != 0 {
		t.Fatalf("Alive called %d times without a watchdog", node.aliveCalls.Load())
	}
}

func TestSystemdReadyFromARealNode(t *testing.T) {
	conn := fakeSystemd(t)
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", "")
	n := clustertest.Start(t, 1, nil)[0]
	stop := notifySystemd(context.Background(), n, testutil.Logger())
	defer stop()
	sawPing := false
	testutil.Until(t, 20*time.Second, "READY=1 from a started node", func() error {
		m := next(t, conn, 20*time.Second)
		sawPing = sawPing || m == "WATCHDOG=1"
		if m != "READY=1" {
			return errors.New("got " + m)
		}
		return nil
	})
	select {
	case <-n.Registered():
	default:
		t.Fatal("READY=1 sent before the node registered with the leader")
	}
	if !sawPing {
		if m := next(t, conn, 10*time.Second); m != "WATCHDOG=1" {
			t.Fatalf("got %q, want WATCHDOG=1 from a live node", m)
		}
	}
}
