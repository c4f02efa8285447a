package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/testutil"
)

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
