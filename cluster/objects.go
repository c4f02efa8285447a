package cluster

import (
	"context"
	"runtime"

	"github.com/nodeup/nodeup/cluster/objects"
	"github.com/nodeup/nodeup/objstore"
)

// DefaultObjectSpillThreshold is the fraction of the object store above
// which primary copies spill to disk, as Ray's object_spilling_threshold
// (objects.DefaultSpillThreshold).
const DefaultObjectSpillThreshold = objects.DefaultSpillThreshold

// ErrSpillDiskFull is wrapped by a spill that does not fit on the spill
// directory's disk (objects.ErrSpillDiskFull, the same value); the error
// names the disk's free and total bytes and the object store's capacity.
// Nothing is lost: the objects stay in memory and the Create that wanted
// room fails with object_store_full.
var ErrSpillDiskFull = objects.ErrSpillDiskFull

// pullConnections is how many connections to each peer object pulls use
// on this machine (objects.PullConnections).
func pullConnections() int { return objects.PullConnections(runtime.GOMAXPROCS(0)) }

// objectsHost is what the object service asks of the node.
type objectsHost struct{ n *Node }

var _ objects.Host = objectsHost{}

func (h objectsHost) PeerAddrs() []string { return h.n.peerAddrs() }

func (h objectsHost) Call(ctx context.Context, addr, method string, req, resp any) error {
	return h.n.pool.Call(ctx, addr, method, req, resp)
}

func (h objectsHost) Go(name string, f func(ctx context.Context)) bool {
	return h.n.group.goCtx(name, f)
}

// openObjectStore opens the node's object service and its arena.
func (n *Node) openObjectStore() error {
	readers := []objects.ChunkReader{n.pool}
	for _, p := range n.pullPools {
		readers = append(readers, p)
	}
	o, err := objects.Open(objects.Config{
		Dir: n.dir.path, NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, SelfAddr: n.rpcAddr,
		Capacity: n.cfg.ObjectStoreMemory, Prefault: n.cfg.ObjectStorePrefault,
		SpillThreshold: n.cfg.ObjectSpillThreshold, NoSpilling: n.cfg.NoObjectSpilling,
		Readers: readers, Logger: n.logger,
	}, objectsHost{n})
	if err != nil {
		return err
	}
	n.objects = o
	return nil
}

// ObjectStoreUsed is the bytes of the node's object store allocated to
// objects (objstore.Store.Used: sealed or not, each rounded up to 64
// bytes), 0 before the store is open. The bench samples it for peak use.
func (n *Node) ObjectStoreUsed() int64 {
	_, used := n.ObjectStoreUsage()
	return used
}

// ObjectStoreUsage reports this node's object store: the number of objects
// (primary and secondary copies, sealed or not) and the bytes allocated to
// them (each rounded up to the store's alignment). Zero before the store
// opens or after it closes.
func (n *Node) ObjectStoreUsage() (objects int, usedBytes int64) {
	s := n.objects.Store()
	if s == nil {
		return 0, 0
	}
	return s.Len(), s.Used()
}

// ObjectSpillTotals are the bytes this node has spilled to disk and
// restored from it since it started (both 0 with spilling off).
func (n *Node) ObjectSpillTotals() (spilled, restored int64) { return n.objects.SpillTotals() }

// ObjectStore is the node's object store, nil before it is open: for tests
// and tools in this process that fill or inspect it directly (objstore's
// methods are safe for concurrent use with the node's own).
func (n *Node) ObjectStore() *objstore.Store { return n.objects.Store() }
