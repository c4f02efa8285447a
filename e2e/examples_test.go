package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSeedExamplesOnThreeNodes runs every seed example against a 3-process
// cluster (node<i>=2 on node i, TPU-v3=2 on n0, 4 declared H100s on n1 and
// n2); each checks its own output
// and exits non-zero on a mismatch.
func TestSeedExamplesOnThreeNodes(t *testing.T) {
	procs := startThree(t)
	examples := []string{"customresources", "roundrobin", "colocate", "options", "nested", "clusterstate",
		"counter", "tpu_actor", "queue", "signal", "filelock", "gpus", "placement", "longtasks"}
	bin := buildExamples(t, examples...)
	for _, ex := range examples {
		t.Run(ex, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, ex))
			cmd.Env = append(os.Environ(), "NODEUP_ADDRESS="+procs[0].sock())
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "check: ") {
				// The last line first: make e2e keeps only the first line.
				t.Fatalf("%s: %v: %s\n%s", ex, err, lastLine(string(out)), out)
			}
			t.Logf("%s: %s", ex, checkLine(string(out)))
		})
	}
}

// checkLine is the example's own "check: ..." line: the driver's output
// also holds its workers' lines (log_to_driver), which may come after it.
func checkLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "check: ") {
			return l
		}
	}
	return lastLine(s)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
