package gpu

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// TestReleaseImage maps a file read-only as the executable's data is,
// reads it, and checks releaseImage drops its resident pages while the
// bytes read back unchanged (faulted in again from the file).
func TestReleaseImage(t *testing.T) {
	const size = 64 << 10
	want := bytes.Repeat([]byte("nodeup gpu helper "), size/18+1)[:size]
	path := filepath.Join(t.TempDir(), "image")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if !bytes.Equal(m, want) {
		t.Fatal("mapping differs from the file")
	}
	if rss := mappingRSS(t, m); rss == 0 {
		t.Fatal("no resident pages after reading the mapping")
	}
	// Unaligned ends keep their partial pages; the whole pages go.
	releaseImage(m[100 : size-100])
	if rss := mappingRSS(t, m); rss > 2*os.Getpagesize()>>10 {
		t.Errorf("%d KiB resident after releaseImage; want at most the two partial pages", rss)
	}
	releaseImage(m)
	if rss := mappingRSS(t, m); rss != 0 {
		t.Errorf("%d KiB resident after releasing the whole mapping", rss)
	}
	if !bytes.Equal(m, want) {
		t.Error("bytes changed after releaseImage")
	}
	releaseImage(nil)
	releaseImage(m[1:2]) // inside one page: nothing to release
}

// TestReleaseImageLeavesOtherMemory checks memory that is not a read-only
// file mapping (the heap, an anonymous or a writable mapping) keeps its
// bytes: dropping those pages would zero them.
func TestReleaseImageLeavesOtherMemory(t *testing.T) {
	const size = 64 << 10
	want := bytes.Repeat([]byte{0xa5}, size)
	heap := bytes.Clone(want)
	releaseImage(heap)
	if !bytes.Equal(heap, want) {
		t.Error("heap bytes changed")
	}
	anon, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(anon)
	copy(anon, want)
	releaseImage(anon)
	if !bytes.Equal(anon, want) {
		t.Error("anonymous mapping's bytes changed")
	}
	path := filepath.Join(t.TempDir(), "image")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	priv, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(priv)
	copy(priv, want) // private copies of the file's pages, not in the file
	releaseImage(priv)
	if !bytes.Equal(priv, want) {
		t.Error("writable file mapping's bytes changed")
	}
}

// mappingRSS returns the Rss (KiB) /proc/self/smaps shows for the mapping
// that starts at m.
func mappingRSS(t *testing.T, m []byte) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	head := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&m[0])))
	sc := bufio.NewScanner(f)
	found := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, head) {
			found = true
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok && found {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps", head)
	return 0
}
