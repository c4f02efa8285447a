package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// python is Debian's interpreter with the SDK's dependencies, "" if the
// machine lacks them (the test is skipped then, unless CI=true).
func python(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import msgpack, cloudpickle").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s cannot import msgpack and cloudpickle (apt-get install python3-msgpack python3-cloudpickle): %v", py, err)
		}
		t.Skipf("%s cannot import msgpack and cloudpickle: %v", py, err)
	}
	return py
}

// runPython runs examples/python/<name>.py with env and wants exit 0 and
// "<want>: ok" within limit.
func runPython(t *testing.T, py, name, want string, env []string, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, py, filepath.Join(repo, "examples", "python", name+".py"))
	cmd.Env = append(append(os.Environ(), "PYTHONPATH="+filepath.Join(repo, "python")), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), want+": ok") {
		t.Fatalf("%s: %v: %s\n%s", name, err, lastLine(string(out)), out)
	}
}

// TestPythonSeedExamplesOnThreeNodes runs the seeds' Python programs
// (examples/python, written as for Ray but for the import line) against a
// secure 3-process cluster: node<i>=2 on node i, TPU-v3=2 and Custom1 on n0,
// two V100s and Custom2 on n1, two H100s, 4 CPUs and Custom3 on n2. Each
// checks its own results; gpus (examples/python/gpus.py) checks GPU
// placement on the declared V100s and H100s. seed004 also runs with
// nothing started: init starts a node of its own.
func TestPythonSeedExamplesOnThreeNodes(t *testing.T) {
	py := python(t)
	pyFlags := []string{"--python", py}
	procs := startThreeNodes(t,
		append([]string{"--resources", "node0=2,TPU-v3=2,Custom1=1"}, pyFlags...),
		append([]string{"--resources", "node1=2,Custom2=1", "--num-gpus", "2", "--gpu-model", "V100"}, pyFlags...),
		append([]string{"--resources", "node2=2,Custom3=1", "--num-cpus", "4", "--num-gpus", "2", "--gpu-model", "H100"}, pyFlags...))
	env := []string{"NODEUP_ADDRESS=" + procs[0].sock(), "TMPDIR=" + filepath.Dir(procs[0].dataDir)}
	for _, ex := range []struct{ name, want string }{
		{"seed000_custom_resources", "seed000"},
		{"seed001_app_scheduling", "seed001"},
		{"seed002_advanced", "seed002"},
		{"sync", "sync"},
		{"seed003_core", "seed003"},
		{"seed004_key_concepts", "seed004"},
		{"gpus", "gpus"},
	} {
		t.Run(ex.name, func(t *testing.T) { runPython(t, py, ex.name, ex.want, env, 3*time.Minute) })
	}
	t.Run("seed004_with_nothing_started", func(t *testing.T) {
		// A short TMPDIR: the node's Unix socket path must fit sun_path's
		// 108 bytes, and t.TempDir's names are long.
		tmp, err := os.MkdirTemp("", "np")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(tmp) })
		runPython(t, py, "seed004_key_concepts", "seed004",
			[]string{"NODEUP_ADDRESS=", "NODEUP_BIN=" + nodeupBin, "TMPDIR=" + tmp}, 3*time.Minute)
	})
}
