package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func openTest(t testing.TB, capacity int64) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), "arena", capacity, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// within reports whether b's bytes lie inside arena's.
func within(b, arena []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(arena)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(arena))
}

func TestOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir, "arena", 5000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Capacity() != 8192 {
		t.Errorf("Capacity = %d, want 8192 (rounded up to pages)", s.Capacity())
	}
	if fi, err := os.Stat(s.Path()); err != nil || fi.Size() != 8192 {
		t.Errorf("arena file: %v, %v", fi, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("arena file still there after Close: %v", err)
	}
	for _, c := range []struct {
		name string
		cap  int64
	}{{"arena", 0}, {"arena", -1}, {"", 4096}, {"a/b", 4096}, {"..", 4096}} {
		if _, err := Open(dir, c.name, c.cap, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("Open(%q, %d) = %v, want ErrInvalid", c.name, c.cap, err)
		}
	}
}

func TestPutGetRoundTrip(t *testing.T) {
	t.Parallel()
	s := openTest(t, 1<<20)
	want := pattern(3, 1000)
	if err := s.Put("obj", want); err != nil {
		t.Fatal(err)
	}
	loc, got, ok := s.Get("obj")
	if !ok || !bytes.Equal(got, want) {
		t.Fatalf("Get = %v, %d bytes, ok=%v", loc, len(got), ok)
	}
	if loc.Size != 1000 || loc.Offset%Alignment != 0 || cap(got) != len(got) {
		t.Errorf("loc %+v, cap %d", loc, cap(got))
	}
	if !s.Contains("obj") || s.Len() != 1 || s.Used() != alignUp(1000) {
		t.Errorf("Contains %v Len %d Used %d", s.Contains("obj"), s.Len(), s.Used())
	}
	// A zero-size object takes no space but exists.
	if err := s.Put("empty", nil); err != nil {
		t.Fatal(err)
	}
	if loc, b, ok := s.Get("empty"); !ok || len(b) != 0 || loc.Size != 0 {
		t.Errorf("empty: %v %v %v", loc, b, ok)
	}
	if s.Used() != alignUp(1000) || s.Len() != 2 {
		t.Errorf("Used %d Len %d after empty object", s.Used(), s.Len())
	}
}

func TestZeroCopy(t *testing.T) {
	t.Parallel()
	s := openTest(t, 1<<16)
	m, err := MapFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	if err := s.Put("pad", make([]byte, 100)); err != nil { // so the object is not at 0
		t.Fatal(err)
	}
	buf, err := s.Create("x", 300)
	if err != nil {
		t.Fatal(err)
	}
	if !within(buf, s.data) {
		t.Fatal("Create's slice is not inside the arena")
	}
	off := int64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) - uintptr(unsafe.Pointer(unsafe.SliceData(s.data))))
	if _, _, ok := s.Get("x"); ok {
		t.Fatal("unsealed object visible to Get")
	}
	// Bytes written through the node's writable slice before Seal are visible
	// through the worker's separate read-only mapping.
	copy(buf, "hello from the node")
	view, err := m.Slice(Location{off, 300})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(view, []byte("hello from the node")) {
		t.Fatalf("mapping sees %q", view[:19])
	}
	if err := s.Seal("x"); err != nil {
		t.Fatal(err)
	}
	loc, got, ok := s.Get("x")
	if !ok || loc != (Location{off, 300}) {
		t.Fatalf("Get = %+v %v, want offset %d", loc, ok, off)
	}
	// Get's slice is the very bytes Create returned: same pointer and length.
	if unsafe.SliceData(got) != unsafe.SliceData(buf) || len(got) != len(buf) || !within(got, s.data) {
		t.Fatal("Get's slice does not alias the arena range Create returned")
	}
	// And one write (a test-only breach of immutability) shows in all views.
	buf[299] = 0xAB
	if got[299] != 0xAB || view[299] != 0xAB {
		t.Fatalf("write not seen: get %x mapping %x", got[299], view[299])
	}
	if v2, _ := m.Slice(loc); !bytes.Equal(v2, got) {
		t.Fatal("mapping and Get disagree")
	}
}

func TestMappingBounds(t *testing.T) {
	t.Parallel()
	s := openTest(t, 8192)
	m, err := MapFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	for _, loc := range []Location{{-1, 1}, {0, -1}, {8192, 1}, {8000, 193}, {1, 1<<63 - 1}, {1<<63 - 1, 1}} {
		if _, err := m.Slice(loc); !errors.Is(err, ErrInvalid) {
			t.Errorf("Slice(%+v) = %v, want ErrInvalid", loc, err)
		}
	}
	if b, err := m.Slice(Location{8192, 0}); err != nil || len(b) != 0 {
		t.Errorf("empty slice at end: %v", err)
	}
	if b, err := m.Slice(Location{0, 8192}); err != nil || len(b) != 8192 {
		t.Errorf("whole file: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Slice(Location{0, 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Slice after Close = %v", err)
	}
	if err := m.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v", err)
	}
	if _, err := MapFile(s.Path() + ".missing"); err == nil {
		t.Error("MapFile of a missing file succeeded")
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	s := openTest(t, 1<<16)
	if err := s.Put("a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("a", []byte("y")); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate Put = %v", err)
	}
	if _, err := s.Create("u", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("u", 10); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate Create of unsealed = %v", err)
	}
	if _, err := s.Create("big", 1<<16+1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized Create = %v", err)
	}
	if _, err := s.Create("", 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty ID = %v", err)
	}
	if _, err := s.Create(strings.Repeat("i", MaxIDLen+1), 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("long ID = %v", err)
	}
	if _, err := s.Create(strings.Repeat("i", MaxIDLen), 1); err != nil {
		t.Errorf("ID of MaxIDLen = %v", err)
	}
	if _, err := s.Create("neg", -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative size = %v", err)
	}

	for name, err := range map[string]error{
		"Seal":   s.Seal("nope"),
		"Abort":  s.Abort("nope"),
		"Delete": s.Delete("nope"),
		"Pin":    s.Pin("nope"),
		"Unpin":  s.Unpin("nope"),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s of missing = %v", name, err)
		}
	}
	if _, err := s.ReadAt("nope", nil, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadAt missing = %v", err)
	}
	if _, err := s.ReadAt("u", make([]byte, 1), 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadAt unsealed = %v", err)
	}
	if _, _, ok := s.Get("u"); ok || s.Contains("u") {
		t.Error("unsealed object visible")
	}
	if err := s.Seal("a"); !errors.Is(err, ErrSealed) {
		t.Errorf("second Seal = %v", err)
	}
	if err := s.Abort("a"); !errors.Is(err, ErrSealed) {
		t.Errorf("Abort of sealed = %v", err)
	}
	if err := s.Unpin("a"); err == nil {
		t.Error("Unpin of unpinned succeeded")
	}
	used := s.Used()
	if err := s.Abort("u"); err != nil {
		t.Fatal(err)
	}
	if s.Used() != used-alignUp(10) || s.Contains("u") {
		t.Errorf("Abort did not free: used %d -> %d", used, s.Used())
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("b", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close = %v", err)
	}
	if err := s.Delete("a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Delete after Close = %v", err)
	}
	if _, _, ok := s.Get("a"); ok || s.Contains("a") || s.DeletePrefix("") != 0 {
		t.Error("object visible after Close")
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v", err)
	}
}

func TestFull(t *testing.T) {
	t.Parallel()
	s := openTest(t, 4096)
	for i := range 4 {
		if err := s.Put(fmt.Sprint("o", i), make([]byte, 1000)); err != nil { // 1024 aligned
			t.Fatal(err)
		}
	}
	if s.Used() != 4096 {
		t.Fatalf("Used = %d", s.Used())
	}
	_, err := s.Create("more", 1000)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("Create in full store = %v", err)
	}
	for _, want := range []string{"requested 1000 bytes", "0 bytes free", "4096 bytes capacity", "larger object store"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := s.Delete("o2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("more", 1000); err != nil {
		t.Fatalf("Create after Delete = %v", err)
	}
	// Fragmentation: 2048 free in two separate holes cannot take 2000.
	if err := s.Delete("o0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("more"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Create("frag", 2000)
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "2048 bytes free (largest contiguous 1024 bytes)") {
		t.Fatalf("fragmented Create = %v", err)
	}
}

func TestCoalescing(t *testing.T) {
	t.Parallel()
	s := openTest(t, 1<<16)
	var locs [3]Location
	for i, id := range []string{"A", "B", "C"} {
		if err := s.Put(id, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		locs[i], _, _ = s.Get(id)
	}
	// Fill the rest so the only space for A+B is the merged hole.
	if err := s.Put("rest", make([]byte, s.Capacity()-3*alignUp(1000))); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("B"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("A"); err != nil {
		t.Fatal(err)
	}
	buf, err := s.Create("AB", 2*alignUp(1000))
	if err != nil {
		t.Fatalf("A+B sized Create after freeing A and B: %v", err)
	}
	if got := int64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) - uintptr(unsafe.Pointer(unsafe.SliceData(s.data)))); got != locs[0].Offset {
		t.Errorf("A+B placed at %d, want A's offset %d", got, locs[0].Offset)
	}
}

func TestAllocatorCoalesce(t *testing.T) {
	t.Parallel()
	a := newAllocator(640)
	var offs []int64
	for range 10 {
		off, ok := a.alloc(64)
		if !ok {
			t.Fatal("alloc failed")
		}
		offs = append(offs, off)
	}
	// Free in an order that exercises merge-with-next, -prev, and both.
	for _, i := range []int{3, 5, 4, 0, 1, 9, 8, 2, 6, 7} {
		a.release(offs[i], 64)
	}
	if len(a.free) != 1 || a.free[0] != (span{0, 640}) || a.used != 0 {
		t.Fatalf("free list %v used %d", a.free, a.used)
	}
	defer func() {
		if recover() == nil {
			t.Error("double free did not panic")
		}
	}()
	a.release(64, 64)
}

func TestEvictionLRU(t *testing.T) {
	t.Parallel()
	s := openTest(t, 8192) // eight 1024-byte slots
	one := make([]byte, 1024)
	for _, id := range []string{"p0", "s0", "s1", "s2", "s3", "p1", "s4", "s5"} {
		put := s.PutSecondary
		if id[0] == 'p' {
			put = s.Put
		}
		if err := put(id, one); err != nil {
			t.Fatal(err)
		}
	}
	// LRU order (oldest first) is s0..s5; touch s0 so s1 is oldest, and pin s2.
	if _, _, ok := s.Get("s0"); !ok {
		t.Fatal("s0 missing")
	}
	if err := s.Pin("s2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("new1", one); err != nil {
		t.Fatal(err)
	}
	assertPresent(t, s, "s1", false)
	assertPresent(t, s, "s0", true)
	if err := s.Put("new2", one); err != nil { // skips pinned s2
		t.Fatal(err)
	}
	assertPresent(t, s, "s2", true)
	assertPresent(t, s, "s3", false)
	// A 2048-byte object needs two adjacent slots: evicting s4 (next to p1)
	// is not enough, s5 (adjacent) completes the hole.
	if err := s.Put("new3", make([]byte, 2048)); err != nil {
		t.Fatal(err)
	}
	assertPresent(t, s, "s4", false)
	assertPresent(t, s, "s5", false)
	// Only s0 (unpinned) and s2 (pinned) remain evictable-ish; a 3-slot object
	// cannot fit even evicting s0, so nothing is evicted.
	if _, err := s.Create("huge", 3072); !errors.Is(err, ErrFull) {
		t.Fatalf("huge = %v", err)
	}
	assertPresent(t, s, "s0", true)
	// Unpinned, s2 is fair game again.
	if err := s.Unpin("s2"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"new4", "new5"} {
		if err := s.Put(id, one); err != nil {
			t.Fatal(err)
		}
	}
	assertPresent(t, s, "s0", false)
	assertPresent(t, s, "s2", false)
	// Only primaries remain, and they are never evicted.
	if err := s.Put("new6", one); !errors.Is(err, ErrFull) {
		t.Fatalf("Put with only primaries = %v", err)
	}
	for _, id := range []string{"p0", "p1", "new1", "new2", "new3", "new4", "new5"} {
		assertPresent(t, s, id, true)
	}
}

func TestEvictionSkipsUnsealed(t *testing.T) {
	t.Parallel()
	s := openTest(t, 4096)
	if _, err := s.CreateSecondary("pulling", 4096); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("p", []byte("x")); !errors.Is(err, ErrFull) {
		t.Fatalf("Put over an unsealed secondary = %v", err)
	}
	if err := s.Seal("pulling"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("p", []byte("x")); err != nil {
		t.Fatalf("Put after the secondary was sealed = %v", err)
	}
	assertPresent(t, s, "pulling", false)
}

func assertPresent(t *testing.T, s *Store, id string, want bool) {
	t.Helper()
	if got := s.Contains(id); got != want {
		t.Errorf("Contains(%s) = %v, want %v", id, got, want)
	}
}

func TestDeletePrefix(t *testing.T) {
	t.Parallel()
	s := openTest(t, 1<<16)
	for _, id := range []string{"job1/a", "job1/b", "job2/a", "job10/a"} {
		if err := s.Put(id, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create("job1/unsealed", 100); err != nil {
		t.Fatal(err)
	}
	if err := s.Pin("job1/a"); err != nil {
		t.Fatal(err)
	}
	if n := s.DeletePrefix("job1/"); n != 3 {
		t.Errorf("DeletePrefix = %d, want 3", n)
	}
	if s.Len() != 2 || s.Used() != 2*alignUp(100) || !s.Contains("job2/a") || !s.Contains("job10/a") {
		t.Errorf("left Len %d Used %d", s.Len(), s.Used())
	}
	if n := s.DeletePrefix("nothing"); n != 0 {
		t.Errorf("DeletePrefix(nothing) = %d", n)
	}
}

func TestReadAtChunks(t *testing.T) {
	t.Parallel()
	s := openTest(t, 1<<16)
	want := pattern(9, 10000)
	if err := s.Put("obj", want); err != nil {
		t.Fatal(err)
	}
	var got []byte
	chunk := make([]byte, 3000)
	for off := int64(0); ; {
		n, err := s.ReadAt("obj", chunk, off)
		got = append(got, chunk[:n]...)
		off += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("reassembled chunks differ")
	}
	if n, err := s.ReadAt("obj", chunk, 10000); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at end = %d, %v", n, err)
	}
	if n, err := s.ReadAt("obj", chunk[:0], 10000); n != 0 || err != nil {
		t.Errorf("empty ReadAt at end = %d, %v", n, err)
	}
	for _, off := range []int64{-1, 10001} {
		if _, err := s.ReadAt("obj", chunk, off); !errors.Is(err, ErrInvalid) {
			t.Errorf("ReadAt(%d) = %v", off, err)
		}
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	s := openTest(t, 8<<20)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				id := fmt.Sprintf("g%d/%d", g, i)
				want := pattern(byte(g*31+i), 1+(i*97)%20000)
				put := s.Put
				if i%3 == 0 {
					put = s.PutSecondary
				}
				if err := put(id, want); err != nil {
					t.Error(err)
					return
				}
				if _, got, ok := s.Get(id); !ok || !bytes.Equal(got, want) {
					t.Errorf("%s: ok=%v, bytes differ", id, ok)
					return
				}
				// Others' objects: any may be present or gone; only check
				// that the calls race cleanly.
				s.Contains(fmt.Sprintf("g%d/%d", (g+1)%8, i))
				if i%2 == 0 {
					if err := s.Delete(id); err != nil {
						t.Error(err)
						return
					}
				}
				if i%50 == 49 {
					s.DeletePrefix(fmt.Sprintf("g%d/", g))
				}
			}
		})
	}
	wg.Wait()
	checkInvariants(t, s)
}

func TestWritableMappingFillsAnAllocatedObject(t *testing.T) {
	t.Parallel()
	s, err := Open(t.TempDir(), "arena", 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Create("obj", 5); err != nil {
		t.Fatal(err)
	}
	// A client writes through its own read-write mapping, then the node seals.
	rw, err := MapFileWritable(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	loc, ok := s.Locate("obj")
	if !ok {
		t.Fatal("unsealed object not locatable")
	}
	view, err := rw.Slice(loc)
	if err != nil {
		t.Fatal(err)
	}
	copy(view, "hello")
	if err := s.Seal("obj"); err != nil {
		t.Fatal(err)
	}
	_, got, ok := s.Get("obj")
	if !ok || string(got) != "hello" {
		t.Fatalf("node sees %q after the client wrote hello", got)
	}
}

func TestViewReadsInPlace(t *testing.T) {
	t.Parallel()
	s := openTest(t, 1<<16)
	want := pattern(3, 10000)
	if err := s.Put("obj", want); err != nil {
		t.Fatal(err)
	}
	_, whole, _ := s.Get("obj")
	v, release, err := s.View("obj", 1000, 3000)
	if err != nil || !bytes.Equal(v, want[1000:4000]) || unsafe.SliceData(v) != &whole[1000] {
		t.Fatalf("View = %d bytes, equal=%v, in place=%v, %v", len(v), bytes.Equal(v, want[1000:4000]), err == nil && unsafe.SliceData(v) == &whole[1000], err)
	}
	release()
	release() // a second call does nothing
	if v, release, err := s.View("obj", 9000, 3000); err != nil || !bytes.Equal(v, want[9000:]) {
		t.Fatalf("View past the end = %d bytes, %v; want the last 1000", len(v), err)
	} else {
		release()
	}
	if v, release, err := s.View("obj", 10000, 5); err != nil || len(v) != 0 {
		t.Fatalf("View at the end = %d bytes, %v", len(v), err)
	} else {
		release()
	}
	for _, c := range []struct{ off, n int64 }{{-1, 10}, {10001, 1}, {0, -1}} {
		if _, _, err := s.View("obj", c.off, c.n); !errors.Is(err, ErrInvalid) {
			t.Errorf("View(%d, %d) = %v, want ErrInvalid", c.off, c.n, err)
		}
	}
	if _, err := s.Create("unsealed", 10); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"unsealed", "absent"} {
		if _, _, err := s.View(id, 0, 1); !errors.Is(err, ErrNotFound) {
			t.Errorf("View(%s) = %v, want ErrNotFound", id, err)
		}
	}
	if s.views != 0 {
		t.Fatalf("%d views outstanding after every release", s.views)
	}
}

func TestViewHoldsSpaceOfADeletedObject(t *testing.T) {
	t.Parallel()
	s := openTest(t, 8192)
	want := pattern(5, 8192)
	if err := s.Put("obj", want); err != nil {
		t.Fatal(err)
	}
	v, release, err := s.View("obj", 0, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("obj"); err != nil {
		t.Fatal(err)
	}
	// Gone from the index, but its space is not free until the view is.
	assertPresent(t, s, "obj", false)
	if s.Used() != 8192 {
		t.Errorf("Used = %d while the deleted object is viewed, want 8192", s.Used())
	}
	if err := s.Put("next", pattern(9, 4096)); !errors.Is(err, ErrFull) {
		t.Fatalf("Put over a viewed deleted object = %v, want ErrFull", err)
	}
	if !bytes.Equal(v, want) {
		t.Fatal("the view changed")
	}
	release()
	if s.Used() != 0 {
		t.Errorf("Used = %d after the release, want 0", s.Used())
	}
	if err := s.Put("next", pattern(9, 4096)); err != nil {
		t.Fatalf("Put after the release = %v", err)
	}
	checkInvariants(t, s)
}

func TestEvictionSkipsViewedCopies(t *testing.T) {
	t.Parallel()
	s := openTest(t, 4096) // two 2048-byte slots
	for _, id := range []string{"s0", "s1"} {
		if err := s.PutSecondary(id, make([]byte, 2048)); err != nil {
			t.Fatal(err)
		}
	}
	_, release, err := s.View("s0", 0, 1) // s0 is now most recently used
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.Get("s1"); !ok { // now s0 is the oldest
		t.Fatal("s1 missing")
	}
	if err := s.Put("p", make([]byte, 2048)); err != nil {
		t.Fatal(err)
	}
	assertPresent(t, s, "s0", true) // viewed: skipped
	assertPresent(t, s, "s1", false)
	release()
	if err := s.Put("q", make([]byte, 2048)); err != nil {
		t.Fatal(err)
	}
	assertPresent(t, s, "s0", false)
}

func TestViewOutlivesClose(t *testing.T) {
	t.Parallel()
	s, err := Open(t.TempDir(), "arena", 1<<16, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(7, 5000)
	if err := s.Put("obj", want); err != nil {
		t.Fatal(err)
	}
	v, release, err := s.View("obj", 0, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Errorf("arena file after Close: %v", err)
	}
	if _, _, err := s.View("obj", 0, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("View after Close = %v, want ErrClosed", err)
	}
	// Still mapped: reading it does not fault.
	if !bytes.Equal(v, want) {
		t.Fatal("the view changed after Close")
	}
	release()
	if s.unmapAt != nil || s.views != 0 {
		t.Fatalf("after the last release: unmap pending %v, %d views", s.unmapAt != nil, s.views)
	}
}
