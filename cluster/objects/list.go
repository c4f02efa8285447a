package objects

import (
	"cmp"
	"context"
	"slices"

	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/wire"
)

// List answers Obj.List: this node's store entries, spilled ones
// included, largest first, at most the request's limit (wire.MaxObjectList
// when 0 or above), and how many the limit left out.
func (o *Service) List(ctx context.Context, r *wire.ObjectListRequest) (*wire.ObjectList, error) {
	limit := r.Limit
	if limit <= 0 || limit > wire.MaxObjectList {
		limit = wire.MaxObjectList
	}
	entries, st := o.store.List()
	spilled := o.spill.list()
	entries = append(entries, spilled...)
	st.Objects += len(spilled)
	slices.SortFunc(entries, func(a, b objstore.Entry) int {
		if c := cmp.Compare(b.Size, a.Size); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	out := &wire.ObjectList{NodeID: o.nodeID, NodeName: o.nodeName, Addr: o.selfAddr,
		Objects: st.Objects, Capacity: st.Capacity, Used: st.Used, Pinned: st.Pinned,
		Primary: st.Primary, Secondary: st.Secondary}
	out.SpilledObjects, out.SpilledBytes = o.spill.stats()
	out.SpilledTotal, out.RestoredTotal = o.SpillTotals()
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
