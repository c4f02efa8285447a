package objstore

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"
)

// TestMappingReusedAfterClose: a second MapFile of the same arena in this
// process gets the same mmap back after the first Mapping closed, with what
// Prefault did in it remembered; the closed Mapping stays closed.
func TestMappingReusedAfterClose(t *testing.T) {
	t.Parallel()
	s := openTest(t, 1<<20)
	m1, err := MapFileWritable(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	m1.Prefault(Location{Offset: 10, Size: 3 * pageSize}) // pages 0..3
	p1 := unsafe.SliceData(m1.data)
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Slice(Location{0, 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Slice after Close = %v, want ErrClosed", err)
	}
	m2, err := MapFileWritable(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if unsafe.SliceData(m2.data) != p1 {
		t.Fatal("a second MapFileWritable of the same arena made a new mmap")
	}
	if got := m2.sh.populated[0]; got != 0b1111 {
		t.Fatalf("populated pages %b after reuse, want pages 0 to 3", got)
	}
	// A read-only mapping of the same file is a different mmap (its pages
	// are not writable), and both see the same bytes.
	ro, err := MapFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if unsafe.SliceData(ro.data) == p1 {
		t.Fatal("the read-only mapping shares the writable mmap")
	}
	if err := s.Put("x", pattern(9, 5000)); err != nil {
		t.Fatal(err)
	}
	loc, _, _ := s.Get("x")
	a, _ := m2.Slice(loc)
	b, _ := ro.Slice(loc)
	if !bytes.Equal(a, pattern(9, 5000)) || !bytes.Equal(b, a) {
		t.Fatal("mappings do not show the object's bytes")
	}
}

// TestMappingOfReplacedArenaIsNew: once the node closed its store (removing
// the file) and a new one took the same path, MapFile maps the new file, and
// the idle mmap of the removed one is unmapped rather than kept.
func TestMappingOfReplacedArenaIsNew(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s1, err := Open(dir, "arena", 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := MapFile(s1.Path())
	if err != nil {
		t.Fatal(err)
	}
	old := m1.sh.key
	_ = m1.Close()
	maps.mu.Lock()
	idle := maps.all[old] != nil
	maps.mu.Unlock()
	if !idle {
		t.Fatal("a closed Mapping's mmap was not kept for reuse")
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, "arena", 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.Put("y", pattern(3, 200)); err != nil {
		t.Fatal(err)
	}
	m2, err := MapFile(s2.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	maps.mu.Lock()
	kept := maps.all[old] != nil
	maps.mu.Unlock()
	if kept {
		t.Fatal("the idle mmap of a removed arena is still mapped")
	}
	loc, _, _ := s2.Get("y")
	if got, _ := m2.Slice(loc); !bytes.Equal(got, pattern(3, 200)) {
		t.Fatal("the new mapping does not show the new arena's object")
	}
}

// TestReleaseIdleMappings unmaps idle mmaps and leaves open ones alone.
func TestReleaseIdleMappings(t *testing.T) {
	t.Parallel()
	s := openTest(t, 1<<20)
	open, err := MapFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	closed, err := MapFileWritable(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	rwKey := closed.sh.key
	_ = closed.Close()
	if n := ReleaseIdleMappings(); n < 1 {
		t.Fatalf("ReleaseIdleMappings = %d, want at least the one closed here", n)
	}
	maps.mu.Lock()
	rw, ro := maps.all[rwKey], maps.all[open.sh.key]
	maps.mu.Unlock()
	if rw != nil || ro == nil {
		t.Fatalf("after ReleaseIdleMappings: idle kept %v, open kept %v", rw != nil, ro != nil)
	}
	if _, err := open.Slice(Location{0, 100}); err != nil {
		t.Fatal(err)
	}
}
