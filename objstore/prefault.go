package objstore

import (
	"fmt"
	"time"
	"unsafe"
)

// prefaultBlock is the granularity, in bytes, at which Prefault populates
// a Store's mapping and remembers what it has populated.
const prefaultBlock = 256 << 10

// Prefault maps the pages under b, a slice of this store's memory about to
// be written through the node's own mapping (a pulled copy being filled),
// writable in one system call instead of one page fault per 4 KiB page as
// the bytes first arrive. Either way each never-used tmpfs page is allocated
// and zeroed; the faults add their own cost: filling a fresh 4 MiB object
// took 1.33 ms by faults against 0.95 ms after one Prefault
// (BenchmarkFillFresh4MiB, 2 vCPUs, Linux 6.18).
// It works in whole 256 KiB blocks of the arena, so it may also populate up
// to a block of free space or of neighbouring objects around b (their bytes
// are not changed, but the pages become resident), and remembers the blocks
// it has done, which the mapping keeps: refilling reused space costs
// nothing. It is best effort: it does nothing for a slice outside the
// arena, after Close, or where the system lacks MADV_POPULATE_WRITE (before
// Linux 5.14, or not Linux), and the pages then fault in as usual.
func (s *Store) Prefault(b []byte) {
	if len(b) == 0 {
		return
	}
	s.mu.Lock()
	if s.data == nil {
		s.mu.Unlock()
		return
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if len(b) > len(s.data) || p < base || p-base > uintptr(len(s.data)-len(b)) {
		s.mu.Unlock()
		return // not ours
	}
	off := int64(p - base)
	end := off + int64(len(b))
	if s.populated == nil {
		s.populated = make([]uint64, (s.capacity/prefaultBlock+64)/64)
	}
	// Populate from the first block not yet done to the last one, marking
	// the blocks in between (done ones are cheap to populate again).
	first, last := int64(-1), int64(0)
	for blk := off / prefaultBlock; blk*prefaultBlock < end; blk++ {
		if s.populated[blk/64]&(1<<(blk%64)) == 0 {
			if first < 0 {
				first = blk
			}
			last = blk
		}
	}
	var span []byte
	if first >= 0 {
		for blk := first; blk <= last; blk++ {
			s.populated[blk/64] |= 1 << (blk % 64)
		}
		span = s.data[first*prefaultBlock : min((last+1)*prefaultBlock, s.capacity)]
	}
	s.mu.Unlock()
	// Outside the lock: populating 4 MiB of new pages takes about a
	// millisecond.
	// The range cannot be unmapped meanwhile except by Close, which the
	// caller (filling an object) must not race with anyway.
	if span != nil {
		populateWrite(span)
	}
}

// prefaultChunk is how much PrefaultAll populates per system call, so it can
// stop at its deadline.
const prefaultChunk = 64 << 20

// PrefaultAll populates the whole arena before any object is stored (a
// node's --object-store-prefault), so that no Put pays for allocating and
// zeroing fresh tmpfs pages: one MADV_POPULATE_WRITE per 64 MiB, or, where
// that is not supported, a write of a zero byte to every page (the arena
// must then hold no objects yet; the node calls it right after Open). It
// stops at the deadline given by limit (a duration; 0: none) and before
// taking more than 90% of the system's free memory, and returns the bytes
// it populated from the arena's start and the time it took. The populated
// space is resident for the life of the store: it is the memory the node
// promised its objects. Errors: ErrClosed.
func (s *Store) PrefaultAll(limit time.Duration) (populated int64, took time.Duration, err error) {
	start := time.Now()
	s.mu.Lock()
	data := s.data
	if data == nil {
		s.mu.Unlock()
		return 0, 0, fmt.Errorf("prefault object store %s: %w", s.path, ErrClosed)
	}
	if s.populated == nil {
		s.populated = make([]uint64, (s.capacity/prefaultBlock+64)/64)
	}
	s.mu.Unlock()
	end := s.capacity
	if free := freeMemory(); free >= 0 && free*9/10 < end {
		end = free * 9 / 10 / prefaultChunk * prefaultChunk
		s.log.Warn("object store prefault limited by free memory", "capacity_bytes", s.capacity, "free_bytes", free, "prefault_bytes", end)
	}
	touch := false
	for populated < end {
		if limit > 0 && time.Since(start) > limit {
			s.log.Warn("object store prefault stopped at its time limit", "limit", limit, "populated_bytes", populated, "capacity_bytes", s.capacity)
			break
		}
		n := min(prefaultChunk, end-populated)
		chunk := data[populated : populated+n]
		if touch || populateWriteErr(chunk) != nil {
			touch = true
			for i := 0; i < len(chunk); i += pageSize {
				chunk[i] = 0
			}
		}
		s.mu.Lock()
		for blk := populated / prefaultBlock; blk*prefaultBlock < populated+n; blk++ {
			s.populated[blk/64] |= 1 << (blk % 64)
		}
		s.alloc.resident = max(s.alloc.resident, populated+n)
		s.mu.Unlock()
		populated += n
	}
	took = time.Since(start)
	s.log.Info("object store prefaulted", "populated_bytes", populated, "capacity_bytes", s.capacity,
		"took", took, "by_touching", touch)
	return populated, took, nil
}
