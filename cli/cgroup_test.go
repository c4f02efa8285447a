package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCgroup lays out a cgroup v2 hierarchy under a temp dir: files maps
// paths relative to the root ("a/b/cpu.max") to their content; self is
// the /proc/self/cgroup text.
func fakeCgroup(t *testing.T, self string, files map[string]string) (root, proc string) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "cgroup")
	for rel, text := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	proc = filepath.Join(dir, "self-cgroup")
	if err := os.WriteFile(proc, []byte(self), 0o600); err != nil {
		t.Fatal(err)
	}
	return root, proc
}

func TestCgroupLimitsTightestLevelWins(t *testing.T) {
	root, proc := fakeCgroup(t, "12:cpu:/v1-ignored\n0::/system.slice/nodeup.service\n", map[string]string{
		"cpu.max":                                "max 100000\n",
		"system.slice/cpu.max":                   "400000 100000\n",
		"system.slice/memory.max":                "2147483648\n",
		"system.slice/nodeup.service/cpu.max":    "150000 100000\n",
		"system.slice/nodeup.service/memory.max": "max\n",
	})
	lim, err := readCgroupLimits(root, proc)
	if err != nil {
		t.Fatal(err)
	}
	if lim.CPUs != 1.5 || lim.Memory != 2<<30 {
		t.Fatalf("got %+v, want 1.5 CPUs (the service's quota) and 2 GiB (the slice's memory.max)", lim)
	}
	for _, tc := range []struct {
		numCPU int
		limit  float64
		want   int64
	}{{8, 1.5, 2}, {8, 0.25, 1}, {8, 0, 8}, {2, 16, 2}, {8, 4, 4}} {
		if got := cgroupCPUs(tc.numCPU, tc.limit); got != tc.want {
			t.Errorf("cgroupCPUs(%d, %v) = %d, want %d", tc.numCPU, tc.limit, got, tc.want)
		}
	}
}

func TestCgroupLimitsAbsentMeansNone(t *testing.T) {
	for name, self := range map[string]string{"root cgroup, no files": "0::/\n", "cgroup v1 only": "4:memory:/x\n1:cpu:/\n", "empty": ""} {
		root, proc := fakeCgroup(t, self, nil)
		if lim, err := readCgroupLimits(root, proc); err != nil || lim != (cgroupLimits{}) {
			t.Errorf("%s: got %+v, %v; want no limits", name, lim, err)
		}
	}
	if lim, err := readCgroupLimits(t.TempDir(), filepath.Join(t.TempDir(), "none")); err != nil || lim != (cgroupLimits{}) {
		t.Errorf("no /proc/self/cgroup: got %+v, %v", lim, err)
	}
}

func TestCgroupLimitsMalformedFilesAreErrorsAndIgnored(t *testing.T) {
	bad := []struct{ file, text, want string }{
		{"cpu.max", "lots", `"lots"`},
		{"cpu.max", "100000", "want \"<quota> <period>\""},
		{"cpu.max", "-5 100000", `quota "-5"`},
		{"cpu.max", "0 100000", `quota "0"`},
		{"cpu.max", "100000 0", `period "0"`},
		{"cpu.max", "99999999999999999999999 1", `quota "99999999999999999999999"`},
		{"cpu.max", "1 2 3", "want"},
		{"cpu.max", strings.Repeat("9", 4096), "longer than 128 bytes"},
		{"memory.max", "1.5G", `"1.5G"`},
		{"memory.max", "-1", `"-1"`},
		{"memory.max", "\x00\xff", "want \"max\""},
	}
	for _, tc := range bad {
		root, proc := fakeCgroup(t, "0::/a\n", map[string]string{"a/" + tc.file: tc.text, "memory.max": "1073741824"})
		lim, err := readCgroupLimits(root, proc)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.file) {
			t.Errorf("%s %q: error %v, want one naming the file and %s", tc.file, tc.text, err, tc.want)
		}
		if lim.Memory != 1<<30 {
			t.Errorf("%s %q: the good root memory.max was lost: %+v", tc.file, tc.text, lim)
		}
	}
	// A path out of the hierarchy stays inside it.
	root, proc := fakeCgroup(t, "0::/../../../etc\n", map[string]string{"etc/memory.max": "4096"})
	if lim, err := readCgroupLimits(root, proc); err != nil || lim.Memory != 4096 {
		t.Errorf("0::/../../../etc: got %+v, %v; want root/etc read", lim, err)
	}
	root, proc = fakeCgroup(t, "0::relative\n", nil)
	if _, err := readCgroupLimits(root, proc); err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Errorf("relative path: got %v", err)
	}
	root, proc = fakeCgroup(t, "0::/"+strings.Repeat("x", 10000)+"\n", nil)
	if _, err := readCgroupLimits(root, proc); err == nil {
		t.Error("a 10 kB line: no error")
	}
}
