// Package objstore is a node's shared-memory object store, the nodeup
// equivalent of Ray's plasma store.
//
// Each node owns one arena file (normally in /dev/shm) sized to the store's
// capacity and mapped MAP_SHARED read-write by the node process ([Open]).
// Objects are immutable byte blobs named by an opaque string ID. A producer
// allocates space with [Store.Create], fills the returned slice in place and
// publishes it with [Store.Seal] (Ray's create/seal protocol); [Store.Put] does
// all three. Worker processes on the same node map the same file read-only
// ([MapFile]) and read objects without copying from the [Location] (offset and
// size, in bytes) the node hands them ([Mapping.Slice]).
//
// Objects are either primary copies, which are never evicted (as Ray never
// silently drops a primary copy), or secondary copies ([Store.PutSecondary]),
// cached replicas pulled from another node that may be evicted in LRU order
// when space runs out and they are not pinned ([Store.Pin]).
//
// The allocator hands out 64-byte aligned ranges first-fit from a free list
// kept sorted by offset, coalescing neighbours on free (alloc.go), which
// hands out already-written space before fresh space. [Store.PrefaultAll]
// populates the whole arena up front. A process's [Mapping]s of one arena
// share one mmap, kept after Close for the next MapFile, so a process that
// maps the store again keeps its page tables.
//
// The store does not count readers: a slice returned by [Store.Get] or
// [Mapping.Slice] stays valid only while the object exists. Callers free
// objects ([Store.Delete]) only once no task can still read them. The one
// counted reader is [Store.View], which the node uses to send chunks to
// other nodes without copying them: a viewed object that is deleted or
// evicted keeps its space until the view is released.
package objstore
