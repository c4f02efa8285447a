package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident counts b's pages that are in memory (b must start on a page).
func resident(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+pageSize-1)/pageSize)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

func TestPrefaultPopulatesOnceAndKeepsBytes(t *testing.T) {
	// On tmpfs, where a never-written page is not resident (a disk file's
	// holes may read as resident).
	if unix.Access("/dev/shm", unix.W_OK) != nil {
		t.Skip("no writable /dev/shm")
	}
	s, err := Open("/dev/shm", fmt.Sprintf("nodeup-test-prefault-%d.arena", os.Getpid()), 16<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Put("old", pattern(4, 100)); err != nil { // at offset 0
		t.Fatal(err)
	}
	buf, err := s.Create("obj", 5<<20) // at offset 128: not page-aligned
	if err != nil {
		t.Fatal(err)
	}
	if n := resident(t, s.data[1<<20:5<<20]); n != 0 {
		t.Fatalf("%d pages of a never-written range already resident", n)
	}
	s.Prefault(buf)
	// Whole 256 KiB blocks: [0, 21 blocks) covers [128, 5 MiB+128).
	if n := resident(t, s.data[:21*prefaultBlock]); n != 21*prefaultBlock/pageSize {
		t.Fatalf("%d of %d pages resident after Prefault", n, 21*prefaultBlock/pageSize)
	}
	if n := resident(t, s.data[21*prefaultBlock:]); n != 0 {
		t.Fatalf("%d pages resident past the blocks under the object", n)
	}
	if _, got, _ := s.Get("old"); !bytes.Equal(got, pattern(4, 100)) {
		t.Fatal("Prefault changed the bytes of a neighbouring object")
	}
	if got := s.populated[0]; got != 1<<21-1 {
		t.Fatalf("populated blocks %b, want blocks 0 to 20", got)
	}
	// Remembered blocks are skipped: pages returned to tmpfs behind the
	// store's back stay out.
	if err := unix.Madvise(s.data[1<<20:2<<20], unix.MADV_REMOVE); err != nil {
		t.Fatal(err)
	}
	s.Prefault(buf[1<<20 : 2<<20])
	if n := resident(t, s.data[1<<20:2<<20]); n != 0 {
		t.Fatalf("a remembered range was populated again (%d pages)", n)
	}
	// Not the arena's memory, empty, or after Close: nothing happens.
	s.Prefault(make([]byte, 10))
	s.Prefault(buf[:0])
	s.Prefault(make([]byte, 32<<20))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Prefault(buf)
}

// TestMappingPrefaultPopulatesInWholePages: a client mapping's Prefault
// makes exactly the pages under the location resident, bytes unchanged.
func TestMappingPrefaultPopulatesInWholePages(t *testing.T) {
	if unix.Access("/dev/shm", unix.W_OK) != nil {
		t.Skip("no writable /dev/shm")
	}
	s, err := Open("/dev/shm", fmt.Sprintf("nodeup-test-mprefault-%d.arena", os.Getpid()), 16<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Put("old", pattern(4, 100)); err != nil { // at offset 0
		t.Fatal(err)
	}
	m, err := MapFileWritable(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if n := resident(t, m.data[1<<20:]); n != 0 {
		t.Skipf("%d pages of never-written space already resident here", n)
	}
	// From the middle of page 1 to the middle of page 5: pages 1..5.
	m.Prefault(Location{Offset: pageSize + 10, Size: 4 * pageSize})
	if n := resident(t, m.data[pageSize:6*pageSize]); n != 5 {
		if n == 0 {
			t.Skip("MADV_POPULATE_WRITE is not supported here")
		}
		t.Fatalf("%d of 5 pages resident after Prefault", n)
	}
	if n := resident(t, m.data[6*pageSize:]); n != 0 {
		t.Fatalf("%d pages resident past the location", n)
	}
	if _, got, _ := s.Get("old"); !bytes.Equal(got, pattern(4, 100)) {
		t.Fatal("Prefault changed the bytes of a neighbouring object")
	}
	m.Prefault(Location{Offset: -1, Size: 10}) // ignored
	m.Prefault(Location{Offset: 0, Size: 1 << 40})
}

// BenchmarkFillFresh4MiB writes one byte per page of a never-used 4 MiB
// object in a /dev/shm arena, the pages faulting in one by one ("faults") or
// made writable first by one Prefault ("prefault"): the comparison behind
// Prefault's doc comment.
func BenchmarkFillFresh4MiB(b *testing.B) {
	if unix.Access("/dev/shm", unix.W_OK) != nil {
		b.Skip("no writable /dev/shm")
	}
	const size = 4 << 20
	for _, prefault := range []bool{false, true} {
		name := "faults"
		if prefault {
			name = "prefault"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for range b.N {
				b.StopTimer()
				s, err := Open("/dev/shm", fmt.Sprintf("nodeup-bench-prefault-%d.arena", os.Getpid()), size, nil)
				if err != nil {
					b.Fatal(err)
				}
				buf, err := s.Create("obj", size)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if prefault {
					s.Prefault(buf)
				}
				for i := 0; i < len(buf); i += pageSize {
					buf[i] = 1
				}
				b.StopTimer()
				_ = s.Close()
				b.StartTimer()
			}
		})
	}
}

// TestPrefaultAllPopulatesTheArena: PrefaultAll makes every page of a fresh
// arena resident and marks it done for Prefault; with a deadline already
// passed it populates nothing and says so.
func TestPrefaultAllPopulatesTheArena(t *testing.T) {
	if unix.Access("/dev/shm", unix.W_OK) != nil {
		t.Skip("no writable /dev/shm")
	}
	const capacity = 3*prefaultChunk/2 + pageSize // two chunks, the last partial
	s, err := Open("/dev/shm", fmt.Sprintf("nodeup-test-prefaultall-%d.arena", os.Getpid()), capacity, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if n := resident(t, s.data); n != 0 {
		t.Fatalf("%d pages of a new arena already resident", n)
	}
	if n, _, err := s.PrefaultAll(time.Nanosecond); err != nil || n != 0 {
		t.Fatalf("PrefaultAll past its deadline = %d bytes, %v; want 0", n, err)
	}
	n, took, err := s.PrefaultAll(0)
	if err != nil || n != capacity || took <= 0 {
		t.Fatalf("PrefaultAll = %d bytes in %v, %v; want %d", n, took, err, capacity)
	}
	if got := resident(t, s.data); got != capacity/pageSize {
		t.Fatalf("%d of %d pages resident after PrefaultAll", got, capacity/pageSize)
	}
	if s.alloc.resident != capacity {
		t.Fatalf("resident mark %d after PrefaultAll, want the capacity %d", s.alloc.resident, capacity)
	}
	for blk := int64(0); blk*prefaultBlock < capacity; blk++ {
		if s.populated[blk/64]&(1<<(blk%64)) == 0 {
			t.Fatalf("block %d not marked populated", blk)
		}
	}
	// The arena still reads as zeros, and objects go in as usual.
	if err := s.Put("x", pattern(5, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if _, got, _ := s.Get("x"); !bytes.Equal(got, pattern(5, 1<<20)) {
		t.Fatal("object bytes differ after PrefaultAll")
	}
	if b := s.data[capacity-100:]; !bytes.Equal(b, make([]byte, 100)) {
		t.Fatal("PrefaultAll changed the arena's bytes")
	}
	_ = s.Close()
	if _, _, err := s.PrefaultAll(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("PrefaultAll after Close = %v, want ErrClosed", err)
	}
}
