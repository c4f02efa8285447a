package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// TestChaosKillLeaderDuringJobSubmit: twelve `job submit --no-wait` calls,
// one after another through a follower, while the leader gets SIGKILL
// after the fourth. A submission refused during the election is resent
// with the same job ID, as an operator's script would; in the end each of
// the twelve jobs exists exactly once and succeeded, and none was run
// twice (a resend of one already made must be refused, not run again).
func TestChaosKillLeaderDuringJobSubmit(t *testing.T) {
	chaosLong(t)
	procs := startJobCluster(t)
	st, err := status(t, procs[0].addr())
	if err != nil {
		t.Fatal(err)
	}
	leader := leaderProc(t, st, procs)
	via := procs[0]
	if via == leader {
		via = procs[1]
	}
	const jobs = 12
	ran := filepath.Join(t.TempDir(), "ran") // each job's entrypoint appends its ID
	var killed time.Time
	resent := 0
	for i := 0; i < jobs; i++ {
		if i == 4 {
			if err := leader.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = time.Now()
		}
		id := fmt.Sprintf("chaos-%d", i)
		testutil.Until(t, 60*time.Second, "job "+id+" submitted", func() error {
			_, errOut, code := nodeup(t, nil, "job", "submit", "--address", via.addr(), "--no-wait", "--job-id", id, "--", "sh", "-c", "echo "+id+" >> "+ran)
			if code == 0 {
				return nil
			}
			resent++
			if strings.Contains(errOut, "exists") { // an earlier try made it
				return nil
			}
			return fmt.Errorf("exit %d: %s", code, strings.TrimSpace(errOut))
		})
	}
	t.Logf("%d jobs submitted, %d resends, %s after the leader's SIGKILL", jobs, resent, time.Since(killed).Round(100*time.Millisecond))
	testutil.Until(t, 60*time.Second, "every job SUCCEEDED exactly once", func() error {
		list, err := jobList(t, via.addr())
		if err != nil {
			return err
		}
		n := 0
		for id, j := range list {
			if strings.HasPrefix(id, "chaos-") {
				n++
				if j.Status != "SUCCEEDED" {
					return fmt.Errorf("job %s %s (%s)", id, j.Status, j.Message)
				}
			}
		}
		if n != jobs {
			return fmt.Errorf("%d chaos jobs listed, want %d", n, jobs)
		}
		return nil
	})
	b, err := os.ReadFile(ran)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, id := range strings.Fields(string(b)) {
		runs[id]++
	}
	for i := 0; i < jobs; i++ {
		if id := fmt.Sprintf("chaos-%d", i); runs[id] != 1 {
			t.Errorf("job %s ran %d times, want exactly once", id, runs[id])
		}
	}
	checkRSS(t, procs...)
}
