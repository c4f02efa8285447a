package objects

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Object transfer tuning: another node's object is pulled in chunks of
// PullChunk bytes, pullPerConn at a time on each of the node's pull
// connections to the peer (PullConnections), straight into the local arena.
const (
	// PullChunk is the bytes one chunk read of a pull asks for.
	PullChunk   = 4 << 20
	pullPerConn = 2
	// MaxReadChunk caps what one Obj.Read answers (bytes), so a request
	// cannot make a response frame exceed rpc.MaxFrameSize.
	MaxReadChunk = 16 << 20
)

// ChunkReader reads a chunk of a method's answer from the node at addr
// straight into dst and says how many bytes came (*rpc.Pool's CallInto).
type ChunkReader interface {
	CallInto(ctx context.Context, addr, method string, req any, dst []byte) (int, error)
}

// PullConnections is how many connections a node pulls objects from one
// peer over, for procs usable CPUs: half of them, at least 2 and at most 8.
// One TLS connection seals (on the sender) and opens (here) its records in
// order, on one core at a time, so a pull over one connection runs at one
// core's AES-GCM speed; spreading its chunks over several lets a machine
// with cores to spare pull at several times that, while the other half of
// the cores stays for the sender's side and the tasks. docs/benchmarks.md
// has the figures.
func PullConnections(procs int) int {
	return min(max(procs/2, 2), 8)
}

// chunkSpread sends a pull's chunk reads to its readers in turn: with
// one rpc.Pool per reader, a pull from a peer uses that many connections,
// so that over TLS sealing on the sender and opening on the receiver run
// on more than one core (one connection's records are sealed and opened
// in order). docs/benchmarks.md has the figures.
type chunkSpread struct {
	readers []ChunkReader
	next    atomic.Uint32
}

// NewChunkSpread is a ChunkReader sending each read to the next of
// readers in turn.
func NewChunkSpread(readers ...ChunkReader) ChunkReader {
	return &chunkSpread{readers: readers}
}

// CallInto implements ChunkReader with the next reader in turn.
func (s *chunkSpread) CallInto(ctx context.Context, addr, method string, req any, dst []byte) (int, error) {
	r := s.readers[int(s.next.Add(1)-1)%len(s.readers)]
	return r.CallInto(ctx, addr, method, req, dst)
}

// Read answers a chunk of a sealed object as a bulk result (a bare
// msgpack bin) written to the connection straight from the arena: the view
// keeps the chunk's bytes from being reused until the write is done.
func (o *Service) Read(ctx context.Context, r *wire.ObjectReadRequest) (*rpc.Bulk, error) {
	length := min(max(r.Length, 0), MaxReadChunk)
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

// Locate makes the object local (restoring it from the spill directory or
// pulling it if needed) and returns where it lies in this node's arena,
// pinned for the caller, who maps it and reads it in place: it is not
// spilled until the caller sends Obj.Release (a caller that never does
// only keeps it in memory; a free deletes it regardless). An object no node holds any more
// (this node is its holder and lacks it, or the holder answers not_found)
// is object_lost, as Ray's ObjectLostError.
func (o *Service) Locate(ctx context.Context, r *wire.ObjectLocateRequest) (*wire.ObjectLocation, error) {
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
func (o *Service) inFlight() int {
	if s, ok := o.peers.(*chunkSpread); ok {
		return pullPerConn * len(s.readers)
	}
	return pullPerConn
}

// pull copies another node's object into this node's arena as a secondary
// (evictable) copy: inFlight Obj.Read calls of PullChunk bytes at a
// time, each answer read from the connection straight into the copy's
// space (rpc.Pool.CallInto), whose pages are mapped just before.
func (o *Service) pull(ctx context.Context, from wire.ObjectLoc) error {
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
	for off := int64(0); off < from.Size && !failed(); off += PullChunk {
		sem <- struct{}{}
		wg.Add(1)
		go func(off int64) {
			defer func() { <-sem; wg.Done() }()
			length := min(int64(PullChunk), from.Size-off)
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
