package objstore

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Mapping is a worker's read-only view of a node's arena file: the client
// side of the store (a plasma client's mmap of the store's memory). It reads
// objects in place from Locations the node hands out; it knows nothing of
// which objects exist, so the node must keep an object alive while a worker
// reads it. Safe for concurrent use.
type Mapping struct {
	mu   sync.RWMutex
	path string
	data []byte // nil once closed
}

// MapFile maps the whole arena file at path (a Store's Path) read-only and
// MAP_SHARED, so bytes the node writes are visible without copying. The
// descriptor is closed once mapped. Errors: the file cannot be opened or is
// empty, or mmap fails.
func MapFile(path string) (*Mapping, error) { return mapFile(path, false) }

// MapFileWritable maps the arena read-write, for a client that fills objects
// the node allocated for it (plasma's create, write, seal). Slices of it are
// writable: use a MapFile mapping to hand out read-only views.
func MapFileWritable(path string) (*Mapping, error) { return mapFile(path, true) }

func mapFile(path string, writable bool) (*Mapping, error) {
	flags, prot := os.O_RDONLY, unix.PROT_READ
	if writable {
		flags, prot = os.O_RDWR, unix.PROT_READ|unix.PROT_WRITE
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, fmt.Errorf("map object store: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("map object store: %w", err)
	}
	size := fi.Size()
	if size <= 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("map object store %s: %w: file size %d bytes", path, ErrInvalid, size)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map object store %s (%d bytes): mmap: %w", path, size, err)
	}
	return &Mapping{path: path, data: data}, nil
}

// Slice returns loc's bytes as a view of the mapping, without copying. Writing
// to it faults (the pages are mapped read-only). It is valid until Close and
// shows the object's bytes only while the node keeps the object. Errors:
// ErrInvalid if loc is negative or runs past the end of the file, ErrClosed.
func (m *Mapping) Slice(loc Location) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.data == nil {
		return nil, fmt.Errorf("slice %s at %+v: %w", m.path, loc, ErrClosed)
	}
	if !loc.within(int64(len(m.data))) {
		return nil, fmt.Errorf("slice %s at %+v: %w: mapping is %d bytes", m.path, loc, ErrInvalid, len(m.data))
	}
	end := loc.Offset + loc.Size
	return m.data[loc.Offset:end:end], nil
}

// Close unmaps the file; slices from Slice become invalid (touching them
// faults). A second Close returns ErrClosed.
func (m *Mapping) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return fmt.Errorf("close mapping %s: %w", m.path, ErrClosed)
	}
	err := unix.Munmap(m.data)
	m.data = nil
	if err != nil {
		return fmt.Errorf("close mapping %s: %w", m.path, err)
	}
	return nil
}

// Prefault maps the pages under loc writable in this process in one system
// call, before a client fills a created object through a MapFileWritable
// mapping: one call instead of a page fault per 4 KiB page (a 100 MiB Put
// would take 25,600). It works in whole pages, so the pages around loc's
// ends become resident too, bytes unchanged. Best effort, as Store.Prefault:
// nothing happens for a bad loc, after Close, or without
// MADV_POPULATE_WRITE (before Linux 5.14, or not Linux).
func (m *Mapping) Prefault(loc Location) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := int64(len(m.data))
	if m.data == nil || loc.Size == 0 || !loc.within(n) {
		return
	}
	page := int64(os.Getpagesize())
	start := loc.Offset / page * page
	end := min((loc.Offset+loc.Size+page-1)/page*page, n)
	populateWrite(m.data[start:end])
}
