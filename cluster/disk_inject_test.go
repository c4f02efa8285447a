package cluster

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// TestUnwritableDiskReported makes the leader's disk refuse writes (the Raft
// log and the data dir, as a full disk does while bbolt still has free pages
// for the stable store): the node must report unhealthy on /v1/health with
// the reason, lose leadership, and be demoted to a non-voter; once writes
// succeed again it is healthy and a voter again.
func TestUnwritableDiskReported(t *testing.T) {
	nodes := testCluster(t, 3, func(i int, c *Config) { c.DiskProbeInterval = 100 * time.Millisecond })
	waitFormed(t, nodes, 3, 3)
	sick := leaderOf(t, nodes)
	var others []*Node
	for _, nd := range nodes {
		if nd != sick {
			others = append(others, nd)
		}
	}
	if code, body := health(t, sick); code != http.StatusOK || body["healthy"] != true {
		t.Fatalf("healthy node: /v1/health %d %v", code, body)
	}

	injectDiskFault(sick, syscall.ENOSPC)
	kvSet(sick, "poke") // a Raft write, which now fails on the leader
	testutil.Until(t, 10*time.Second, "unhealthy with the reason", func() error {
		code, body := health(t, sick)
		reason, _ := body["reason"].(string)
		if code != http.StatusServiceUnavailable || body["healthy"] != false || !strings.Contains(reason, "no space left on device") {
			return fmt.Errorf("/v1/health %d %v", code, body)
		}
		return nil
	})
	testutil.Until(t, 20*time.Second, "another node leads and commits, the sick one a non-voter", func() error {
		if sick.IsLeader() {
			return fmt.Errorf("%s still leads", sick.Name())
		}
		if err := kvSet(others[0], "after"); err != nil {
			return err
		}
		return wantSuffrage(others[0], sick, "nonvoter")
	})

	injectDiskFault(sick, nil)
	testutil.Until(t, 20*time.Second, "healthy and a voter again", func() error {
		if code, body := health(t, sick); code != http.StatusOK {
			return fmt.Errorf("/v1/health %d %v", code, body)
		}
		return wantSuffrage(others[0], sick, "voter")
	})
}

// injectDiskFault makes nd's Raft log and data-dir writes fail with err
// (nil: succeed again).
func injectDiskFault(nd *Node, err error) {
	nd.disk.inject(writeRaftLog, err)
	nd.disk.inject(writeDataDir, err)
}

// TestDiskHealthByKind checks that a failure lasts until a write of the same
// kind succeeds, and keeps the time of its first failure.
func TestDiskHealthByKind(t *testing.T) {
	h := newDiskHealth()
	fail := func() error { return syscall.ENOSPC }
	ok := func() error { return nil }
	_ = h.write(writeRaftLog, "/d/raft/raft.db", fail)
	first := h.err()
	if first == nil || first.What != writeRaftLog || first.Path != "/d/raft/raft.db" || !errors.Is(first, syscall.ENOSPC) {
		t.Fatalf("after a failed log write: %v", first)
	}
	_ = h.write(writeRaftStable, "/d/raft/raft.db", ok)
	_ = h.write(writeRaftLog, "/d/raft/raft.db", fail)
	if e := h.err(); e == nil || !e.Since.Equal(first.Since) {
		t.Fatalf("a stable-store write cleared, or a repeat restarted, the log failure: %v", e)
	}
	_ = h.write(writeRaftLog, "/d/raft/raft.db", ok)
	if e := h.err(); e != nil {
		t.Fatalf("after a good log write: %v", e)
	}
	h.inject(writeDataDir, syscall.EROFS)
	if err := h.write(writeDataDir, "/d/.write-probe", ok); !errors.Is(err, syscall.EROFS) || h.err() == nil {
		t.Fatalf("injected fault: %v, health %v", err, h.err())
	}
}
