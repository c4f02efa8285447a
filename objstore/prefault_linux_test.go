package objstore

import (
	"bytes"
	"fmt"
	"os"
	"testing"
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
	if n, want := resident(t, s.data[:(5<<20+128+pageSize-1)&^(pageSize-1)]), (5<<20+128+pageSize-1)/pageSize; n != want {
		t.Fatalf("%d of %d pages resident after Prefault", n, want)
	}
	if _, got, _ := s.Get("old"); !bytes.Equal(got, pattern(4, 100)) {
		t.Fatal("Prefault changed the bytes of the page it shares with another object")
	}
	// Of the 2 MiB blocks under [128, 5 MiB+128), block 1 is covered whole
	// and remembered; blocks 0 and 2, partly covered, are not.
	if got := s.populated[0]; got != 0b010 {
		t.Fatalf("populated blocks %b, want 010", got)
	}
	s.Prefault(buf[2<<20 : 4<<20]) // block 1 skipped, block 2 partly covered again
	if got := s.populated[0]; got != 0b010 {
		t.Fatalf("populated blocks %b after a remembered range, want 010", got)
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
