package objstore

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// MaxIDLen is the longest object ID accepted, in bytes (Ray object IDs are
// 28 bytes; this leaves room for a job prefix).
const MaxIDLen = 64

// pageSize is the unit Open rounds the capacity up to: mmap and ftruncate work
// in whole pages.
const pageSize = 4096

// Location is where a sealed object lies in the arena file: Size bytes
// starting at byte Offset. The node hands it to workers on the same node, who
// resolve it against their own read-only Mapping of the file. Offset is a
// multiple of Alignment; a zero-size object has Offset 0.
type Location struct {
	Offset int64
	Size   int64
}

// within reports whether loc lies in the first n bytes, comparing without
// adding, so that a huge Offset+Size cannot overflow.
func (loc Location) within(n int64) bool {
	return loc.Offset >= 0 && loc.Size >= 0 && loc.Offset <= n && loc.Size <= n-loc.Offset
}

// object is the store's record of one allocation.
type object struct {
	id        string
	off, size int64 // size is the caller's size; the allocation is alignUp(size)
	sealed    bool
	secondary bool
	pins      int
	lru       *list.Element // set while sealed and secondary
	views     int           // outstanding Views
	dead      bool          // removed from the index while viewed: space freed with the last view
	owner     string        // the owner's RPC address, set by Label (nodeup memory)
	callSite  string        // what made it (a task's name, "put"), set by Label
}

// Store is one node's object store: a fixed-size arena file mapped shared and
// read-write, with an allocator and an index of objects by ID. All methods
// are safe for concurrent use; one mutex guards the index and allocator (the
// critical sections are short, except ReadAt, which copies under the lock).
type Store struct {
	mu       sync.Mutex
	path     string
	capacity int64
	data     []byte // the whole mapping; nil once closed
	alloc    *allocator
	objects  map[string]*object
	lru      list.List // sealed secondary copies, most recently used at the front
	log      *slog.Logger

	populated []uint64 // Prefault's bitmap of the mapping's blocks already populated (the mapping keeps them)

	views   int                  // outstanding Views, of all objects
	dead    map[*object]struct{} // removed while viewed; their space waits for the views
	unmapAt []byte               // the mapping, kept by Close until the last View is released
}

// Open creates (or truncates) the arena file dir/name, sizes it to capacity
// bytes rounded up to a multiple of 4096, and maps it shared read-write. name
// must be a plain file name. capacity must be > 0. A nil logger discards
// logs.
//
// On tmpfs (/dev/shm) the file is sparse: memory is taken as pages are first
// written, so a capacity above the free space in dir is accepted (with a
// warning) but writing past that space kills the process with SIGBUS. The file
// is created mode 0600; workers must run as the node's user.
func Open(dir, name string, capacity int64, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("open object store: capacity %d bytes: %w: must be > 0", capacity, ErrInvalid)
	}
	if capacity > (1<<62)-pageSize {
		return nil, fmt.Errorf("open object store: capacity %d bytes: %w: too large", capacity, ErrInvalid)
	}
	capacity = (capacity + pageSize - 1) &^ (pageSize - 1)
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return nil, fmt.Errorf("open object store: arena name %q: %w: must be a plain file name", name, ErrInvalid)
	}
	path := filepath.Join(dir, name)

	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open object store: %w", err)
	}
	defer f.Close() // the mapping keeps the pages; the descriptor is not needed
	fail := func(err error) (*Store, error) {
		_ = os.Remove(path)
		return nil, fmt.Errorf("open object store %s (%d bytes): %w", path, capacity, err)
	}
	if err := f.Truncate(capacity); err != nil {
		return fail(err)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(capacity), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("mmap: %w", err))
	}

	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil {
		if avail := int64(st.Bavail) * int64(st.Bsize); avail < capacity {
			logger.Warn("object store capacity exceeds free space in its directory; writing past it will crash the node (SIGBUS)",
				"path", path, "capacity_bytes", capacity, "available_bytes", avail)
		}
	}
	logger.Info("object store opened", "path", path, "capacity_bytes", capacity)
	return &Store{
		path:     path,
		capacity: capacity,
		data:     data,
		alloc:    newAllocator(capacity),
		objects:  make(map[string]*object),
		dead:     make(map[*object]struct{}),
		log:      logger,
	}, nil
}

// Path is the arena file's path, which workers pass to MapFile.
func (s *Store) Path() string { return s.path }

// Capacity is the arena size in bytes (the requested capacity rounded up to
// 4096).
func (s *Store) Capacity() int64 { return s.capacity }

// Used is the number of bytes allocated to objects, sealed or not, each
// counted rounded up to Alignment, including objects removed while a View of
// them is held (until it is released). Capacity()-Used() is free but
// possibly fragmented.
func (s *Store) Used() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alloc.used
}

// Len is the number of objects, sealed or not.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

// Create allocates size bytes for a primary copy of id and returns a writable
// slice of exactly size bytes into the arena; the caller fills it, then calls
// Seal (or Abort). As in Ray's plasma store the object is invisible to Get,
// Contains and ReadAt until sealed, and must not be written after. Primary
// copies are never evicted. size 0 is allowed and takes no space.
//
// Errors: ErrExists if id is present (sealed or not); ErrTooLarge if size
// exceeds Capacity; ErrFull if no contiguous free range fits even after
// evicting unpinned secondary copies; ErrInvalid for an empty ID, an ID longer
// than MaxIDLen, or a negative size; ErrClosed.
func (s *Store) Create(id string, size int64) ([]byte, error) {
	return s.create(id, size, false)
}

// CreateSecondary is Create for a secondary copy: a cached replica of an
// object whose primary copy lives on another node (Ray's pulled objects).
// Once sealed and while unpinned it may be evicted, least recently used
// first, to make room for a Create.
func (s *Store) CreateSecondary(id string, size int64) ([]byte, error) {
	return s.create(id, size, true)
}

func (s *Store) create(id string, size int64, secondary bool) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		return nil, fmt.Errorf("create object %s (%d bytes): %w", id, size, ErrClosed)
	}
	switch {
	case id == "" || len(id) > MaxIDLen:
		return nil, fmt.Errorf("create object %q: %w: ID must be 1 to %d bytes", id, ErrInvalid, MaxIDLen)
	case size < 0:
		return nil, fmt.Errorf("create object %s (%d bytes): %w: negative size", id, size, ErrInvalid)
	case s.objects[id] != nil:
		return nil, fmt.Errorf("create object %s (%d bytes): %w", id, size, ErrExists)
	case size > s.capacity:
		return nil, fmt.Errorf("create object %s (%d bytes): %w: capacity is %d bytes; start the node with a larger object store (nodeup start --object-store-memory)",
			id, size, ErrTooLarge, s.capacity)
	}
	var off int64
	if n := alignUp(size); n > 0 {
		var ok bool
		if off, ok = s.alloc.alloc(n); !ok && s.evictFor(n) {
			off, ok = s.alloc.alloc(n)
		}
		if !ok {
			return nil, fmt.Errorf("create object %s (%d bytes): %w: requested %d bytes, %d bytes free (largest contiguous %d bytes) of %d bytes capacity, %d objects; start the node with a larger object store (nodeup start --object-store-memory) or free objects sooner",
				id, size, ErrFull, size, s.capacity-s.alloc.used, s.alloc.largest(), s.capacity, len(s.objects))
		}
	}
	s.objects[id] = &object{id: id, off: off, size: size, secondary: secondary}
	return s.data[off : off+size : off+size], nil
}

// evictFor evicts unpinned sealed secondary copies, least recently used
// first, until a hole of need bytes exists. It first replays the evictions on
// a copy of the free list, so when even evicting every candidate would not
// open a large enough hole it evicts nothing and reports false: the cache is
// not destroyed for a Create that fails anyway.
func (s *Store) evictFor(need int64) bool {
	trial := s.alloc.clone()
	var victims []*object
	fits := false
	for e := s.lru.Back(); e != nil && !fits; e = e.Prev() {
		o := e.Value.(*object)
		if o.pins > 0 || o.size == 0 || o.views > 0 {
			continue // a viewed copy's space would not be free yet
		}
		victims = append(victims, o)
		fits = trial.release(o.off, alignUp(o.size)) >= need
	}
	if !fits {
		return false
	}
	var freed int64
	for _, o := range victims {
		freed += alignUp(o.size)
		s.remove(o)
	}
	s.log.Debug("evicted secondary copies", "objects", len(victims), "freed_bytes", freed, "needed_bytes", need)
	return true
}

// remove drops o from the index and LRU list and frees its space, or, while
// Views of it are held, marks it dead so the last release frees it.
func (s *Store) remove(o *object) {
	if o.lru != nil {
		s.lru.Remove(o.lru)
		o.lru = nil
	}
	delete(s.objects, o.id)
	if o.views > 0 {
		o.dead = true
		s.dead[o] = struct{}{}
		return
	}
	s.free(o)
}

// free returns o's space to the allocator. s.mu must be held.
func (s *Store) free(o *object) {
	if n := alignUp(o.size); n > 0 {
		s.alloc.release(o.off, n)
	}
}

// Seal makes a created object immutable and visible to Get (Ray's seal).
// Errors: ErrNotFound, ErrSealed if already sealed, ErrClosed.
func (s *Store) Seal(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup("seal", id)
	if err != nil {
		return err
	}
	if o.sealed {
		return fmt.Errorf("seal object %s: %w", id, ErrSealed)
	}
	o.sealed = true
	if o.secondary {
		o.lru = s.lru.PushFront(o)
	}
	return nil
}

// Abort drops an unsealed object and frees its space, for a producer that
// failed mid-write. The slice from Create must not be used after. Errors:
// ErrNotFound, ErrSealed (use Delete), ErrClosed.
func (s *Store) Abort(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup("abort", id)
	if err != nil {
		return err
	}
	if o.sealed {
		return fmt.Errorf("abort object %s: %w: use Delete", id, ErrSealed)
	}
	s.remove(o)
	return nil
}

// lookup finds id, sealed or not, for operation op. s.mu must be held.
func (s *Store) lookup(op, id string) (*object, error) {
	if s.data == nil {
		return nil, fmt.Errorf("%s object %s: %w", op, id, ErrClosed)
	}
	o := s.objects[id]
	if o == nil {
		return nil, fmt.Errorf("%s object %s: %w", op, id, ErrNotFound)
	}
	return o, nil
}

// Put stores data as a sealed primary copy of id: Create, copy, Seal. Errors
// are Create's.
func (s *Store) Put(id string, data []byte) error {
	return s.put(id, data, false)
}

// PutSecondary stores data as a sealed, evictable secondary copy of id (see
// CreateSecondary). Errors are Create's.
func (s *Store) PutSecondary(id string, data []byte) error {
	return s.put(id, data, true)
}

func (s *Store) put(id string, data []byte, secondary bool) error {
	buf, err := s.create(id, int64(len(data)), secondary)
	if err != nil {
		return err
	}
	// The copy runs outside the lock: the object is unsealed, so no one else
	// can see or free it except an explicit Delete, Abort or DeletePrefix.
	copy(buf, data)
	return s.Seal(id)
}

// Get returns a sealed object's Location and a view of its bytes: a subslice
// of the node's mapping, not a copy. The view is read-only by contract (the
// mapping is writable, so nothing enforces it) and valid until the object is
// deleted or evicted or the store closed; reading it after Close faults. Get
// marks a secondary copy most recently used. ok is false if id is absent or
// unsealed, or the store is closed.
func (s *Store) Get(id string) (loc Location, data []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[id]
	if s.data == nil || o == nil || !o.sealed {
		return Location{}, nil, false
	}
	s.touch(o)
	return Location{o.off, o.size}, s.data[o.off : o.off+o.size : o.off+o.size], true
}

// Locate returns where an object lives in the arena, sealed or not, so a
// client can fill an object the node created for it through its own
// MapFileWritable mapping before the node seals it. It does not touch LRU order.
func (s *Store) Locate(id string) (Location, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[id]
	if s.data == nil || o == nil {
		return Location{}, false
	}
	return Location{o.off, o.size}, true
}

// touch marks o most recently used. s.mu must be held.
func (s *Store) touch(o *object) {
	if o.lru != nil {
		s.lru.MoveToFront(o.lru)
	}
}

// Contains reports whether id is present and sealed. It does not touch the
// LRU order.
func (s *Store) Contains(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[id]
	return s.data != nil && o != nil && o.sealed
}

// Pin adds a reference that keeps a secondary copy from being evicted (for
// example while a local task reads it). Pins nest; each needs an Unpin. Pin
// works on unsealed objects too, so a pulled copy can be protected before it
// is sealed. Primary copies are never evicted, so pinning them only counts.
// Pins do not prevent Delete. Errors: ErrNotFound, ErrClosed.
func (s *Store) Pin(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup("pin", id)
	if err != nil {
		return err
	}
	o.pins++
	return nil
}

// Unpin drops a reference taken by Pin. Errors: ErrNotFound, ErrClosed, and
// an error if the object is not pinned.
func (s *Store) Unpin(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup("unpin", id)
	if err != nil {
		return err
	}
	if o.pins == 0 {
		return fmt.Errorf("unpin object %s: not pinned", id)
	}
	o.pins--
	return nil
}

// Delete frees id's space, whether it is sealed or not, primary or secondary,
// pinned or not: it is the explicit free used when the owner's reference
// count drops to zero, and it overrides pins (which only guard against
// eviction). The caller must know no one still reads the object: slices from
// Get and Mapping.Slice alias space that the next Create may reuse. Only
// Views are counted: the object leaves the index at once, but its space is
// reused after the last View of it is released. Errors: ErrNotFound,
// ErrClosed.
func (s *Store) Delete(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup("delete", id)
	if err != nil {
		return err
	}
	s.remove(o)
	return nil
}

// DeletePrefix deletes (as Delete) every object, sealed or not, whose ID
// starts with prefix, and returns how many it deleted: used to free all of a
// job's objects when the job ends. An empty prefix deletes everything. It
// returns 0 once the store is closed.
func (s *Store) DeletePrefix(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		return 0
	}
	n := 0
	for id, o := range s.objects {
		if strings.HasPrefix(id, prefix) {
			s.remove(o) // deleting the current key during range is allowed
			n++
		}
	}
	if n > 0 {
		s.log.Debug("deleted objects by prefix", "prefix", prefix, "objects", n)
	}
	return n
}

// ReadAt copies bytes of sealed object id, starting at byte off, into buf,
// with io.ReaderAt's contract: it returns the number of bytes copied and
// io.EOF if that is less than len(buf) because the object ended. It is the
// source for chunked transfer to other nodes, and marks a secondary copy most
// recently used. The copy happens under the store's lock, so keep chunks
// modest (a few MiB); View hands out the bytes without copying them. Errors: ErrNotFound (absent or unsealed), ErrInvalid
// (off < 0 or off > size), ErrClosed.
func (s *Store) ReadAt(id string, buf []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup("read", id)
	if err != nil {
		return 0, err
	}
	if !o.sealed {
		return 0, fmt.Errorf("read object %s: %w: not sealed", id, ErrNotFound)
	}
	if off < 0 || off > o.size {
		return 0, fmt.Errorf("read object %s (%d bytes) at offset %d: %w", id, o.size, off, ErrInvalid)
	}
	s.touch(o)
	n := copy(buf, s.data[o.off+off:o.off+o.size])
	if n < len(buf) {
		return n, io.EOF
	}
	return n, nil
}

// View returns a view of up to n bytes of sealed object id from byte off
// (fewer where the object ends), without copying, and holds them for the
// caller until release is called: deleting, aborting or evicting the object
// meanwhile removes it from the store at once, but its space is reused only
// after its last View is released, and Close defers unmapping the arena
// until every View is. So a View may be read outside the store's lock, for
// example written to a socket to send a chunk to another node, where ReadAt
// would copy it. The view is read-only by contract. release must be called
// once; later calls do nothing. View marks a secondary copy most recently
// used. Errors: ErrNotFound (absent or unsealed), ErrInvalid (off < 0, off >
// size or n < 0), ErrClosed.
func (s *Store) View(id string, off, n int64) (view []byte, release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup("view", id)
	if err != nil {
		return nil, nil, err
	}
	if !o.sealed {
		return nil, nil, fmt.Errorf("view object %s: %w: not sealed", id, ErrNotFound)
	}
	if off < 0 || off > o.size || n < 0 {
		return nil, nil, fmt.Errorf("view object %s (%d bytes): %d bytes at offset %d: %w", id, o.size, n, off, ErrInvalid)
	}
	s.touch(o)
	o.views++
	s.views++
	start := o.off + off
	end := start + min(n, o.size-off)
	var once sync.Once
	return s.data[start:end:end], func() { once.Do(func() { s.unview(o) }) }, nil
}

// unview releases one View of o: the last one of a dead object frees its
// space, and the last one of a closed store unmaps the arena.
func (s *Store) unview(o *object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o.views--
	s.views--
	if o.views == 0 && o.dead && s.data != nil {
		delete(s.dead, o)
		s.free(o)
	}
	if s.views == 0 && s.unmapAt != nil {
		if err := unix.Munmap(s.unmapAt); err != nil {
			s.log.Warn("object store unmap after the last view failed", "path", s.path, "err", err)
		}
		s.unmapAt = nil
	}
}

// Close unmaps the arena and removes its file. Workers' Mappings keep their
// pages until they close them. Slices from Create and Get become invalid:
// touching them faults, so Close must not race with a Put in progress or a
// reader of those slices. Views stay valid: while any is held the unmap
// waits for the last release. Every later call fails with ErrClosed (Get
// and Contains report absent, DeletePrefix 0), including a second Close.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		return fmt.Errorf("close object store %s: %w", s.path, ErrClosed)
	}
	var err error
	if s.views > 0 {
		s.unmapAt = s.data
		s.log.Info("object store closing; the unmap waits for views being sent", "path", s.path, "views", s.views)
	} else {
		err = unix.Munmap(s.data)
	}
	s.data = nil
	s.objects = nil
	s.dead = nil
	s.lru.Init()
	if rmErr := os.Remove(s.path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = errors.Join(err, rmErr)
	}
	if err != nil {
		return fmt.Errorf("close object store %s: %w", s.path, err)
	}
	s.log.Info("object store closed", "path", s.path)
	return nil
}
