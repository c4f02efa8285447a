package wire

// MethodObjectList: any client → a node: this node's object store entries
// and totals, for `nodeup memory` (Ray's `ray memory`), which asks every
// node and merges. ObjectListRequest → ObjectList. Read role.
const MethodObjectList = "Obj.List"

// MaxObjectList is the most entries one ObjectList carries (about 150
// bytes each in msgpack: 30 MB, under rpc.MaxFrameSize). A larger or
// non-positive Limit is taken as this.
const MaxObjectList = 200_000

// ObjectListRequest asks for at most Limit entries (1 to MaxObjectList;
// others mean MaxObjectList), largest first.
type ObjectListRequest struct {
	Limit int
}

// ObjectEntry is one object in a node's store.
type ObjectEntry struct {
	Key       string // job ID / object ID
	Size      int64  // bytes
	Sealed    bool
	Secondary bool   // a pulled copy; false for the primary copy
	Pins      int    // pins held (a pinned secondary copy is not evicted)
	Readers   int    // node-side views in flight (transfers to other nodes)
	Owner     string `msgpack:",omitempty"` // the owner's RPC address, when the creator said
	CallSite  string `msgpack:",omitempty"` // what made it: a task's name, or "put"
	Spilled   bool   `msgpack:",omitempty"` // on disk under the node's spill directory, not in memory
}

// ObjectList is a node's answer to Obj.List: Entries, largest first, and
// LeftOut, how many objects the limit kept out (never a silent cut); the
// totals count every object. Byte totals are of allocations (rounded up to
// 64 bytes).
type ObjectList struct {
	NodeID    string
	NodeName  string
	Addr      string
	Entries   []ObjectEntry
	LeftOut   int
	Objects   int
	Capacity  int64
	Used      int64
	Pinned    int64
	Primary   int64
	Secondary int64
	// Spilled objects and bytes now on disk (also listed in Entries,
	// Spilled set, counted in Objects), and bytes spilled and restored
	// since the node started.
	SpilledObjects int   `msgpack:",omitempty"`
	SpilledBytes   int64 `msgpack:",omitempty"`
	SpilledTotal   int64 `msgpack:",omitempty"`
	RestoredTotal  int64 `msgpack:",omitempty"`
}

// MethodObjectRelease: a core worker → its node: drop the reader pins its
// Obj.Locate calls took on these objects, once it no longer reads them in
// place, so the node may spill them. ObjectFreeRequest (Keys; FromNode
// unused) → Empty; keys not present or not pinned are skipped. Submit role.
const MethodObjectRelease = "Obj.Release"

// MethodObjectRefs: any client → an owner (a core worker): the references
// that hold each of some objects it owns, as Ray's `ray memory` reference
// types, for `nodeup memory`, which asks the owners named in Obj.List.
// ObjectRefsRequest → ObjectRefsReply. Read role.
const MethodObjectRefs = "Object.Refs"

// MaxObjectRefs is the most IDs one ObjectRefsRequest may name
// (CodeBadInput past it): about 40 bytes each, 8 MB a request.
const MaxObjectRefs = MaxObjectList

// ObjectRefsRequest names objects (at most MaxObjectRefs) of the owner
// asked.
type ObjectRefsRequest struct {
	IDs []string
}

// ObjectRefsReply answers per ID of the request, same order, each slice as
// long as IDs: Known (false: the owner does not hold the object, e.g. it
// was freed and its delete is on its way), and how many references of
// each kind hold it: Local, live Ref handles in the owner
// (LOCAL_REFERENCE); Submitted, pending tasks taking it as an argument
// (USED_BY_PENDING_TASK); Borrowed, borrowers that reported it and have
// not let go (BORROWED); Captured, objects whose value contains a ref to
// it (CAPTURED_IN_OBJECT). Pinned: kept until the job ends (a ref to it was
// passed on where it is not tracked).
type ObjectRefsReply struct {
	Known     []bool
	Local     []int32
	Submitted []int32
	Borrowed  []int32
	Captured  []int32
	Pinned    []bool
}
