package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/testutil"
)

// lockedBuffer is a log destination the test reads while the joiner writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

const failedTry = "join: no peer answered; trying again"

func TestJoinRetriesUntilAPeerStarts(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))

	joinCfg := clustertest.Config(dir, 1)
	joinCfg.Insecure = true
	joinCfg.Join = []string{fmt.Sprintf("127.0.0.1:%d", port)}
	type result struct {
		n   *cluster.Node
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		n, err := startWithRetry(ctx, joinCfg, retryPolicy{Interval: 300 * time.Millisecond}, logger)
		done <- result{n, err}
	}()
	testutil.Until(t, 30*time.Second, "three failed tries logged", func() error {
		if c := logs.count(failedTry); c < 3 {
			return fmt.Errorf("%d so far", c)
		}
		return nil
	})

	headCfg := clustertest.Config(dir, 0)
	headCfg.Insecure, headCfg.Head, headCfg.Port = true, true, port
	head, err := cluster.Start(context.Background(), headCfg)
	if err != nil {
		t.Fatalf("head on port %d: %v", port, err)
	}
	defer head.Kill()
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the joiner did not join within 60 s of the head starting")
	}
	if r.err != nil {
		t.Fatalf("join after the peer started: %v", r.err)
	}
	defer r.n.Kill()
	select {
	case <-r.n.Registered():
	case <-time.After(30 * time.Second):
		t.Fatal("the joiner did not register with the head's leader")
	}
	if r.n.ClusterID() != head.ClusterID() {
		t.Fatalf("joined cluster %s, want the head's %s", r.n.ClusterID(), head.ClusterID())
	}
	if !strings.Contains(logs.buf.String(), "join: a peer answered") {
		t.Errorf("no log line for the try that worked:\n%s", logs.buf.String())
	}
}

func TestJoinRetryMaxGivesUp(t *testing.T) {
	dir := t.TempDir()
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := clustertest.Config(dir, 1)
	cfg.Join = []string{fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	// A well-formed token for a cluster that is not there: the secure join
	// (joinWithToken) is retried as the insecure hello is.
	cfg.Token = "nodeup1.0123abcd.0123456789abcdef0123456789abcdef." + strings.Repeat("ab", 32)
	_, err := startWithRetry(context.Background(), cfg, retryPolicy{Max: 3, Interval: 10 * time.Millisecond}, logger)
	if !errors.Is(err, cluster.ErrNoPeerAnswered) || !strings.Contains(err.Error(), "no peer answered in 3 tries") {
		t.Fatalf("got %v, want no peer answered in 3 tries", err)
	}
	if c := logs.count(failedTry); c != 2 {
		t.Fatalf("%d failed tries logged, want 2 (the third is the error)", c)
	}

	// Errors that waiting does not fix are returned at once.
	cfg.Token = ""
	cfg.DataDir = filepath.Join(dir, "fresh")
	_, err = startWithRetry(context.Background(), cfg, retryPolicy{Interval: 10 * time.Millisecond}, logger)
	if !errors.Is(err, cluster.ErrNoToken) {
		t.Fatalf("got %v, want ErrNoToken at once", err)
	}
	if c := logs.count(failedTry); c != 2 {
		t.Fatalf("a missing token was retried (%d failed tries logged)", c)
	}
}
