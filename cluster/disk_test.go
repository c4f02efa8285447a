package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/wire"
)

// TestFullDiskTmpfs puts one voter's data dir on a small tmpfs and fills it:
// the node must report unhealthy on /v1/health with the reason, not lead,
// and be demoted to a non-voter; freed, it is healthy and a voter again.
// It needs root (mount); elsewhere TestUnwritableDiskReported injects the
// failure instead.
func TestFullDiskTmpfs(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	nodes := testCluster(t, 3, func(i int, c *Config) {
		if i == 0 {
			c.DataDir = filepath.Join(mnt, "n0")
		}
	})
	waitFormed(t, nodes, 3, 3)
	sick, other := nodes[0], nodes[1]
	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	kvSet(other, "poke") // a Raft write every voter must store
	testutil.Until(t, 30*time.Second, "unhealthy with the reason", func() error {
		kvSet(other, "poke")
		code, body := health(t, sick)
		reason, _ := body["reason"].(string)
		if code != http.StatusServiceUnavailable || !strings.Contains(reason, "no space left on device") {
			return fmt.Errorf("/v1/health %d %v", code, body)
		}
		return nil
	})
	testutil.Until(t, 30*time.Second, "another node leads and commits, the full one a non-voter", func() error {
		if sick.IsLeader() {
			return fmt.Errorf("%s still leads", sick.Name())
		}
		if err := kvSet(other, "after"); err != nil {
			return err
		}
		return wantSuffrage(other, sick, "nonvoter")
	})
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 40*time.Second, "healthy and a voter again", func() error {
		if code, body := health(t, sick); code != http.StatusOK {
			return fmt.Errorf("/v1/health %d %v", code, body)
		}
		return wantSuffrage(other, sick, "voter")
	})
}

// mountTmpfs mounts a tmpfs of size under a temp dir, unmounted at test end
// (after the nodes stop); it skips the test where mount is not permitted.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

func health(t *testing.T, nd *Node) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get("http://" + nd.HTTPAddr() + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func kvSet(via *Node, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var r wire.KVResponse
	return via.forward(ctx, wire.MethodKVSet, &wire.KVRequest{Key: key, Value: []byte("v")}, &r)
}

// wantSuffrage checks nd's Raft suffrage as the leader reports it via via.
func wantSuffrage(via, nd *Node, want string) error {
	st, err := statusVia(via)
	if err != nil {
		return err
	}
	for _, s := range st.Servers {
		if s.ID == nd.ID() {
			if s.Suffrage != want {
				return fmt.Errorf("%s is a %s, want %s", nd.Name(), s.Suffrage, want)
			}
			return nil
		}
	}
	return fmt.Errorf("%s is not a Raft server", nd.Name())
}
