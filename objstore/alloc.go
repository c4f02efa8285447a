package objstore

import (
	"fmt"
	"slices"
	"sort"
)

// Alignment is the byte alignment of every object's offset in the arena. 64
// bytes is a cache line, so readers can use aligned vector loads and two
// objects never share a line (no false sharing between writers).
const Alignment = 64

// alignUp rounds n (>= 0) up to a multiple of Alignment.
func alignUp(n int64) int64 {
	return (n + Alignment - 1) &^ (Alignment - 1)
}

// span is a byte range [off, off+size) of the arena.
type span struct {
	off, size int64
}

func (b span) end() int64 { return b.off + b.size }

// allocator manages the arena's byte ranges. The free list is kept sorted by
// offset with no two touching spans (they are coalesced on release), so its
// length is the number of holes. alloc is first-fit: the lowest-offset hole
// that fits. First-fit over an address-ordered list keeps allocations packed
// toward the start of the arena, which in practice fragments about as little as
// best-fit (Knuth, TAOCP 2.5) and is simpler. alloc is O(n) and release
// O(log n) plus a slice insert, in the number of holes; the store holds tens of
// thousands of objects at most, so this is not worth a tree.
//
// It also hands out already-resident space first: resident is the end of
// the highest range ever handed out (or populated by Store.PrefaultAll),
// and every byte below it has been written before, so its tmpfs pages exist
// and the writers' mappings may already map them (fresh pages cost a page
// fault and zeroing each, several times the copy on some machines; see
// BenchmarkFillFresh4MiB). Allocation always carves a range from the start
// of a hole, so the space below resident is a prefix of the arena; in an
// address-ordered free list every hole wholly below it comes before the one
// that crosses it, so first-fit takes fresh space only when no resident hole
// fits (TestResidentFirst checks this).
//
// It is not safe for concurrent use; the Store's mutex guards it.
type allocator struct {
	capacity int64
	used     int64
	free     []span
	resident int64 // bytes [0, resident) handed out or populated before
}

func newAllocator(capacity int64) *allocator {
	return &allocator{capacity: capacity, free: []span{{0, capacity}}}
}

// alloc takes size bytes (a positive multiple of Alignment) from the first
// hole that fits and returns its offset.
func (a *allocator) alloc(size int64) (int64, bool) {
	for i, b := range a.free {
		if b.size < size {
			continue
		}
		if b.size == size {
			a.free = slices.Delete(a.free, i, i+1)
		} else {
			a.free[i] = span{b.off + size, b.size - size}
		}
		a.used += size
		a.resident = max(a.resident, b.off+size)
		return b.off, true
	}
	return 0, false
}

// release returns [off, off+size) to the free list, merging it with the holes
// on either side, and returns the size of the resulting hole. It panics on a
// range that overlaps a hole (a double free), which would be a store bug.
func (a *allocator) release(off, size int64) int64 {
	// i is the first hole after off.
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off >= off })
	if (i > 0 && a.free[i-1].end() > off) || (i < len(a.free) && off+size > a.free[i].off) || off < 0 || off+size > a.capacity {
		panic(fmt.Sprintf("objstore: release of [%d,+%d) overlaps a free range", off, size))
	}
	a.used -= size
	mergePrev := i > 0 && a.free[i-1].end() == off
	mergeNext := i < len(a.free) && off+size == a.free[i].off
	switch {
	case mergePrev && mergeNext:
		a.free[i-1].size += size + a.free[i].size
		a.free = slices.Delete(a.free, i, i+1)
		return a.free[i-1].size
	case mergePrev:
		a.free[i-1].size += size
		return a.free[i-1].size
	case mergeNext:
		a.free[i] = span{off, size + a.free[i].size}
		return a.free[i].size
	default:
		a.free = slices.Insert(a.free, i, span{off, size})
		return size
	}
}

// largest is the size of the largest hole: the biggest allocation that would
// succeed now.
func (a *allocator) largest() int64 {
	var m int64
	for _, b := range a.free {
		m = max(m, b.size)
	}
	return m
}

// clone copies the allocator, for trying evictions without committing them.
func (a *allocator) clone() *allocator {
	return &allocator{capacity: a.capacity, used: a.used, free: slices.Clone(a.free), resident: a.resident}
}
