package cli

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/testutil"
)

// packDir writes the working dir as a tar of relative, slash-separated
// names in a stable order, leaving out what --exclude matches (by relative
// path or by name; an excluded dir with everything under it) and keeping
// symlinks as links.
func TestPackDirExcludes(t *testing.T) {
	dir := t.TempDir()
	for path, body := range map[string]string{
		"driver": "bin", "data/a.txt": "a", "data/skip.bin": "x", ".git/HEAD": "ref", "sub/deep/keep.txt": "k",
	} {
		p := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("data/a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := packDir(&buf, dir, []string{"*.bin", ".git"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == "link" && (hdr.Typeflag != tar.TypeSymlink || hdr.Linkname != "data/a.txt") {
			t.Fatalf("link packed as %+v", hdr)
		}
		names = append(names, hdr.Name)
	}
	want := []string{"data/", "data/a.txt", "driver", "link", "sub/", "sub/deep/", "sub/deep/keep.txt"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("packed %q, want %q", names, want)
	}
}

// runJob runs `nodeup job args...` and returns its stdout.
func runJob(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, append([]string{"job"}, args...)...)
}

// From the CLI: a job that ignores SIGTERM is STOPPED by job stop after
// its grace period; job delete refuses it while it runs, naming RUNNING,
// and deletes it once stopped, after which status finds no such job.
func TestJobStopAndDeleteFromTheCLI(t *testing.T) {
	nd := clustertest.Start(t, 1, func(_ int, c *cluster.Config) { c.Insecure = true })[0]
	addr := nd.SocketAddr()
	// The node's own registration in Raft trails its start a moment.
	testutil.Until(t, 10*time.Second, "job deaf submitted", func() error {
		_, err := runJob(t, "submit", "--address", addr, "--no-wait", "--job-id", "deaf", "--", "/bin/sh", "-c", "trap '' TERM; sleep 1000")
		return err
	})
	if _, err := runJob(t, "delete", "--address", addr, "deaf"); err == nil || !strings.Contains(err.Error(), "RUNNING") {
		t.Fatalf("delete of a running job: %v, want refused naming RUNNING", err)
	}
	out, err := runJob(t, "stop", "--address", addr, "--grace", "200ms", "deaf")
	if err != nil || !strings.Contains(out, "job deaf STOPPED") {
		t.Fatalf("stop: %q, %v", out, err)
	}
	if out, err := runJob(t, "delete", "--address", addr, "deaf"); err != nil || !strings.Contains(out, "job deaf deleted (was STOPPED)") {
		t.Fatalf("delete: %q, %v", out, err)
	}
	if _, err := runJob(t, "status", "--address", addr, "deaf"); err == nil || !strings.Contains(err.Error(), "no such job") {
		t.Fatalf("status of a deleted job: %v, want no such job", err)
	}
}
