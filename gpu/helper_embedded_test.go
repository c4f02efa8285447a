//go:build gpuhelper

package gpu

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// Run by `go test -tags gpuhelper ./gpu` after `make build`: the embedded
// helper is a real executable that extracts and runs (--probe exits 0 on a
// GPU node, 3 without an NVIDIA driver).
func TestEmbeddedHelperRuns(t *testing.T) {
	if !HelperEmbedded() || !strings.HasPrefix(embeddedHelper, "\x7fELF") {
		t.Fatalf("no ELF helper embedded (%d bytes)", len(embeddedHelper))
	}
	path, err := ExtractHelper(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "--probe").CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == ExitUnavailable) {
		t.Fatalf("%s --probe: %v\n%s", path, err, out)
	}
	t.Logf("%s --probe: %v\n%s", path, err, out)
}
