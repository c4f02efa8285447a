package worker

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/nodeup/nodeup/sched"
)

// blob makes n bytes of a recognisable pattern.
func blob(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

var makeBlob = Register2(func(ctx context.Context, n int, seed byte) ([]byte, error) { return blob(n, seed), nil })

var blobSum = Register1(func(ctx context.Context, b []byte) (string, error) { return NodeName() + ":" + sum(b), nil })

// sum is a checksum of b's bytes, in decimal.
func sum(b []byte) string {
	var s uint64
	for _, c := range b {
		s += uint64(c)
	}
	return strconv.FormatUint(s, 10)
}

func TestLargePutViewIsZeroCopyOnOneNode(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	want := blob(4<<20, 7)
	ref, err := Put(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	a, err := View(ctx, ref)
	if err != nil || !bytes.Equal(a, want) {
		t.Fatalf("view of a 4 MiB put: %d bytes, equal=%v, %v", len(a), bytes.Equal(a, want), err)
	}
	b, _ := View(ctx, ref)
	// Both Views are of the same bytes in the shared-memory arena.
	if unsafe.SliceData(a) != unsafe.SliceData(b) {
		t.Fatal("two Views of a large []byte returned different memory: a copy was made")
	}
	// Get copies: the caller's value outlives the object.
	if c, err := ref.Get(ctx); err != nil || !bytes.Equal(c, want) || unsafe.SliceData(c) == unsafe.SliceData(a) {
		t.Fatalf("Get of a 4 MiB put: equal=%v, a view=%v, %v", bytes.Equal(c, want), unsafe.SliceData(c) == unsafe.SliceData(a), err)
	}
	// A task on the node reads it as an argument, through the store.
	got, err := blobSum.RemoteArgs(ctx, ref).Get(ctx)
	if err != nil || got != "n0:"+sum(want) {
		t.Fatalf("task over the stored blob: %q, %v", got, err)
	}
}

func TestLargeResultsCrossNodes(t *testing.T) {
	startCluster(t, 3, nil)
	ctx := ctxT(t)
	const n = 3<<20 + 123 // a few chunks, not a multiple of the chunk size
	on := func(i string) Option { return Resources(map[string]float64{i: 1}) }
	ref := Must(makeBlob.Options(on("node1"))).Remote(ctx, n, 3)
	// The driver (on n0) pulls it from n1.
	b, err := ref.Get(ctx)
	if err != nil || !bytes.Equal(b, blob(n, 3)) {
		t.Fatalf("driver read %d bytes (%v)", len(b), err)
	}
	// A task on n2 gets it as an argument: n2 pulls it from n1.
	got, err := Must(blobSum.Options(on("node2"))).RemoteArgs(ctx, ref).Get(ctx)
	if err != nil || got != "n2:"+sum(blob(n, 3)) {
		t.Fatalf("task on n2 over n1's blob: %q, %v", got, err)
	}
	// A large plain argument is stored and passed by ref, too.
	big := blob(1<<20, 9)
	got, err = Must(blobSum.Options(on("node1"))).Remote(ctx, big).Get(ctx)
	if err != nil || got != "n1:"+sum(big) {
		t.Fatalf("large plain argument: %q, %v", got, err)
	}
}

func TestFullObjectStoreIsAClearError(t *testing.T) {
	startCluster(t, 1, func(i int) sched.ResourceSet { return nil })
	ctx := ctxT(t)
	avail, err := ClusterResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	capacity := int(avail[sched.ObjectStoreMemory])
	_, err = Put(ctx, make([]byte, capacity+1))
	if err == nil || !strings.Contains(err.Error(), "object store") || !strings.Contains(err.Error(), strconv.Itoa(capacity)) {
		t.Fatalf("put over capacity (%d bytes): %v", capacity, err)
	}
	t.Logf("over capacity: %v", err)
	// The store still works.
	if _, err := Put(ctx, blob(200<<10, 1)); err != nil {
		t.Fatalf("put after a refused one: %v", err)
	}
}

// TestBinHeaderMatchesMarshal: a large []byte Put writes binHeader and the
// bytes itself; the stored object must be exactly what Marshal gives.
func TestBinHeaderMatchesMarshal(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 65535, 65536, 200_000} {
		data := bytes.Repeat([]byte{7}, n)
		want, err := msgpack.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		if got := append(binHeader(n), data...); !bytes.Equal(got, want) {
			t.Errorf("%d bytes: header %x, Marshal's %x", n, got[:min(len(got), 5)], want[:min(len(want), 5)])
		}
	}
}
