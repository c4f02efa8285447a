// Package wdpack packs a working dir into the archive nodes unpack (an
// uncompressed tar cut into sha256-named chunks of wire.MaxJobChunkBytes,
// docs/jobs.md) and uploads the chunks a node lacks: shared by `nodeup job
// submit --working-dir` and the SDK's runtime env working dir.
package wdpack

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/nodeup/nodeup/wire"
)

// Call is one RPC to the node the dir is uploaded to: method with req,
// its answer decoded into resp.
type Call func(ctx context.Context, method string, req, resp any) error

// Result says what Upload did.
type Result struct {
	// Manifest names the archive; its Hash is the working dir's content
	// address.
	Manifest *wire.JobManifest
	// Uploaded is how many chunks the node lacked and got.
	Uploaded int
}

// Upload packs dir (less what exclude matches, as Excluded) into a
// temporary tar, asks the node which chunks it lacks (Job.Missing), and
// sends those (Job.Upload); with withManifest the encoded manifest goes
// too, as one more chunk, so that other nodes can fetch it by its hash (a
// runtime env working dir; `job submit` sends the manifest in its
// request). Errors: a bad exclude pattern, dir not a readable directory,
// an archive over the node's cap (both sizes named), and the node's
// refusals.
func Upload(ctx context.Context, call Call, dir string, exclude []string, withManifest bool) (*Result, error) {
	for _, p := range exclude {
		if _, err := filepath.Match(p, ""); err != nil {
			return nil, fmt.Errorf("exclude pattern %q: %w", p, err)
		}
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("working dir: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("working dir %s: not a directory", dir)
	}
	tmp, err := os.CreateTemp("", "nodeup-wd-*.tar")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := PackDir(tmp, dir, exclude); err != nil {
		return nil, fmt.Errorf("working dir %s: %w", dir, err)
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	m := &wire.JobManifest{Size: size}
	buf := make([]byte, wire.MaxJobChunkBytes)
	for off := int64(0); off < size; off += wire.MaxJobChunkBytes {
		k, err := tmp.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if err != nil && err != io.EOF {
			return nil, err
		}
		sum := sha256.Sum256(buf[:k])
		m.Chunks = append(m.Chunks, hex.EncodeToString(sum[:]))
	}
	if len(m.Chunks) > wire.MaxJobChunks {
		return nil, fmt.Errorf("working dir %s packs to %d bytes: at most %d chunks of %d bytes", dir, size, wire.MaxJobChunks, wire.MaxJobChunkBytes)
	}
	var miss wire.JobMissingResponse
	if err := call(ctx, wire.MethodJobMissing, &wire.JobMissingRequest{Chunks: m.Chunks}, &miss); err != nil {
		return nil, err
	}
	if size > miss.MaxBytes {
		return nil, fmt.Errorf("working dir %s packs to %d bytes; the node takes at most %d (its --max-working-dir): leave large files out", dir, size, miss.MaxBytes)
	}
	need := map[string]bool{}
	for _, h := range miss.Missing {
		need[h] = true
	}
	res := &Result{Manifest: m}
	for i, h := range m.Chunks {
		if !need[h] {
			continue
		}
		off := int64(i) * wire.MaxJobChunkBytes
		k, err := tmp.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if err != nil && err != io.EOF {
			return nil, err
		}
		if err := call(ctx, wire.MethodJobUpload, &wire.JobUploadRequest{Hash: h, Data: buf[:k]}, &wire.Empty{}); err != nil {
			return nil, err
		}
		delete(need, h)
		res.Uploaded++
	}
	if withManifest {
		enc := m.Encode()
		if len(enc) > wire.MaxJobChunkBytes {
			return nil, fmt.Errorf("working dir %s: its manifest of %d chunks is over %d bytes", dir, len(m.Chunks), wire.MaxJobChunkBytes)
		}
		if err := call(ctx, wire.MethodJobUpload, &wire.JobUploadRequest{Hash: m.Hash(), Data: enc}, &wire.Empty{}); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Excluded reports whether rel (slash-separated) matches a pattern, by its
// whole relative path or by its name.
func Excluded(rel string, patterns []string) bool {
	for _, p := range patterns {
		p = strings.TrimSuffix(p, "/")
		if ok, _ := filepath.Match(p, rel); ok {
			return true
		}
		if ok, _ := filepath.Match(p, filepath.Base(rel)); ok {
			return true
		}
	}
	return false
}

// CheckLink refuses, as the node that unpacks the archive would, a
// symlink (at rel) whose target is absolute or holds "..": it could point
// outside the working dir on the node. Refused here, the error names the
// link before anything is uploaded, instead of the node's refusal
// surfacing only when a worker starts there.
func CheckLink(rel, target string) error {
	if target == "" || filepath.IsAbs(target) || slices.Contains(strings.Split(filepath.ToSlash(target), "/"), "..") {
		return fmt.Errorf("symlink %s → %s: a link in a working dir must be relative and must not hold \"..\" (copy the file in, or leave it out)", rel, target)
	}
	return nil
}

// PackDir writes dir's tree as a tar to w: dirs, regular files and
// symlinks, names relative and slash-separated, in a stable order.
func PackDir(w io.Writer, dir string, exclude []string) error {
	tw := tar.NewWriter(w)
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if Excluded(rel, exclude) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		paths = append(paths, rel)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	for _, rel := range paths {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
			if err := CheckLink(rel, link); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			continue // sockets, devices, pipes: not part of a working dir
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, fi.Size())
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
	}
	return tw.Close()
}
