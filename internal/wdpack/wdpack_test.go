package wdpack

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// PackDir writes the working dir as a tar of relative, slash-separated
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
	if err := PackDir(&buf, dir, []string{"*.bin", ".git"}); err != nil {
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

// A symlink the node would refuse (absolute, or with "..") fails the pack,
// naming the link, before anything is uploaded.
func TestPackDirRefusesLinksOut(t *testing.T) {
	for _, target := range []string{"/etc/hosts", "../outside", "a/../../b"} {
		dir := t.TempDir()
		if err := os.Symlink(target, filepath.Join(dir, "out")); err != nil {
			t.Fatal(err)
		}
		err := PackDir(io.Discard, dir, nil)
		if err == nil || !strings.Contains(err.Error(), "symlink out → "+target) {
			t.Errorf("a link to %s: %v, want it refused, naming the link", target, err)
		}
	}
}
