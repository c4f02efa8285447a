package pyembed

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The binary carries exactly python/nodeup's .py files (nodeup/util
// too): Install writes each file
// byte for byte, and nothing else.
func TestInstallWritesTheSources(t *testing.T) {
	dir := t.TempDir()
	if err := Install(dir); err != nil {
		t.Fatal(err)
	}
	srcs := pySources(t, "nodeup")
	if len(srcs) == 0 {
		t.Fatal("no sources in python/nodeup")
	}
	for _, src := range srcs {
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, src))
		if err != nil {
			t.Fatalf("installed package lacks %s: %v", src, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("installed %s differs from the source", src)
		}
	}
	installed := pySources(t, filepath.Join(dir, "nodeup"))
	if len(installed) != len(srcs) {
		t.Errorf("installed %d files, want the %d sources (subpackages such as nodeup/util included)", len(installed), len(srcs))
	}
}

// pySources lists the .py files under root, subdirectories included
// (caches such as __pycache__ left out).
func pySources(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".py") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Path extracts once into a directory keyed by the content hash, and a
// second call finds it there.
func TestPathKeyedByHash(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	p1, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p1) != Hash()[:16] {
		t.Errorf("Path() = %s, want a directory named by the hash %s", p1, Hash()[:16])
	}
	if _, err := os.Stat(filepath.Join(p1, "nodeup", "worker.py")); err != nil {
		t.Fatalf("extracted package lacks worker.py: %v", err)
	}
	p2, err := Path()
	if err != nil || p2 != p1 {
		t.Fatalf("second Path() = %s, %v; want %s", p2, err, p1)
	}
}
