package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Object transfer tuning: another node's object is pulled in chunks of
// pullChunk bytes, pullPerConn at a time on each of the node's pull
// connections to the peer (pullConnections), straight into the local arena.
const (
	pullChunk   = 4 << 20
	pullPerConn = 2
	// maxReadChunk caps what one Obj.Read answers, so a request cannot make
	// a response frame exceed rpc.MaxFrameSize.
	maxReadChunk = 16 << 20
)

// prefaultLimit bounds how long --object-store-prefault may delay a node's
// start; the rest of the arena then fills in as used.
const prefaultLimit = 2 * time.Minute

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
	if n.cfg.ObjectStorePrefault {
		// PrefaultAll logs what it did and how long it took.
		if _, _, err := s.PrefaultAll(prefaultLimit); err != nil {
			return err
		}
	}
	readers := []chunkReader{n.pool}
	for _, p := range n.pullPools {
		readers = append(readers, p)
	}
	n.objectSvc = &objectService{store: s, peers: newChunkSpread(readers...), selfAddr: n.rpcAddr, nodeName: n.cfg.NodeName}
	if !n.cfg.NoObjectSpilling {
		n.objectSvc.spill = newSpiller(s, n.dir.path, n.cfg.ObjectSpillThreshold, n.cfg.NodeName, n.logger.With("component", "spill"))
	}
	return nil
}

// chunkReader reads a chunk of a method's answer from the node at addr
// straight into dst and says how many bytes came (*rpc.Pool's CallInto).
type chunkReader interface {
	CallInto(ctx context.Context, addr, method string, req any, dst []byte) (int, error)
}

// pullConnections is how many connections a node pulls objects from one
// peer over, for procs usable CPUs: half of them, at least 2 and at most 8.
// One TLS connection seals (on the sender) and opens (here) its records in
// order, on one core at a time, so a pull over one connection runs at one
// core's AES-GCM speed; spreading its chunks over several lets a machine
// with cores to spare pull at several times that, while the other half of
// the cores stays for the sender's side and the tasks. docs/benchmarks.md
// has the figures.
func pullConnections(procs int) int {
	return min(max(procs/2, 2), 8)
}

// chunkSpread sends a pull's chunk reads to its readers in turn: with
// one rpc.Pool per reader, a pull from a peer uses that many connections,
// so that over TLS sealing on the sender and opening on the receiver run
// on more than one core (one connection's records are sealed and opened
// in order). docs/benchmarks.md has the figures.
type chunkSpread struct {
	readers []chunkReader
	next    atomic.Uint32
}

func newChunkSpread(readers ...chunkReader) *chunkSpread {
	return &chunkSpread{readers: readers}
}

// CallInto implements chunkReader with the next reader in turn.
func (s *chunkSpread) CallInto(ctx context.Context, addr, method string, req any, dst []byte) (int, error) {
	r := s.readers[int(s.next.Add(1)-1)%len(s.readers)]
	return r.CallInto(ctx, addr, method, req, dst)
}

// objectService serves this node's object store to its workers and peers
// (Obj.Create, Seal, Abort, Read, Locate) and pulls the objects other
// nodes hold into it. It needs nothing of the node beyond the store, a way
// to read chunks from peers and the node's address and name, so
// objects_test.go tests pulls against a fake peer.
type objectService struct {
	store    *objstore.Store
	peers    chunkReader
	selfAddr string // the node's RPC address: an object "on" it is never pulled
	nodeName string
	pulls    singleflight.Group // one pull per object key at a time; concurrent callers share it
	copies   copyHolders        // which nodes pulled this node's objects, and pulls in flight (objfree.go)
	spill    *spiller           // nil when spilling is off (objspill.go)
}

func (n *Node) objectEndpoints() {
	o := n.objectSvc
	rpc.Handle(n.rpcServer, wire.MethodObjectCreate, func(ctx context.Context, r *wire.ObjectCreateRequest) (*wire.ObjectLocation, error) {
		o.spill.forget(r.Key) // a retried task's result replaces a spilled one too
		roomErr := o.spill.makeRoom(r.Size)
		_, err := o.store.Create(r.Key, r.Size)
		if errors.Is(err, objstore.ErrFull) && o.spill != nil && roomErr == nil {
			// Under the threshold but fragmented: spill what it takes to
			// free the size asked, once.
			if roomErr = o.spill.force(r.Size); roomErr == nil {
				_, err = o.store.Create(r.Key, r.Size)
			}
		}
		if errors.Is(err, objstore.ErrExists) {
			// A retried task storing its result again (its first worker died
			// before replying): nobody holds the old copy, replace it.
			_ = o.store.Delete(r.Key)
			_, err = o.store.Create(r.Key, r.Size)
		}
		if err == nil && (r.Owner != "" || r.CallSite != "") {
			if err = o.store.Label(r.Key, r.Owner, r.CallSite); err != nil {
				_ = o.store.Abort(r.Key)
			}
		}
		if err != nil {
			if errors.Is(err, objstore.ErrFull) || errors.Is(err, objstore.ErrTooLarge) {
				msg := fmt.Sprintf("node %s: %v", o.nodeName, err)
				if roomErr != nil {
					msg += "; spilling could not make room: " + roomErr.Error()
				}
				return nil, &rpc.Error{Code: wire.CodeObjectStoreFull, Message: msg}
			}
			return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
		}
		loc, _ := o.store.Locate(r.Key)
		return &wire.ObjectLocation{Offset: loc.Offset, Size: loc.Size}, nil
	})
	rpc.Handle(n.rpcServer, wire.MethodObjectSeal, func(ctx context.Context, r *wire.ObjectKey) (*wire.Empty, error) {
		return &wire.Empty{}, o.store.Seal(r.Key)
	})
	rpc.Handle(n.rpcServer, wire.MethodObjectAbort, func(ctx context.Context, r *wire.ObjectKey) (*wire.Empty, error) {
		_ = o.store.Abort(r.Key)
		return &wire.Empty{}, nil
	})
	rpc.Handle(n.rpcServer, wire.MethodObjectLocate, o.locate)
	rpc.Handle(n.rpcServer, wire.MethodObjectRead, o.read)
	rpc.Handle(n.rpcServer, wire.MethodObjectWrite, o.write)
	rpc.Handle(n.rpcServer, wire.MethodObjectFree, n.objectFree)
	rpc.Handle(n.rpcServer, wire.MethodObjectList, n.objectList)
	rpc.Handle(n.rpcServer, wire.MethodObjectRelease, o.release)
}

// read answers a chunk of a sealed object as a bulk result (a bare
// msgpack bin) written to the connection straight from the arena: the view
// keeps the chunk's bytes from being reused until the write is done.
func (o *objectService) read(ctx context.Context, r *wire.ObjectReadRequest) (*rpc.Bulk, error) {
	length := min(max(r.Length, 0), maxReadChunk)
	view, release, err := o.store.View(r.Key, r.Offset, length)
	if errors.Is(err, objstore.ErrNotFound) && o.spill.has(r.Key) {
		if rerr := o.spill.restore(r.Key); rerr != nil {
			return nil, o.restoreError(rerr)
		}
		view, release, err = o.store.View(r.Key, r.Offset, length)
	}
	if err != nil {
		code := wire.CodeNotFound
		if errors.Is(err, objstore.ErrInvalid) {
			code = wire.CodeBadInput
		}
		return nil, &rpc.Error{Code: code, Message: fmt.Sprintf("node %s: %v", o.nodeName, err)}
	}
	if r.Offset == 0 && r.Puller != "" {
		o.copies.note(o.store, r.Key, r.Puller)
	}
	return &rpc.Bulk{Data: view, Release: release}, nil
}

// locate makes the object local (restoring it from the spill directory or
// pulling it if needed) and returns where it lies in this node's arena,
// pinned for the caller, who maps it and reads it in place: it is not
// spilled until the caller sends Obj.Release (a caller that never does
// only keeps it in memory; a free deletes it regardless). An object no node holds any more
// (this node is its holder and lacks it, or the holder answers not_found)
// is object_lost, as Ray's ObjectLostError.
func (o *objectService) locate(ctx context.Context, r *wire.ObjectLocateRequest) (*wire.ObjectLocation, error) {
	key := r.Loc.Key
	if loc, ok := o.store.Hold(key); ok {
		return &wire.ObjectLocation{Offset: loc.Offset, Size: loc.Size}, nil
	}
	if o.spill.has(key) {
		if err := o.spill.restore(key); err != nil {
			return nil, o.restoreError(err)
		}
		if loc, ok := o.store.Hold(key); ok {
			return &wire.ObjectLocation{Offset: loc.Offset, Size: loc.Size}, nil
		}
	}
	if r.Loc.NodeAddr == o.selfAddr {
		return nil, &rpc.Error{Code: wire.CodeObjectLost, Message: fmt.Sprintf("object %s is not in the store of node %s (freed, or lost with a restart)", key, o.nodeName)}
	}
	// A pulled copy is unpinned, so a Create may evict it before this
	// caller pins it: pull again then, a few times.
	for attempt := 0; ; attempt++ {
		if _, err, _ := o.pulls.Do(key, func() (any, error) { return nil, o.pull(ctx, r.Loc) }); err != nil {
			var re *rpc.Error
			if errors.As(err, &re) && re.Code == wire.CodeNotFound {
				return nil, &rpc.Error{Code: wire.CodeObjectLost, Message: err.Error(), Err: err}
			}
			return nil, err
		}
		if loc, ok := o.store.Hold(key); ok {
			return &wire.ObjectLocation{Offset: loc.Offset, Size: loc.Size}, nil
		}
		if attempt == 2 {
			return nil, &rpc.Error{Code: wire.CodeObjectStoreFull, Message: fmt.Sprintf("node %s: object %s was pulled %d times but evicted each time before it could be read: the store is too busy for it", o.nodeName, key, attempt+1)}
		}
	}
}

// inFlight is how many chunk reads one pull keeps out: pullPerConn on
// each connection its peers spread over.
func (o *objectService) inFlight() int {
	if s, ok := o.peers.(*chunkSpread); ok {
		return pullPerConn * len(s.readers)
	}
	return pullPerConn
}

// pull copies another node's object into this node's arena as a secondary
// (evictable) copy: inFlight Obj.Read calls of pullChunk bytes at a
// time, each answer read from the connection straight into the copy's
// space (rpc.Pool.CallInto), whose pages are mapped just before.
func (o *objectService) pull(ctx context.Context, from wire.ObjectLoc) error {
	if o.store.Contains(from.Key) {
		return nil
	}
	dst, err := o.store.CreateSecondary(from.Key, from.Size)
	if err != nil {
		if errors.Is(err, objstore.ErrFull) || errors.Is(err, objstore.ErrTooLarge) {
			return &rpc.Error{Code: wire.CodeObjectStoreFull, Message: fmt.Sprintf("node %s: %v", o.nodeName, err)}
		}
		return err
	}
	o.copies.startPull(from.Key)
	sem := make(chan struct{}, o.inFlight())
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
			o.store.Prefault(chunk)
			got, err := o.peers.CallInto(ctx, from.NodeAddr, wire.MethodObjectRead,
				&wire.ObjectReadRequest{Key: from.Key, Offset: off, Length: length, Puller: o.selfAddr}, chunk)
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
	if o.copies.endPull(from.Key) && first == nil {
		first = fmt.Errorf("its owner freed it meanwhile")
	}
	if first != nil {
		_ = o.store.Abort(from.Key)
		return fmt.Errorf("pull object %s (%d bytes) from %s: %w", from.Key, from.Size, from.NodeAddr, first)
	}
	// Not pinned: a secondary copy no reader holds (Obj.Locate pins it for
	// each reader, Obj.Release unpins) is evicted, least recently used
	// first, when a Create needs room.
	return o.store.Seal(from.Key)
}

// arenaPath is the node's object store file, for clients to map.
func (n *Node) arenaPath() string {
	if n.objects == nil {
		return ""
	}
	return n.objects.Path()
}

// ObjectStoreUsed is the bytes of the node's object store allocated to
// objects (objstore.Store.Used: sealed or not, each rounded up to 64
// bytes), 0 before the store is open. The bench samples it for peak use.
func (n *Node) ObjectStoreUsed() int64 {
	if n.objects == nil {
		return 0
	}
	return n.objects.Used()
}

// release drops the reader pins Obj.Locate took (Obj.Release); keys not
// present or not pinned are skipped.
func (o *objectService) release(ctx context.Context, r *wire.ObjectFreeRequest) (*wire.Empty, error) {
	if len(r.Keys) > wire.MaxFreeKeys {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("release of %d objects: at most %d per request", len(r.Keys), wire.MaxFreeKeys)}
	}
	for _, k := range r.Keys {
		_ = o.store.Unpin(k)
	}
	return &wire.Empty{}, nil
}

// restoreError is a failed restore as an RPC error: object_store_full when
// there was no room, else object_lost (the spill file is unreadable).
func (o *objectService) restoreError(err error) error {
	code := wire.CodeObjectLost
	if errors.Is(err, objstore.ErrFull) || errors.Is(err, objstore.ErrTooLarge) {
		code = wire.CodeObjectStoreFull
	}
	return &rpc.Error{Code: code, Message: fmt.Sprintf("node %s: %v", o.nodeName, err), Err: err}
}
