package cluster

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nodeup/nodeup/wire"
)

// A submitted job's working dir travels as an uncompressed tar cut into
// chunks of wire.MaxJobChunkBytes, each named by its sha256, so a node
// keeps every chunk once (content-addressed, as Ray's working_dir package
// URIs) and an unchanged dir is not sent again. The node a job runs on
// fetches the chunks it lacks from the entry node and unpacks the archive
// once per manifest into <data-dir>/jobs/wd/<manifest hash>. The archive
// is hostile input: unpackJobArchive bounds it and refuses any entry that
// could write or point outside the dir.

// Errors of the working-dir package, for callers that branch on them.
var (
	// ErrJobArchive wraps every refusal of an archive's content.
	ErrJobArchive = errors.New("working dir archive refused")
	// ErrWorkingDirTooLarge means a working dir is over the node's cap.
	ErrWorkingDirTooLarge = errors.New("working dir over the size cap")
)

// maxArchiveEntries bounds the entries of one archive.
const maxArchiveEntries = 100000

// maxArchiveName bounds an entry's path (and a link's target), in bytes.
const maxArchiveName = 1024

// chunkCacheDirs is how many working dirs of the largest size the chunk
// cache keeps: past that, the least recently written chunks go.
const chunkCacheDirs = 4

// jobChunks is a node's chunk cache, <data-dir>/jobs/chunks/<sha256>,
// bounded to max bytes: an upload past it evicts the oldest chunks (a
// submit whose chunks went meanwhile is refused, naming how many are
// missing, and the CLI's next try uploads them again).
type jobChunks struct {
	dir string
	max int64

	mu   sync.Mutex
	size int64 // bytes in dir; -1 until counted
}

func (c *jobChunks) path(hash string) string { return filepath.Join(c.dir, hash) }

// has reports whether the chunk named hash is cached.
func (c *jobChunks) has(hash string) bool {
	_, err := os.Stat(c.path(hash))
	return err == nil
}

// put stores data as the chunk hash after checking its size and hash.
func (c *jobChunks) put(hash string, data []byte) error {
	if err := wire.CheckChunkHash(hash); err != nil {
		return err
	}
	if len(data) > wire.MaxJobChunkBytes {
		return fmt.Errorf("chunk %s: %d bytes, at most %d", hash, len(data), wire.MaxJobChunkBytes)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != hash {
		return fmt.Errorf("chunk named %s has sha256 %s", hash, got)
	}
	if c.has(hash) {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.dir, "tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.size < 0 {
		c.size = 0
		ents, _ := os.ReadDir(c.dir)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && !strings.HasPrefix(e.Name(), "tmp-") {
				c.size += fi.Size()
			}
		}
	}
	if err := os.Rename(tmp.Name(), c.path(hash)); err != nil {
		return err
	}
	c.size += int64(len(data))
	if c.size > c.max {
		c.evict(hash)
	}
	return nil
}

// evict removes the oldest chunks but keep until the cache holds at most
// three quarters of its cap. c.mu is held.
func (c *jobChunks) evict(keep string) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	type chunk struct {
		name string
		size int64
		mod  time.Time
	}
	var cs []chunk
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || e.Name() == keep || strings.HasPrefix(e.Name(), "tmp-") {
			continue
		}
		cs = append(cs, chunk{e.Name(), fi.Size(), fi.ModTime()})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].mod.Before(cs[j].mod) })
	for _, ch := range cs {
		if c.size <= c.max/4*3 {
			return
		}
		if os.Remove(filepath.Join(c.dir, ch.name)) == nil {
			c.size -= ch.size
		}
	}
}

// get reads a cached chunk.
func (c *jobChunks) get(hash string) ([]byte, error) {
	if err := wire.CheckChunkHash(hash); err != nil {
		return nil, err
	}
	return os.ReadFile(c.path(hash))
}

// manifestHash is a manifest's content address (wire.JobManifest.Hash):
// the sha256 of its chunk names and size.
func manifestHash(m *wire.JobManifest) string { return m.Hash() }

// checkManifest checks a manifest's shape against the cap (bytes).
func checkManifest(m *wire.JobManifest, maxBytes int64) error {
	if m.Size < 0 || m.Size > maxBytes {
		return fmt.Errorf("%w: working dir archive of %d bytes; this node takes at most %d (its --max-working-dir); exclude large files with --exclude", ErrWorkingDirTooLarge, m.Size, maxBytes)
	}
	want := (m.Size + wire.MaxJobChunkBytes - 1) / wire.MaxJobChunkBytes
	if int64(len(m.Chunks)) != want || len(m.Chunks) > wire.MaxJobChunks {
		return fmt.Errorf("%w: manifest of %d chunks for %d bytes, want %d", ErrJobArchive, len(m.Chunks), m.Size, want)
	}
	for _, c := range m.Chunks {
		if err := wire.CheckChunkHash(c); err != nil {
			return fmt.Errorf("%w: %v", ErrJobArchive, err)
		}
	}
	return nil
}

// jobChunkReader reads the archive a manifest names from cached chunks,
// checking each chunk's length (all but the last full).
type jobChunkReader struct {
	c      *jobChunks
	m      *wire.JobManifest
	i      int
	cur    []byte
	remain int64
}

func (r *jobChunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.i == len(r.m.Chunks) {
			return 0, io.EOF
		}
		b, err := r.c.get(r.m.Chunks[r.i])
		if err != nil {
			return 0, fmt.Errorf("chunk %d of %d: %w", r.i+1, len(r.m.Chunks), err)
		}
		want := min(r.remain, wire.MaxJobChunkBytes)
		if int64(len(b)) != want {
			return 0, fmt.Errorf("%w: chunk %d is %d bytes, want %d", ErrJobArchive, r.i+1, len(b), want)
		}
		r.remain -= want
		r.cur = b
		r.i++
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// unpackJobArchive unpacks the tar read from r into the new dir dst,
// refusing (ErrJobArchive, naming the entry) absolute names, names with
// "..", NUL or over maxArchiveName bytes, any entry type but a dir, a
// regular file and a symlink, a symlink whose target is absolute or holds
// "..", a name given twice, more than maxArchiveEntries entries, and more
// than maxBytes of file content in all (ErrWorkingDirTooLarge). Modes keep
// only the permission bits, at most 0755. Writes go through os.Root, so
// nothing lands outside dst even if a check above were wrong.
func unpackJobArchive(r io.Reader, dst string, maxBytes int64) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: entry %d: %v", ErrJobArchive, n+1, err)
		}
		if n >= maxArchiveEntries {
			return fmt.Errorf("%w: more than %d entries", ErrJobArchive, maxArchiveEntries)
		}
		name, err := archiveName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue
		}
		perm := fs.FileMode(hdr.Mode).Perm() & 0o755
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, perm|0o700); err != nil {
				return fmt.Errorf("%w: dir %q: %v", ErrJobArchive, name, err)
			}
		case tar.TypeReg:
			if hdr.Size < 0 || total+hdr.Size > maxBytes {
				return fmt.Errorf("%w: file %q takes the working dir past %d bytes", ErrWorkingDirTooLarge, name, maxBytes)
			}
			total += hdr.Size
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return fmt.Errorf("%w: dir of %q: %v", ErrJobArchive, name, err)
				}
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm|0o600)
			if err != nil {
				return fmt.Errorf("%w: file %q: %v", ErrJobArchive, name, err)
			}
			_, err = io.CopyN(f, tr, hdr.Size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%w: file %q: %v", ErrJobArchive, name, err)
			}
		case tar.TypeSymlink:
			t := hdr.Linkname
			if t == "" || len(t) > maxArchiveName || strings.IndexByte(t, 0) >= 0 || path.IsAbs(t) || slices.Contains(strings.Split(t, "/"), "..") {
				return fmt.Errorf("%w: symlink %q → %q: a link must be relative and must not hold \"..\" (it could point outside the working dir)", ErrJobArchive, name, t)
			}
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return fmt.Errorf("%w: dir of %q: %v", ErrJobArchive, name, err)
				}
			}
			if err := root.Symlink(t, name); err != nil {
				return fmt.Errorf("%w: symlink %q: %v", ErrJobArchive, name, err)
			}
		default:
			return fmt.Errorf("%w: entry %q of type %q: only dirs, regular files and symlinks", ErrJobArchive, name, string(hdr.Typeflag))
		}
	}
}

// archiveName checks and cleans an entry's name.
func archiveName(raw string) (string, error) {
	if raw == "" || len(raw) > maxArchiveName || strings.IndexByte(raw, 0) >= 0 {
		return "", fmt.Errorf("%w: entry name %q: want 1 to %d bytes, no NUL", ErrJobArchive, raw, maxArchiveName)
	}
	if path.IsAbs(raw) || strings.HasPrefix(raw, "\\") {
		return "", fmt.Errorf("%w: entry %q: absolute names are refused", ErrJobArchive, raw)
	}
	if slices.Contains(strings.Split(strings.ReplaceAll(raw, "\\", "/"), "/"), "..") {
		return "", fmt.Errorf("%w: entry %q: names with \"..\" are refused", ErrJobArchive, raw)
	}
	return path.Clean(raw), nil
}
