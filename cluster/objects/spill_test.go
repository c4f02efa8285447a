package objects

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/objstore"
)

// A spill that does not fit on the spill disk is ErrSpillDiskFull naming
// the disk's free and total bytes and the store's capacity; the objects
// stay in the store (nothing lost) and no spill file is left.
func TestSpillDiskFullIsAClearErrorAndLosesNothing(t *testing.T) {
	dir := t.TempDir()
	s, err := objstore.Open(dir, "arena", 1<<20, testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys := []string{"j/a", "j/b", "j/c"}
	val := func(i int) []byte {
		b := make([]byte, 300<<10)
		for j := range b {
			b[j] = byte(i*7 + j%253)
		}
		return b
	}
	for i, k := range keys {
		if err := s.Put(k, val(i)); err != nil {
			t.Fatal(err)
		}
	}
	old := spillDiskSpace
	spillDiskSpace = func(string) (int64, int64, bool) { return 4096, 8192, true }
	defer func() { spillDiskSpace = old }()
	sp := newSpiller(s, dir, 0.5, "n9", testutil.Logger())
	err = sp.makeRoom(300 << 10)
	if !errors.Is(err, ErrSpillDiskFull) {
		t.Fatalf("makeRoom with 4096 bytes of spill disk free: %v, want ErrSpillDiskFull", err)
	}
	for _, want := range []string{"node n9", "4096 bytes free", "8192 bytes", "of its 1048576 bytes capacity", filepath.Join(dir, "spill")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if s.Len() != 3 || !s.Contains("j/a") || !s.Contains("j/b") || !s.Contains("j/c") {
		t.Fatalf("store holds %d objects after a failed spill, want all 3", s.Len())
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "spill")); len(left) != 0 {
		t.Fatalf("%d spill files left after a failed spill", len(left))
	}
	// With room on the disk the same call spills, and a restore brings
	// the bytes back.
	spillDiskSpace = old
	if err := sp.makeRoom(300 << 10); err != nil {
		t.Fatal(err)
	}
	if n, _ := sp.stats(); n == 0 {
		t.Fatal("nothing spilled above the threshold with disk room")
	}
	if l := sp.list(); len(l) == 0 || !l[0].Spilled || l[0].Size != 300<<10 {
		t.Fatalf("spilled listing %+v, want entries of 300 KiB marked Spilled", l)
	}
	for i, k := range keys {
		if sp.has(k) {
			if err := sp.restore(k); err != nil {
				t.Fatal(err)
			}
		}
		if _, got, ok := s.Get(k); !ok || !bytes.Equal(got, val(i)) {
			t.Fatalf("object %s after restore: present %v, equal %v", k, ok, bytes.Equal(got, val(i)))
		}
	}
}
