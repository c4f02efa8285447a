// Package objects is the node's object service (Ray's object manager and
// plasma store): Obj.Create, Seal, Abort, Read, Write, Locate, Release,
// Free and List over the node's shared-memory arena, pulls of other
// nodes' objects in chunks over several connections, frees passed on to
// the nodes holding copies, and spilling to disk. It owns its state and
// asks of its node only what Host declares; it imports neither the root
// package cluster nor any other cluster subsystem, the replicated store,
// Raft nor memberlist (internal/archtest checks it).
package objects

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// prefaultLimit bounds how long --object-store-prefault may delay a node's
// start; the rest of the arena then fills in as used.
const prefaultLimit = 2 * time.Minute

// Host is all the object service asks of its node: the nodes in its view,
// calls to them, and goroutines the node tracks. The root package's
// adapter implements it over the node; tests give the service a fake.
type Host interface {
	// PeerAddrs is the RPC addresses of the nodes in this node's view of
	// the cluster: a free is passed on only to those.
	PeerAddrs() []string
	// Call calls method on the node at addr, decoding the answer into resp
	// (nil: discarded).
	Call(ctx context.Context, addr, method string, req, resp any) error
	// Go runs f in a goroutine the node tracks, ctx ending when the node
	// stops; false (f not run) once it is stopping.
	Go(name string, f func(ctx context.Context)) bool
}

// Config is what the object service is opened with.
type Config struct {
	// Dir is the node's data dir: the arena goes there when /dev/shm is
	// not a writable tmpfs, and spilled objects go to Dir/spill.
	Dir string
	// NodeID, NodeName and SelfAddr (its RPC address: an object "on" it
	// is never pulled) name this node in answers and errors.
	NodeID, NodeName, SelfAddr string
	// Capacity is the arena's size in bytes, reduced to 90% of the free
	// space of its directory when it exceeds it.
	Capacity int64
	// Prefault maps the whole arena before Open returns (at most
	// prefaultLimit).
	Prefault bool
	// SpillThreshold is the fraction of the store above which primary
	// copies spill to disk; NoSpilling turns spilling off.
	SpillThreshold float64
	NoSpilling     bool
	// Readers read chunks of peers' objects, each over its own
	// connections; a pull spreads its chunks over all of them (at least
	// one).
	Readers []ChunkReader
	Logger  *slog.Logger
}

// Open creates the node's shared-memory arena (in /dev/shm when it is a
// writable tmpfs, else in cfg.Dir) and the service over it.
func Open(cfg Config, host Host) (*Service, error) {
	dir := "/dev/shm"
	if unix.Access(dir, unix.W_OK) != nil {
		dir = cfg.Dir
	}
	capacity := cfg.Capacity
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil {
		if free := int64(st.Bavail) * int64(st.Bsize); capacity > free {
			cfg.Logger.Warn("object store capacity exceeds the free space of its directory; writing past it would crash the node, so it is reduced",
				"dir", dir, "asked", capacity, "free", free)
			capacity = free * 9 / 10
		}
	}
	s, err := objstore.Open(dir, "nodeup-"+cfg.NodeID+".arena", capacity, cfg.Logger.With("component", "objstore"))
	if err != nil {
		return nil, err
	}
	if cfg.Prefault {
		// PrefaultAll logs what it did and how long it took.
		if _, _, err := s.PrefaultAll(prefaultLimit); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	o := &Service{store: s, peers: NewChunkSpread(cfg.Readers...), host: host, log: cfg.Logger,
		selfAddr: cfg.SelfAddr, nodeID: cfg.NodeID, nodeName: cfg.NodeName}
	if !cfg.NoSpilling {
		o.spill = newSpiller(s, cfg.Dir, cfg.SpillThreshold, cfg.NodeName, cfg.Logger.With("component", "spill"))
	}
	return o, nil
}

// Service serves this node's object store to its workers and peers (the
// Obj.* methods: Create, Seal, Abort, Read, Write, Locate, Release, Free,
// List), pulls the objects other nodes hold into it, and spills to disk.
// It owns the store; it needs of the node only its Host and Config, so
// its tests pull from fake peers.
type Service struct {
	store    *objstore.Store
	peers    ChunkReader
	host     Host
	log      *slog.Logger
	selfAddr string
	nodeID   string
	nodeName string
	pulls    singleflight.Group // one pull per object key at a time; concurrent callers share it
	copies   copyHolders        // which nodes pulled this node's objects, and pulls in flight (free.go)
	spill    *spiller           // nil when spilling is off (spill.go)
}

// Register registers the service's methods on srv.
func (o *Service) Register(srv *rpc.Server) {
	rpc.Handle(srv, wire.MethodObjectCreate, o.Create)
	rpc.Handle(srv, wire.MethodObjectSeal, o.Seal)
	rpc.Handle(srv, wire.MethodObjectAbort, o.Abort)
	rpc.Handle(srv, wire.MethodObjectLocate, o.Locate)
	rpc.Handle(srv, wire.MethodObjectRead, o.Read)
	rpc.Handle(srv, wire.MethodObjectWrite, o.Write)
	rpc.Handle(srv, wire.MethodObjectFree, o.Free)
	rpc.Handle(srv, wire.MethodObjectList, o.List)
	rpc.Handle(srv, wire.MethodObjectRelease, o.Release)
}

// Create allocates an object of r.Size bytes for its caller to fill and
// seal (Obj.Create), spilling first when the store is above its
// threshold; a retried task's object replaces the one it stored before.
// No room is object_store_full naming the node.
func (o *Service) Create(ctx context.Context, r *wire.ObjectCreateRequest) (*wire.ObjectLocation, error) {
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
}

// Seal makes a created object readable (Obj.Seal).
func (o *Service) Seal(ctx context.Context, r *wire.ObjectKey) (*wire.Empty, error) {
	return &wire.Empty{}, o.store.Seal(r.Key)
}

// Abort drops a created, unsealed object (Obj.Abort); an absent one is
// no error.
func (o *Service) Abort(ctx context.Context, r *wire.ObjectKey) (*wire.Empty, error) {
	_ = o.store.Abort(r.Key)
	return &wire.Empty{}, nil
}

// Store is the node's object store, nil on a nil service (objstore's
// methods are safe for concurrent use with the service's own).
func (o *Service) Store() *objstore.Store {
	if o == nil {
		return nil
	}
	return o.store
}

// Path is the arena's file, for clients to map ("" on a nil service).
func (o *Service) Path() string {
	if o == nil {
		return ""
	}
	return o.store.Path()
}

// Close closes the store; the service answers nothing after it.
func (o *Service) Close() error { return o.store.Close() }

// DropPrefix deletes every object whose key starts with prefix, in memory
// and spilled (a job's objects when it ends), and returns how many were in
// memory.
func (o *Service) DropPrefix(prefix string) int {
	o.spill.forgetPrefix(prefix)
	return o.store.DeletePrefix(prefix)
}

// SpillStats are the spilled objects and bytes now on disk (0 with
// spilling off).
func (o *Service) SpillStats() (objects int, bytes int64) { return o.spill.stats() }

// SpillTotals are the bytes spilled to disk and restored from it since the
// service opened (both 0 with spilling off).
func (o *Service) SpillTotals() (spilled, restored int64) {
	if o == nil || o.spill == nil {
		return 0, 0
	}
	return o.spill.spilled.Load(), o.spill.restored.Load()
}

// Release drops the reader pins Obj.Locate took (Obj.Release); keys not
// present or not pinned are skipped.
func (o *Service) Release(ctx context.Context, r *wire.ObjectFreeRequest) (*wire.Empty, error) {
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
func (o *Service) restoreError(err error) error {
	code := wire.CodeObjectLost
	if errors.Is(err, objstore.ErrFull) || errors.Is(err, objstore.ErrTooLarge) {
		code = wire.CodeObjectStoreFull
	}
	return &rpc.Error{Code: code, Message: fmt.Sprintf("node %s: %v", o.nodeName, err), Err: err}
}
