package cluster

import (
	"cmp"
	"context"
	"slices"

	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/wire"
)

// objectList answers Obj.List: this node's store entries, largest first,
// at most the request's limit, and how many the limit left out.
func (n *Node) objectList(ctx context.Context, r *wire.ObjectListRequest) (*wire.ObjectList, error) {
	limit := r.Limit
	if limit <= 0 || limit > wire.MaxObjectList {
		limit = wire.MaxObjectList
	}
	entries, st := n.objects.List()
	spilled := n.objectSvc.spill.list()
	entries = append(entries, spilled...)
	st.Objects += len(spilled)
	slices.SortFunc(entries, func(a, b objstore.Entry) int {
		if c := cmp.Compare(b.Size, a.Size); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	out := &wire.ObjectList{NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, Addr: n.rpcAddr,
		Objects: st.Objects, Capacity: st.Capacity, Used: st.Used, Pinned: st.Pinned,
		Primary: st.Primary, Secondary: st.Secondary}
	out.SpilledObjects, out.SpilledBytes = n.objectSvc.spill.stats()
	if sp := n.objectSvc.spill; sp != nil {
		out.SpilledTotal, out.RestoredTotal = sp.spilled.Load(), sp.restored.Load()
	}
	if len(entries) > limit {
		out.LeftOut = len(entries) - limit
		entries = entries[:limit]
	}
	out.Entries = make([]wire.ObjectEntry, len(entries))
	for i, e := range entries {
		out.Entries[i] = wire.ObjectEntry{Key: e.ID, Size: e.Size, Sealed: e.Sealed, Secondary: e.Secondary,
			Pins: e.Pins, Readers: e.Views, Owner: e.Owner, CallSite: e.CallSite, Spilled: e.Spilled}
	}
	return out, nil
}

// ObjectSpillTotals are the bytes this node has spilled to disk and
// restored from it since it started (both 0 with spilling off).
func (n *Node) ObjectSpillTotals() (spilled, restored int64) {
	if n.objectSvc == nil || n.objectSvc.spill == nil {
		return 0, 0
	}
	return n.objectSvc.spill.spilled.Load(), n.objectSvc.spill.restored.Load()
}

// ObjectStore is the node's object store, nil before it is open: for tests
// and tools in this process that fill or inspect it directly (objstore's
// methods are safe for concurrent use with the node's own).
func (n *Node) ObjectStore() *objstore.Store { return n.objects }
