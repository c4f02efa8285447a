package worker

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/wire"
)

// inlineMax is the largest value, in bytes, kept in messages; larger ones go
// to the node's shared-memory object store (DESIGN: ≤ 100 KiB inline).
const inlineMax = wire.InlineMax

// arena maps the local node's object store file: read-only for the views Get
// hands out (a write to one faults instead of corrupting the object), and
// read-write to fill objects this process creates.
type arena struct {
	once   sync.Once
	path   string
	ro, rw *objstore.Mapping
	err    error

	sizeOnce sync.Once
	size     int64 // the store file's size in bytes; 0 if unknown
}

// capacity returns the local object store's size in bytes (its file's),
// or 0 when it is not known.
func (a *arena) capacity() int64 {
	a.sizeOnce.Do(func() {
		if a.path == "" {
			return
		}
		if fi, err := os.Stat(a.path); err == nil {
			a.size = fi.Size()
		}
	})
	return a.size
}

func (a *arena) open() error {
	a.once.Do(func() {
		if a.path == "" {
			a.err = fmt.Errorf("the node did not say where its object store is")
			return
		}
		if a.ro, a.err = objstore.MapFile(a.path); a.err != nil {
			return
		}
		a.rw, a.err = objstore.MapFileWritable(a.path)
	})
	return a.err
}

func (a *arena) close() {
	if a.ro != nil {
		_ = a.ro.Close()
	}
	if a.rw != nil {
		_ = a.rw.Close()
	}
}

// storeLarge writes the concatenation of parts to the local node's object
// store as object id of this job (create, write through the mapping, seal:
// plasma's protocol); each part is copied straight into the store (a Put of
// a []byte writes its msgpack header and the caller's bytes, with no encoded
// copy in between). owner and site label the object for `nodeup memory`
// (the owner's RPC address; a task's name or "put"). Errors name the object
// and say when the store is full.
func (cw *coreWorker) storeLarge(ctx context.Context, id, owner, site string, parts ...[]byte) (*wire.ObjectLoc, error) {
	if err := cw.arena.open(); err != nil {
		return nil, fmt.Errorf("store object %s: %w", id, err)
	}
	var size int64
	for _, p := range parts {
		size += int64(len(p))
	}
	key := cw.jobID + "/" + id
	var loc wire.ObjectLocation
	var start time.Time
	for attempt := 0; ; attempt++ {
		err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodObjectCreate, &wire.ObjectCreateRequest{Key: key, Size: size, Owner: owner, CallSite: site}, &loc)
		if err == nil {
			break
		}
		if start.IsZero() {
			start = time.Now()
		}
		// Full: objects this process no longer references may be waiting
		// for the garbage collector or for their deletes to arrive.
		if !storeFull(err) || !cw.reclaim(ctx, start, attempt) {
			return nil, fmt.Errorf("store object %s (%d bytes): %w", id, size, err)
		}
	}
	where := objstore.Location{Offset: loc.Offset, Size: loc.Size}
	view, err := cw.arena.rw.Slice(where)
	if err == nil {
		cw.arena.rw.Prefault(where)
		for _, p := range parts {
			view = view[copy(view, p):]
		}
		err = cw.pool.Call(ctx, cw.nodeAddr, wire.MethodObjectSeal, &wire.ObjectKey{Key: key}, nil)
	}
	if err != nil {
		_ = cw.pool.Call(context.WithoutCancel(ctx), cw.nodeAddr, wire.MethodObjectAbort, &wire.ObjectKey{Key: key}, nil)
		return nil, fmt.Errorf("store object %s: %w", id, err)
	}
	return &wire.ObjectLoc{Key: key, NodeAddr: cw.nodeAddr, Size: size}, nil
}

// binHeader is the msgpack bin header msgpack.Marshal writes before n bytes.
func binHeader(n int) []byte {
	switch {
	case n <= 0xff:
		return []byte{0xc4, byte(n)}
	case n <= 0xffff:
		return []byte{0xc5, byte(n >> 8), byte(n)}
	default:
		h := []byte{0xc6, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(h[1:], uint32(n))
		return h
	}
}

// readLarge returns a read-only view of a large object in the local node's
// arena, which pulls it from the node holding it (or restores it from its
// spill directory) first if needed. No copy is made on this node. The node
// keeps the object in memory for this reader until release is called
// (Obj.Release), after which the view must not be read.
func (cw *coreWorker) readLarge(ctx context.Context, loc *wire.ObjectLoc) (view []byte, release func(), err error) {
	if err := cw.arena.open(); err != nil {
		return nil, nil, err
	}
	var where wire.ObjectLocation
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodObjectLocate, &wire.ObjectLocateRequest{Loc: *loc}, &where); err != nil {
		return nil, nil, &ObjectLostError{ObjectID: loc.Key, Node: loc.NodeAddr, Reason: err.Error(), holderLacks: locateLacks(err)}
	}
	release = func() { cw.releaseRead(ctx, loc.Key) }
	view, err = cw.arena.ro.Slice(objstore.Location{Offset: where.Offset, Size: where.Size})
	if err != nil {
		release()
		return nil, nil, err
	}
	return view, release, nil
}

// releaseRead tells the node this process no longer reads key in place
// (Obj.Release), so it may spill it. A failure only keeps the object in
// memory, so it is logged, not returned.
func (cw *coreWorker) releaseRead(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodObjectRelease, &wire.ObjectFreeRequest{Keys: []string{key}}, nil); err != nil {
		cw.logger.Debug("release of an object read in place failed; the node keeps it in memory", "object", key, "err", err)
	}
}

// binView returns the payload of a msgpack bin value without copying it, so
// a Get of a large []byte is a view of the object store (ok=false: b is not
// a msgpack bin).
func binView(b []byte) ([]byte, bool) {
	if len(b) == 0 {
		return nil, false
	}
	var n, h int
	switch b[0] {
	case 0xc0: // nil
		return nil, len(b) == 1
	case 0xc4:
		if len(b) < 2 {
			return nil, false
		}
		n, h = int(b[1]), 2
	case 0xc5:
		if len(b) < 3 {
			return nil, false
		}
		n, h = int(binary.BigEndian.Uint16(b[1:])), 3
	case 0xc6:
		if len(b) < 5 {
			return nil, false
		}
		n, h = int(binary.BigEndian.Uint32(b[1:])), 5
	default:
		return nil, false
	}
	if len(b) != h+n {
		return nil, false
	}
	return b[h : h+n : h+n], true
}
