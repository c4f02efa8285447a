package objects

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/nodeup/nodeup/objstore"
)

// DefaultSpillThreshold is the fraction of the object store above
// which primary copies spill to disk, as Ray's object_spilling_threshold.
const DefaultSpillThreshold = 0.8

// spillBatchMin is the most a spill pass writes beyond what the threshold
// asks (at most a tenth of the store).
const spillBatchMin = 100 << 20

// ErrSpillDiskFull is wrapped by a spill that does not fit on the spill
// directory's disk; the error names the disk's free and total bytes and
// the object store's capacity. Nothing is lost: the objects stay in memory
// and the Create that wanted room fails with object_store_full.
var ErrSpillDiskFull = errors.New("spill disk full")

// spiller moves primary copies that no reader pins from the store to
// files under <data-dir>/spill when the store is above its threshold, and
// back on demand (Ray's object spilling). One pass writes its objects
// into one file (Ray's fused spill files); a file is removed once none of
// its objects is left in it.
type spiller struct {
	store     *objstore.Store
	dir       string
	threshold float64 // 0: never spill
	nodeName  string
	log       *slog.Logger

	pass     sync.Mutex // one spill pass at a time
	restores singleflight.Group

	mu    sync.Mutex
	index map[string]*spilledObj // by key
	seq   int

	spilled, restored atomic.Int64 // bytes, since start
}

// spillFile is one fused file; live counts its objects not yet restored
// or freed.
type spillFile struct {
	path string
	live int
}

// spilledObj is where one spilled object lies.
type spilledObj struct {
	file            *spillFile
	off, size       int64
	owner, callSite string
}

func newSpiller(store *objstore.Store, dataDir string, threshold float64, nodeName string, log *slog.Logger) *spiller {
	dir := filepath.Join(dataDir, "spill")
	// Spilled objects do not survive a restart (their owners are gone).
	_ = os.RemoveAll(dir)
	return &spiller{store: store, dir: dir, threshold: threshold, nodeName: nodeName, log: log, index: map[string]*spilledObj{}}
}

// makeRoom spills primary copies, largest first, until need more bytes
// fit under the threshold with a batch's margin (a tenth of the store, at
// most spillBatchMin), or none is left to spill. It fails only when
// the spill disk lacks the room (ErrSpillDiskFull) or a write fails; a
// store that still cannot fit need is for the Create to report.
func (sp *spiller) makeRoom(need int64) error {
	if sp == nil || sp.threshold <= 0 {
		return nil
	}
	limit := int64(sp.threshold * float64(sp.store.Capacity()))
	if sp.store.Used()+need <= limit {
		return nil
	}
	sp.pass.Lock()
	defer sp.pass.Unlock()
	excess := sp.store.Used() + need - limit
	if excess <= 0 {
		return nil
	}
	// Spill a batch below the threshold, not just the excess, so small
	// objects go out in few larger files and the next Creates find room
	// (Ray's min_spilling_size is 100 MiB).
	cands := sp.store.SpillCandidates(excess + min(sp.store.Capacity()/10, spillBatchMin))
	if len(cands) == 0 {
		return nil
	}
	return sp.spillBatch(cands)
}

// force spills primary copies adding up to need bytes whatever the
// threshold: a Create found no hole large enough under it (fragmentation).
func (sp *spiller) force(need int64) error {
	sp.pass.Lock()
	defer sp.pass.Unlock()
	cands := sp.store.SpillCandidates(need)
	if len(cands) == 0 {
		return nil
	}
	return sp.spillBatch(cands)
}

// spillBatch writes cands into one new file, records them, then deletes
// each from the store unless a reader pinned it meanwhile.
func (sp *spiller) spillBatch(cands []objstore.Entry) error {
	var total int64
	for _, c := range cands {
		total += c.Size
	}
	if err := os.MkdirAll(sp.dir, 0o700); err != nil {
		return fmt.Errorf("spill %d objects (%d bytes): %w", len(cands), total, err)
	}
	if free, size, ok := spillDiskSpace(sp.dir); ok && free < total {
		return sp.fullError(total, free, size, nil)
	}
	sp.mu.Lock()
	sp.seq++
	path := filepath.Join(sp.dir, "spill-"+strconv.Itoa(sp.seq)+".bin")
	sp.mu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("spill %d objects (%d bytes): %w", len(cands), total, err)
	}
	type placed struct {
		e   objstore.Entry
		off int64
	}
	var done []placed
	var off int64
	for _, c := range cands {
		view, release, err := sp.store.View(c.ID, 0, c.Size)
		if err != nil {
			continue // freed meanwhile
		}
		_, err = f.Write(view)
		release()
		if err != nil {
			_ = f.Close()
			_ = os.Remove(path)
			if errors.Is(err, unix.ENOSPC) {
				free, size, _ := spillDiskSpace(sp.dir)
				return sp.fullError(total, free, size, err)
			}
			return fmt.Errorf("spill object %s (%d bytes) to %s: %w", c.ID, c.Size, path, err)
		}
		done = append(done, placed{c, off})
		off += c.Size
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		if errors.Is(err, unix.ENOSPC) {
			free, size, _ := spillDiskSpace(sp.dir)
			return sp.fullError(total, free, size, err)
		}
		return fmt.Errorf("spill %d objects to %s: %w", len(done), path, err)
	}
	file := &spillFile{path: path}
	sp.mu.Lock()
	for _, p := range done {
		sp.index[p.e.ID] = &spilledObj{file: file, off: p.off, size: p.e.Size, owner: p.e.Owner, callSite: p.e.CallSite}
		file.live++
	}
	sp.mu.Unlock()
	var bytes int64
	n := 0
	for _, p := range done {
		if sp.store.DeleteUnpinned(p.e.ID) {
			bytes += p.e.Size
			n++
		} else {
			sp.forget(p.e.ID) // a reader pinned it, or it was freed
		}
	}
	sp.mu.Lock()
	if file.live == 0 {
		_ = os.Remove(path)
	}
	sp.mu.Unlock()
	sp.spilled.Add(bytes)
	sp.log.Debug("spilled objects", "objects", n, "bytes", bytes, "file", path)
	return nil
}

// fullError is ErrSpillDiskFull naming both capacities.
func (sp *spiller) fullError(want, free, size int64, cause error) error {
	msg := fmt.Sprintf("node %s: %v: spilling %d bytes to %s needs more than the %d bytes free of that disk's %d bytes; the object store holds %d of its %d bytes capacity; free objects, give the data dir a larger disk, or start the node with a larger --object-store-memory",
		sp.nodeName, ErrSpillDiskFull, want, sp.dir, free, size, sp.store.Used(), sp.store.Capacity())
	if cause != nil {
		msg += " (" + cause.Error() + ")"
	}
	return fmt.Errorf("%s: %w", msg, ErrSpillDiskFull)
}

// spillDiskSpace is diskSpace, a variable for tests.
var spillDiskSpace = diskSpace

// diskSpace is the free (for unprivileged users) and total bytes of the
// file system holding dir.
func diskSpace(dir string) (free, size int64, ok bool) {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return 0, 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), true
}

// has reports whether key is spilled.
func (sp *spiller) has(key string) bool {
	if sp == nil {
		return false
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.index[key] != nil
}

// restore reads a spilled object back into the store as a primary copy
// (making room first, which may spill others). Concurrent restores of a
// key share one.
func (sp *spiller) restore(key string) error {
	_, err, _ := sp.restores.Do(key, func() (any, error) {
		sp.mu.Lock()
		rec := sp.index[key]
		sp.mu.Unlock()
		if rec == nil || sp.store.Contains(key) {
			return nil, nil
		}
		roomErr := sp.makeRoom(rec.size)
		dst, err := sp.store.Create(key, rec.size)
		if err != nil {
			if roomErr != nil {
				err = fmt.Errorf("%w; %w", err, roomErr)
			}
			return nil, fmt.Errorf("restore spilled object %s (%d bytes): %w", key, rec.size, err)
		}
		f, err := os.Open(rec.file.path)
		if err == nil {
			sp.store.Prefault(dst)
			_, err = f.ReadAt(dst, rec.off)
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			_ = f.Close()
		}
		if err != nil {
			_ = sp.store.Abort(key)
			return nil, fmt.Errorf("restore spilled object %s (%d bytes) from %s at byte %d: %w", key, rec.size, rec.file.path, rec.off, err)
		}
		if rec.owner != "" || rec.callSite != "" {
			_ = sp.store.Label(key, rec.owner, rec.callSite)
		}
		if err := sp.store.Seal(key); err != nil {
			return nil, fmt.Errorf("restore spilled object %s: %w (freed meanwhile)", key, err)
		}
		sp.forget(key)
		sp.restored.Add(rec.size)
		return nil, nil
	})
	return err
}

// forget drops key's record, removing its file with the file's last
// object.
func (sp *spiller) forget(key string) {
	if sp == nil {
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.forgetLocked(key)
}

func (sp *spiller) forgetLocked(key string) {
	rec := sp.index[key]
	if rec == nil {
		return
	}
	delete(sp.index, key)
	if rec.file.live--; rec.file.live == 0 {
		_ = os.Remove(rec.file.path)
	}
}

// forgetPrefix forgets every key under prefix (a job's objects when it
// ends).
func (sp *spiller) forgetPrefix(prefix string) {
	if sp == nil {
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for key := range sp.index {
		if strings.HasPrefix(key, prefix) {
			sp.forgetLocked(key)
		}
	}
}

// stats are the spilled objects and bytes now on disk.
func (sp *spiller) stats() (objects int, bytes int64) {
	if sp == nil {
		return 0, 0
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, rec := range sp.index {
		bytes += rec.size
	}
	return len(sp.index), bytes
}

// list is every spilled object as a store entry (Spilled set).
func (sp *spiller) list() []objstore.Entry {
	if sp == nil {
		return nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	out := make([]objstore.Entry, 0, len(sp.index))
	for key, rec := range sp.index {
		out = append(out, objstore.Entry{ID: key, Size: rec.size, Sealed: true, Owner: rec.owner, CallSite: rec.callSite, Spilled: true})
	}
	return out
}
