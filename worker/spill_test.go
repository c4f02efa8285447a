package worker

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/internal/testutil"
)

// A driver keeps refs to 4× the node's object store in large objects: the
// Puts succeed because the node spills primary copies to
// <data-dir>/spill, and every Get restores its object byte for byte.
func TestSpillAndRestoreAreByteExact(t *testing.T) {
	const (
		store   = 16 << 20
		objSize = 1 << 20
		count   = 4 * store / objSize
	)
	nodes := startClusterInit(t, 1, func(_ int, c *cluster.Config) { c.ObjectStoreMemory = store })
	ctx := ctxT(t)
	refs := make([]Ref[[]byte], count)
	start := time.Now()
	for i := range refs {
		r, err := Put(ctx, blob(objSize, byte(i)))
		if err != nil {
			t.Fatalf("put %d of %d (%d MiB each, store %d MiB): %v", i+1, count, objSize>>20, store>>20, err)
		}
		refs[i] = r
	}
	t.Logf("put %d MiB into a %d MiB store, spilling: %v", count*objSize>>20, store>>20, time.Since(start))
	start = time.Now()
	files, _ := filepath.Glob(filepath.Join(nodes[0].DataDir(), "spill", "spill-*.bin"))
	if len(files) == 0 {
		t.Fatalf("no spill files under %s after putting %d MiB into a %d MiB store", nodes[0].DataDir(), count*objSize>>20, store>>20)
	}
	if used := nodes[0].ObjectStoreUsed(); used > store {
		t.Fatalf("store use %d bytes above its %d bytes capacity", used, store)
	}
	// Read back twice, in two orders: each Get restores (spilling others).
	for pass := range 2 {
		for k := range refs {
			i := k
			if pass == 1 {
				i = len(refs) - 1 - k
			}
			got, err := refs[i].Get(ctx)
			if err != nil {
				t.Fatalf("pass %d: get object %d: %v", pass, i, err)
			}
			if want := blob(objSize, byte(i)); !bytes.Equal(got, want) {
				t.Fatalf("pass %d: object %d restored with different bytes (%d bytes, want %d)", pass, i, len(got), len(want))
			}
		}
	}
	t.Logf("read it back twice, restoring: %v", time.Since(start))
	for _, r := range refs {
		r.Release()
	}
	// Freed objects leave neither the store nor the spill directory behind.
	dir := filepath.Join(nodes[0].DataDir(), "spill")
	testutil.Until(t, 30*time.Second, "spill files removed after every ref is released", func() error {
		left, _ := os.ReadDir(dir)
		if len(left) > 0 || nodes[0].ObjectStoreUsed() != 0 {
			return fmt.Errorf("%d spill files left, store use %d bytes", len(left), nodes[0].ObjectStoreUsed())
		}
		return nil
	})
}

// Tasks on n1 read 3× n1's store in objects put on n0 and kept alive: each
// read pulls a secondary copy to n1, which stays evictable once the task
// has read it, so later pulls evict earlier copies instead of failing with
// object_store_full; a second read of the first object pulls it again.
func TestPulledCopiesAreEvictedOnceNoReaderHoldsThem(t *testing.T) {
	const (
		store   = 8 << 20
		objSize = 1 << 20
		count   = 3 * store / objSize
	)
	nodes := startClusterInit(t, 2, func(i int, c *cluster.Config) {
		c.Insecure = true
		if i == 1 {
			c.ObjectStoreMemory = store
		}
	})
	ctx := ctxT(t)
	on1 := Resources(map[string]float64{"node1": 1})
	refs := make([]Ref[[]byte], count)
	for i := range refs {
		r, err := Put(ctx, blob(objSize, byte(i)))
		if err != nil {
			t.Fatal(err)
		}
		refs[i] = r
		got, err := Must(blobSum.Options(on1)).RemoteArgs(ctx, r).Get(ctx)
		if want := "n1:" + sum(blob(objSize, byte(i))); err != nil || got != want {
			t.Fatalf("task %d of %d on n1 (store %d MiB) over a %d MiB object of n0: %q, %v; want %q", i+1, count, store>>20, objSize>>20, got, err, want)
		}
	}
	if k, used := nodes[1].ObjectStoreUsage(); used > store || k >= count {
		t.Fatalf("n1 holds %d objects in %d bytes; want fewer than %d within %d bytes", k, used, count, store)
	}
	got, err := Must(blobSum.Options(on1)).RemoteArgs(ctx, refs[0]).Get(ctx)
	if want := "n1:" + sum(blob(objSize, 0)); err != nil || got != want {
		t.Fatalf("reading the first (evicted) object again on n1: %q, %v", got, err)
	}
}
