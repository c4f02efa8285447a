package objstore

import (
	"bytes"
	"errors"
	"testing"
)

// WriteAt fills a created object in chunks; the sealed object reads back
// those bytes. Writing past its end, at a negative offset, after Seal or to
// an absent object fails with the error callers branch on.
func TestWriteAtFillsAnUnsealedObject(t *testing.T) {
	s := openTest(t, 1<<20)
	want := pattern(3, 10000)
	if _, err := s.Create("j/o", int64(len(want))); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(want); off += 4096 {
		if err := s.WriteAt("j/o", want[off:min(off+4096, len(want))], int64(off)); err != nil {
			t.Fatalf("WriteAt at %d: %v", off, err)
		}
	}
	if err := s.WriteAt("j/o", []byte{1}, int64(len(want))); !errors.Is(err, ErrInvalid) {
		t.Errorf("a write past the end: %v, want ErrInvalid", err)
	}
	if err := s.WriteAt("j/o", []byte{1}, -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("a write at offset -1: %v, want ErrInvalid", err)
	}
	if err := s.Seal("j/o"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if n, err := s.ReadAt("j/o", got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, err %v; equal %v", n, err, bytes.Equal(got, want))
	}
	if err := s.WriteAt("j/o", []byte{1}, 0); !errors.Is(err, ErrSealed) {
		t.Errorf("a write after Seal: %v, want ErrSealed", err)
	}
	if err := s.WriteAt("j/none", []byte{1}, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("a write to an absent object: %v, want ErrNotFound", err)
	}
}
