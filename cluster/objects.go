package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Object transfer tuning: another node's object is pulled in chunks of
// pullChunk bytes, pullInFlight at a time, straight into the local arena.
const (
	pullChunk    = 4 << 20
	pullInFlight = 4
	// maxReadChunk caps what one Obj.Read answers, so a request cannot make
	// a response frame exceed rpc.MaxFrameSize.
	maxReadChunk = 16 << 20
)

// openObjectStore creates the node's shared-memory arena: in /dev/shm when it
// is a writable tmpfs, else in the data dir.
func (n *Node) openObjectStore() error {
	dir := "/dev/shm"
	if unix.Access(dir, unix.W_OK) != nil {
		dir = n.dir.path
	}
	capacity := n.cfg.ObjectStoreMemory
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil {
		if free := int64(st.Bavail) * int64(st.Bsize); capacity > free {
			n.logger.Warn("object store capacity exceeds the free space of its directory; writing past it would crash the node, so it is reduced",
				"dir", dir, "asked", capacity, "free", free)
			capacity = free * 9 / 10
		}
	}
	s, err := objstore.Open(dir, "nodeup-"+n.id.NodeID+".arena", capacity, n.logger.With("component", "objstore"))
	if err != nil {
		return err
	}
	n.objects = s
	return nil
}

func (n *Node) objectEndpoints() {
	rpc.Handle(n.rpcServer, wire.MethodObjectCreate, func(ctx context.Context, r *wire.ObjectCreateRequest) (*wire.ObjectLocation, error) {
		_, err := n.objects.Create(r.Key, r.Size)
		if errors.Is(err, objstore.ErrExists) {
			// A retried task storing its result again (its first worker died
			// before replying): nobody holds the old copy, replace it.
			_ = n.objects.Delete(r.Key)
			_, err = n.objects.Create(r.Key, r.Size)
		}
		if err != nil {
			if errors.Is(err, objstore.ErrFull) || errors.Is(err, objstore.ErrTooLarge) {
				return nil, &rpc.Error{Code: wire.CodeObjectStoreFull, Message: fmt.Sprintf("node %s: %v", n.cfg.NodeName, err)}
			}
			return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
		}
		loc, _ := n.objects.Locate(r.Key)
		return &wire.ObjectLocation{Offset: loc.Offset, Size: loc.Size}, nil
	})
	rpc.Handle(n.rpcServer, wire.MethodObjectSeal, func(ctx context.Context, r *wire.ObjectKey) (*wire.Empty, error) {
		return &wire.Empty{}, n.objects.Seal(r.Key)
	})
	rpc.Handle(n.rpcServer, wire.MethodObjectAbort, func(ctx context.Context, r *wire.ObjectKey) (*wire.Empty, error) {
		_ = n.objects.Abort(r.Key)
		return &wire.Empty{}, nil
	})
	rpc.Handle(n.rpcServer, wire.MethodObjectLocate, n.objectLocate)
	rpc.Handle(n.rpcServer, wire.MethodObjectRead, n.objectRead)
	rpc.Handle(n.rpcServer, wire.MethodObjectFree, n.objectFree)
}

// objectRead answers a chunk of a sealed object as a bulk result (a bare
// msgpack bin) written to the connection straight from the arena: the view
// keeps the chunk's bytes from being reused until the write is done.
func (n *Node) objectRead(ctx context.Context, r *wire.ObjectReadRequest) (*rpc.Bulk, error) {
	view, release, err := n.objects.View(r.Key, r.Offset, min(max(r.Length, 0), maxReadChunk))
	if err != nil {
		code := wire.CodeNotFound
		if errors.Is(err, objstore.ErrInvalid) {
			code = wire.CodeBadInput
		}
		return nil, &rpc.Error{Code: code, Message: fmt.Sprintf("node %s: %v", n.cfg.NodeName, err)}
	}
	if r.Offset == 0 && r.Puller != "" {
		n.copies.note(n, r.Key, r.Puller)
	}
	return &rpc.Bulk{Data: view, Release: release}, nil
}

// objectLocate makes the object local (pulling it if needed) and returns
// where it lies in this node's arena.
func (n *Node) objectLocate(ctx context.Context, r *wire.ObjectLocateRequest) (*wire.ObjectLocation, error) {
	key := r.Loc.Key
	if loc, _, ok := n.objects.Get(key); ok {
		return &wire.ObjectLocation{Offset: loc.Offset, Size: loc.Size}, nil
	}
	if r.Loc.NodeAddr == n.rpcAddr {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("object %s is not in the store of node %s (freed, or lost with a restart)", key, n.cfg.NodeName)}
	}
	if _, err, _ := n.pulls.Do(key, func() (any, error) { return nil, n.pull(ctx, r.Loc) }); err != nil {
		return nil, err
	}
	loc, _, ok := n.objects.Get(key)
	if !ok {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("object %s was pulled but is gone (evicted)", key)}
	}
	return &wire.ObjectLocation{Offset: loc.Offset, Size: loc.Size}, nil
}

// pull copies another node's object into this node's arena as a secondary
// (evictable) copy: pullInFlight Obj.Read calls of pullChunk bytes at a
// time, each answer read from the connection straight into the copy's
// space (rpc.Pool.CallInto), whose pages are mapped just before.
func (n *Node) pull(ctx context.Context, from wire.ObjectLoc) error {
	if n.objects.Contains(from.Key) {
		return nil
	}
	dst, err := n.objects.CreateSecondary(from.Key, from.Size)
	if err != nil {
		if errors.Is(err, objstore.ErrFull) || errors.Is(err, objstore.ErrTooLarge) {
			return &rpc.Error{Code: wire.CodeObjectStoreFull, Message: fmt.Sprintf("node %s: %v", n.cfg.NodeName, err)}
		}
		return err
	}
	n.copies.startPull(from.Key)
	sem := make(chan struct{}, pullInFlight)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	for off := int64(0); off < from.Size && !failed(); off += pullChunk {
		sem <- struct{}{}
		wg.Add(1)
		go func(off int64) {
			defer func() { <-sem; wg.Done() }()
			length := min(int64(pullChunk), from.Size-off)
			chunk := dst[off : off+length]
			// Map the chunk's pages before the bytes arrive: page faults
			// on never-used arena space cost more than the copy.
			n.objects.Prefault(chunk)
			got, err := n.pool.CallInto(ctx, from.NodeAddr, wire.MethodObjectRead,
				&wire.ObjectReadRequest{Key: from.Key, Offset: off, Length: length, Puller: n.rpcAddr}, chunk)
			if err == nil && int64(got) != length {
				err = fmt.Errorf("short chunk: %d of %d bytes", got, length)
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("chunk at byte %d: %w", off, err)
				}
				mu.Unlock()
			}
		}(off)
	}
	// Every call has returned, so nothing writes into dst any more (CallInto
	// waits for an answer already arriving) and Abort may free it.
	wg.Wait()
	if n.copies.endPull(from.Key) && first == nil {
		first = fmt.Errorf("its owner freed it meanwhile")
	}
	if first != nil {
		_ = n.objects.Abort(from.Key)
		return fmt.Errorf("pull object %s (%d bytes) from %s: %w", from.Key, from.Size, from.NodeAddr, first)
	}
	// Pinned: processes read pulled copies in place, so eviction must not
	// reuse their bytes; the copy is freed with its job.
	if err := n.objects.Pin(from.Key); err != nil {
		return err
	}
	return n.objects.Seal(from.Key)
}

// arenaPath is the node's object store file, for clients to map.
func (n *Node) arenaPath() string {
	if n.objects == nil {
		return ""
	}
	return n.objects.Path()
}
