package worker

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/internal/testutil"
)

// holder is a value that contains a ref.
type holder struct{ R Ref[[]byte] }

// putNested puts a blob of n bytes and returns a value holding its ref: the
// executing worker owns the nested object, the caller the result.
var putNested = Register2(func(ctx context.Context, n int, seed byte) (holder, error) {
	r, err := Put(ctx, blob(n, seed))
	return holder{R: r}, err
})

// storeHolds reports whether node's store (Obj.List's source) has object id.
func storeHolds(n *cluster.Node, id string) bool {
	entries, _ := n.ObjectStore().List()
	for _, e := range entries {
		if e.ID == id || strings.HasSuffix(e.ID, "/"+id) {
			return true
		}
	}
	return false
}

// storeDrops polls (collecting garbage here) until node's store no longer
// holds object id.
func storeDrops(t *testing.T, n *cluster.Node, id, what string) {
	t.Helper()
	testutil.Until(t, 20*time.Second, what, func() error {
		runtime.GC()
		if storeHolds(n, id) {
			return fmt.Errorf("node %s still holds object %s", n.Name(), id)
		}
		return nil
	})
}

func TestRefContainedInPutLivesAsLongAsTheOuterObject(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	cw, _ := current()
	want := blob(4<<20, 21)
	var innerID, outerID string
	outer := func() Ref[holder] {
		inner, err := Put(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		innerID = inner.ID()
		outer, err := Put(ctx, holder{R: inner})
		if err != nil {
			t.Fatal(err)
		}
		outerID = outer.ID()
		inner.Release() // the outer object holds it now
		return outer
	}()
	for range 3 {
		runtime.GC()
	}
	h, err := outer.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := h.R.Get(ctx); err != nil || sum(b) != sum(want) {
		t.Fatalf("the contained object through the outer one, its own handle released: %v", err)
	}
	h.R.Release()
	runtime.GC()
	if !storeHolds(nodes[0], innerID) {
		t.Fatal("the contained object left the store while the outer object is held")
	}
	outer.Release()
	storeDrops(t, nodes[0], innerID, "the contained object is freed with the outer one")
	storeEmpty(t, 10*time.Second, "nothing is left in the store", nodes...)
	if cw.objects.get(innerID) != nil || cw.objects.get(outerID) != nil {
		t.Fatal("the owner still has the freed objects in its table")
	}
}

func TestRefContainedInTaskResultLivesAsLongAsTheResult(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	// Read through the nested ref after the task finished, then the
	// result dropped: the worker that owns the nested object frees it.
	var innerID string
	func() {
		res := putNested.Remote(ctx, 4<<20, 22)
		h, err := res.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		innerID = h.R.ID()
		if h.R.Owner() == res.Owner() {
			t.Fatalf("the nested object is owned by the driver (%s), want the worker", h.R.Owner())
		}
		// The worker collects its garbage 200 ms after the task: the
		// result's hold, not the task's own Ref, keeps the object.
		testutil.Until(t, 10*time.Second, "the nested object is readable after the task", func() error {
			b, err := h.R.Get(ctx)
			if err != nil {
				return fmt.Errorf("nested ref: %w", err)
			}
			if sum(b) != sum(blob(4<<20, 22)) {
				t.Fatal("the nested object's bytes differ")
			}
			return nil
		})
		h.R.Release()
		if !storeHolds(nodes[0], innerID) {
			t.Fatal("the nested object left the store while its result is held")
		}
		res.Release()
	}()
	storeDrops(t, nodes[0], innerID, "the nested object is freed once the result is")

	// A Ref decoded from the result outlives the result: it takes the
	// result's hold over, and its release frees the object.
	res := putNested.Remote(ctx, 2<<20, 23)
	h, err := res.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res.Release()
	for range 3 {
		runtime.GC()
	}
	if b, err := h.R.Get(ctx); err != nil || sum(b) != sum(blob(2<<20, 23)) {
		t.Fatalf("the nested ref after its result was freed: %v", err)
	}
	id := h.R.ID()
	h.R.Release()
	storeDrops(t, nodes[0], id, "the nested object is freed once its decoded ref is released")
	storeEmpty(t, 10*time.Second, "nothing is left in the store", nodes...)
}

// keepFromHolders keeps the refs contained in the values of refs.
var keepFromHolders = RegisterMethod1(func(k *keeper, ctx context.Context, refs []Ref[holder]) (int, error) {
	for _, r := range refs {
		h, err := r.Get(ctx)
		if err != nil {
			return 0, err
		}
		k.refs = append(k.refs, h.R)
	}
	return len(k.refs), nil
})

func TestActorKeepsARefFoundInAResultAfterTheResultIsFreed(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	cw, _ := current()
	k, err := keeperClass.Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := blob(2<<20, 24)
	// The result (owned here) contains a ref to an object the task's
	// worker owns; the actor reads the result and keeps that ref, a third
	// process's: it registers as its borrower with that worker.
	var outerID, innerID string
	func() {
		res := putNested.Remote(ctx, 2<<20, 24)
		if n, err := keepFromHolders.Remote(ctx, k, []Ref[holder]{res}).Get(ctx); err != nil || n != 1 {
			t.Fatalf("keep: %d, %v", n, err)
		}
		h, err := res.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		outerID, innerID = res.ID(), h.R.ID()
		h.R.Release()
		res.Release()
	}()
	testutil.Until(t, 20*time.Second, "the result is freed once the actor let go of it", func() error {
		runtime.GC()
		if cw.objects.get(outerID) != nil {
			return fmt.Errorf("result %s is still in the owner's table", outerID)
		}
		return nil
	})
	if got, err := sumKept.Remote(ctx, k).Get(ctx); err != nil || got != sum(want)+"," {
		t.Fatalf("the actor's kept ref after the result containing it was freed: %q, %v", got, err)
	}
	if n, err := dropKept.Remote(ctx, k).Get(ctx); err != nil || n != 1 {
		t.Fatalf("drop: %d, %v", n, err)
	}
	storeDrops(t, nodes[0], innerID, "the object is freed once the actor let go")
}

// putKept puts a value holding the actor's kept refs (borrowed from the
// driver), keeps that object's ref, and lets go of its own refs.
var (
	putKept = RegisterMethod0(func(k *keeper, ctx context.Context) (int, error) {
		for _, r := range k.refs {
			o, err := Put(ctx, holder{R: r})
			if err != nil {
				return 0, err
			}
			k.outers = append(k.outers, o)
		}
		n := len(k.refs)
		k.refs = nil
		runtime.GC()
		return n, nil
	})
	dropOuters = RegisterMethod0(func(k *keeper, ctx context.Context) (int, error) {
		n := len(k.outers)
		for _, o := range k.outers {
			o.Release()
		}
		k.outers = nil
		runtime.GC()
		return n, nil
	})
)

func TestBorrowedRefPutInAValueIsHeldByThatObject(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	k, err := keeperClass.Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	func() {
		r, err := Put(ctx, blob(2<<20, 25))
		if err != nil {
			t.Fatal(err)
		}
		id = r.ID()
		if n, err := keepRefs.Remote(ctx, k, []Ref[[]byte]{r}).Get(ctx); err != nil || n != 1 {
			t.Fatalf("keep: %d, %v", n, err)
		}
		r.Release()
	}()
	// The actor's Put object now holds its borrow; its own Ref is gone.
	if n, err := putKept.Remote(ctx, k).Get(ctx); err != nil || n != 1 {
		t.Fatalf("put kept: %d, %v", n, err)
	}
	for range 3 {
		runtime.GC()
	}
	if !storeHolds(nodes[0], id) {
		t.Fatal("the object left the store while a Put value of its borrower holds it")
	}
	if n, err := dropOuters.Remote(ctx, k).Get(ctx); err != nil || n != 1 {
		t.Fatalf("drop outers: %d, %v", n, err)
	}
	storeDrops(t, nodes[0], id, "the object is freed once the borrower's Put object is")
}
