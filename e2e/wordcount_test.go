package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestWordcountOnThreeNodes is the README's main job at CI size: the
// wordcount driver against a 3-process cluster, over a slice of the Go
// standard library, checked against its own single-process count.
func TestWordcountOnThreeNodes(t *testing.T) {
	procs := startThree(t)
	bin := filepath.Join(buildExamples(t, "wordcount"), "wordcount")
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(strings.TrimSpace(string(goroot)), "src", "strings")
	cmd := exec.Command(bin, "-dir", dir, "-batch", "4", "-top", "3")
	cmd.Env = append(os.Environ(), "NODEUP_ADDRESS="+procs[0].sock())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("wordcount: %v\n%s", err, out)
	}
	for _, want := range []string{"round-robin over node0..node2", "check: distributed counts equal the single-process count", "total words: "} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("wordcount output lacks %q:\n%s", want, out)
		}
	}
}
