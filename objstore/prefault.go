package objstore

import "unsafe"

// prefaultBlock is the granularity, in bytes, at which a Store remembers
// which parts of its mapping Prefault has populated.
const prefaultBlock = 2 << 20

// Prefault maps the pages under b, a slice of this store's memory about to
// be written through the node's own mapping (a pulled copy being filled),
// writable in one system call instead of one page fault per 4 KiB page as
// the bytes first arrive: a never-used tmpfs page costs the same to allocate
// and zero either way, but the faults cost several times more than the call.
// The store remembers populated 2 MiB blocks, which its mapping keeps, and
// skips them later, so refilling reused space costs nothing. The bytes are
// not changed. It is best effort: it does nothing for a slice outside the
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
	// Populate from the first block not yet done to the last, marking the
	// blocks the range covers whole (a partly covered one is done again).
	lo, hi := int64(-1), int64(0)
	for blk := off / prefaultBlock; blk*prefaultBlock < end; blk++ {
		word, bit := blk/64, uint64(1)<<(blk%64)
		if s.populated[word]&bit != 0 {
			continue
		}
		bs, be := blk*prefaultBlock, (blk+1)*prefaultBlock
		if lo < 0 {
			lo = max(bs, off)
		}
		hi = min(be, end)
		if bs >= off && be <= end {
			s.populated[word] |= bit
		}
	}
	var span []byte
	if lo >= 0 {
		lo &^= pageSize - 1
		hi = min((hi+pageSize-1)&^(pageSize-1), s.capacity)
		span = s.data[lo:hi]
	}
	s.mu.Unlock()
	// Outside the lock: populating 4 MiB of new pages takes milliseconds.
	// The range cannot be unmapped meanwhile except by Close, which the
	// caller (filling an object) must not race with anyway.
	if span != nil {
		populateWrite(span)
	}
}
