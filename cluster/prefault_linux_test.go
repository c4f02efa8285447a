package cluster

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestObjectStorePrefaultAtStart: a node started with ObjectStorePrefault
// has its whole arena resident before any object is stored; one without it
// has none of it.
func TestObjectStorePrefaultAtStart(t *testing.T) {
	if unix.Access("/dev/shm", unix.W_OK) != nil {
		t.Skip("the arena is not on tmpfs here")
	}
	const capacity = 32 << 20
	nodes := testCluster(t, 2, func(i int, cfg *Config) {
		cfg.ObjectStoreMemory = capacity
		cfg.ObjectStorePrefault = i == 0
	})
	for i, want := range []int{capacity / 4096, 0} {
		if got := residentPages(t, nodes[i].objects.Store().Path()); got != want {
			t.Errorf("node %d (prefault %v): %d pages resident, want %d", i, i == 0, got, want)
		}
	}
}

// residentPages maps the arena file at path and counts its pages in memory.
func residentPages(t *testing.T, path string) int {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	vec := make([]byte, (len(b)+4095)/4096)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
