package cluster

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// TestHealthNoLeader: /v1/health is 200 on a formed 3-node cluster; once two
// of the three servers are killed the survivor has no quorum, so no leader,
// and its health must turn 503 naming "no leader" (it used to stay 200).
func TestHealthNoLeader(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	survivor := nodes[2]
	if code, body := health(t, survivor); code != http.StatusOK || body["healthy"] != true || body["leader"] == "" {
		t.Fatalf("formed cluster: /v1/health %d %v", code, body)
	}
	nodes[0].Kill()
	nodes[1].Kill()
	testutil.Until(t, 30*time.Second, "survivor unhealthy: no leader", func() error {
		code, body := health(t, survivor)
		reason, _ := body["reason"].(string)
		if code != http.StatusServiceUnavailable || body["healthy"] != false || !strings.Contains(reason, "no leader") || body["leader"] != "" {
			return fmt.Errorf("/v1/health %d %v", code, body)
		}
		return nil
	})
}

// TestHealthDataDirUnwritable makes a node's data dir unwritable (as root,
// whom file modes do not stop, a read-only bind mount over it; mode 0500
// otherwise): /v1/health must turn 503 with a reason naming the dir.
func TestHealthDataDirUnwritable(t *testing.T) {
	nodes := testCluster(t, 1, func(i int, c *Config) { c.DiskProbeInterval = 100 * time.Millisecond })
	nd := nodes[0]
	testutil.Until(t, 20*time.Second, "healthy", func() error {
		if code, body := health(t, nd); code != http.StatusOK {
			return fmt.Errorf("/v1/health %d %v", code, body)
		}
		return nil
	})
	if dir := nd.DataDir(); os.Geteuid() == 0 {
		// The node's open files stay writable; what it opens anew (the
		// probe file) is refused with EROFS.
		if out, err := exec.Command("mount", "--bind", dir, dir).CombinedOutput(); err != nil {
			t.Skipf("bind mount: %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
		if out, err := exec.Command("mount", "-o", "remount,bind,ro", dir).CombinedOutput(); err != nil {
			t.Skipf("remount read-only: %v %s", err, out)
		}
	} else {
		if err := os.Chmod(nd.DataDir(), 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(nd.DataDir(), 0o700) })
	}
	testutil.Until(t, 20*time.Second, "unhealthy naming the data dir", func() error {
		code, body := health(t, nd)
		reason, _ := body["reason"].(string)
		if code != http.StatusServiceUnavailable || !strings.Contains(reason, nd.DataDir()) {
			return fmt.Errorf("/v1/health %d %v", code, body)
		}
		return nil
	})
}
