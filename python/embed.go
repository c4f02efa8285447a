// Package pyembed carries nodeup's Python package (python/nodeup) inside
// the nodeup binary, so an air-gapped machine needs nothing but the binary
// and Debian's python3-msgpack and python3-cloudpickle: `nodeup python
// install` writes it out, `nodeup python path` extracts it once into the
// user's cache, and a node puts that directory on its Python workers'
// PYTHONPATH (docs/python.md).
package pyembed

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"sync"
)

//go:embed nodeup/*.py nodeup/util/*.py
var files embed.FS

// Hash is the hex sha256 over the package's file names and contents: the
// cache directory Path extracts into is keyed by it, so two nodeup
// versions never share one.
func Hash() string {
	hashOnce.Do(func() {
		h := sha256.New()
		for _, name := range names() {
			b, _ := files.ReadFile(name) // embedded: always readable
			fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
			h.Write(b)
		}
		hash = hex.EncodeToString(h.Sum(nil))
	})
	return hash
}

var (
	hashOnce sync.Once
	hash     string
)

// names lists the embedded files ("nodeup/__init__.py", …), sorted.
func names() []string {
	var out []string
	_ = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// Install writes the package under dir as dir/nodeup/*.py (dir is created
// with mode 0755 if missing; existing files of the package are replaced),
// so that PYTHONPATH=dir makes `import nodeup` work. The error names the
// file that could not be written.
func Install(dir string) error {
	for _, name := range names() {
		b, _ := files.ReadFile(name)
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("install nodeup Python package: %w", err)
		}
		tmp := dst + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return fmt.Errorf("install nodeup Python package: %w", err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			return fmt.Errorf("install nodeup Python package: %w", err)
		}
	}
	return nil
}

// Path returns a directory holding this binary's package (as Install
// writes it), extracting it on first use under
// <user cache dir>/nodeup/python/<Hash()[:16]>, or under os.TempDir() when
// there is no cache dir. The directory is only ever written whole: a
// concurrent caller extracts into a temporary sibling and renames it.
func Path() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "nodeup", "python", Hash()[:16])
	if _, err := os.Stat(filepath.Join(dir, "nodeup", "__init__.py")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("nodeup Python package cache: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), path.Base(dir)+".tmp")
	if err != nil {
		return "", fmt.Errorf("nodeup Python package cache: %w", err)
	}
	if err := Install(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp) // another process won the race: use its copy
		if _, serr := os.Stat(filepath.Join(dir, "nodeup", "__init__.py")); serr != nil {
			return "", fmt.Errorf("nodeup Python package cache: %w", err)
		}
	}
	return dir, nil
}
