package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/internal/testutil"
)

// waitFile waits (up to 30 s) until path exists, then returns n: a task
// whose result other work depends on, finishing when the test says.
var waitFile = Register2(func(ctx context.Context, path string, n int) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return n, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s did not appear within 30 s", path)
})

// sumAfter checksums b once its other argument is ready.
var sumAfter = Register2(func(ctx context.Context, b []byte, _ int) (string, error) { return sum(b), nil })

// storeEmpty polls (collecting garbage, so that dropped Refs are released)
// until every node's object store holds nothing.
func storeEmpty(t *testing.T, within time.Duration, what string, nodes ...*cluster.Node) {
	t.Helper()
	testutil.Until(t, within, what, func() error {
		runtime.GC()
		for _, n := range nodes {
			if k, used := n.ObjectStoreUsage(); k != 0 || used != 0 {
				return fmt.Errorf("node %s holds %d objects (%d bytes)", n.Name(), k, used)
			}
		}
		return nil
	})
}

func TestDroppedRefsLeaveTheStoreEmpty(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	cw, _ := current()
	var ids []string
	// Dropped: Puts and task results, large and small, whose Refs become
	// unreachable when this function returns.
	func() {
		for i := range 3 {
			r, err := Put(ctx, blob(1<<20, byte(i)))
			if err != nil {
				t.Fatal(err)
			}
			small, err := Put(ctx, i)
			if err != nil {
				t.Fatal(err)
			}
			res := makeBlob.Remote(ctx, 300<<10, byte(i))
			// Waited for, not read: a []byte view Get hands out keeps its
			// object (TestViewOutlivesItsRef).
			if _, _, err := Wait(ctx, []Ref[[]byte]{res}, 1, 0); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.ID(), small.ID(), res.ID())
		}
	}()
	// Released explicitly, with a copy kept: the copy shares the handle.
	r, err := Put(ctx, blob(2<<20, 9))
	if err != nil {
		t.Fatal(err)
	}
	kept := r
	r.Release()
	ids = append(ids, r.ID())
	if _, err := kept.Get(ctx); !errors.As(err, new(*ObjectFreedError)) {
		t.Fatalf("get through a copy of a released ref: %v, want *ObjectFreedError", err)
	}
	storeEmpty(t, 20*time.Second, "the dropped objects leave the store", nodes...)
	testutil.Until(t, 10*time.Second, "the owner forgets the dropped objects", func() error {
		runtime.GC()
		for _, id := range ids {
			if cw.objects.get(id) != nil {
				return fmt.Errorf("object %s is still in the owner's table", id)
			}
		}
		return nil
	})
	// A held ref is not freed by any of this.
	held, err := Put(ctx, blob(1<<20, 4))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	if b, err := held.Get(ctx); err != nil || sum(b) != sum(blob(1<<20, 4)) {
		t.Fatalf("held object after GC: %v", err)
	}
	runtime.KeepAlive(held)
}

// TestViewOutlivesItsRef: a []byte view View returned of a large object
// stays byte-exact after its Ref became unreachable and was collected, while
// the store is reused by many more objects than it holds; a value Get
// returned is a copy, unaffected by its Ref's release; releasing a Ref
// frees the object viewed through it.
func TestViewOutlivesItsRef(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	want := blob(4<<20, 7)
	viewOf := func(seed byte) []byte {
		r, err := Put(ctx, blob(4<<20, seed))
		if err != nil {
			t.Fatal(err)
		}
		b, err := View(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	view := viewOf(7) // its Ref is unreachable from here on
	got, err := Put(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := got.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got.Release()
	for i := range 40 { // 160 MiB of dropped objects through the store
		runtime.GC()
		r, err := Put(ctx, blob(4<<20, byte(i)))
		if err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
	runtime.GC()
	if sum(view) != sum(want) {
		t.Fatal("a view of an object whose Ref was collected changed: its space was reused")
	}
	if sum(copied) != sum(want) {
		t.Fatal("a value Get returned changed after its Ref was released")
	}
	// A released Ref frees the object it was viewed through.
	r, err := Put(ctx, blob(1<<20, 3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := View(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.Release()
	testutil.Until(t, 20*time.Second, "a released viewed object is freed", func() error {
		runtime.GC()
		if k, _ := nodes[0].ObjectStoreUsage(); k != 1 {
			return fmt.Errorf("node holds %d objects, want 1 (the collected view's)", k)
		}
		return nil
	})
}

func TestRunningTaskArgumentsStay(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	gate := filepath.Join(t.TempDir(), "go")
	want := blob(1<<20, 5)
	var res Ref[string]
	var id string
	func() {
		r, err := Put(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		id = r.ID()
		// The task cannot run before waitFile's result: the driver has
		// dropped (and released) its handle long before.
		res = sumAfter.RemoteArgs(ctx, r, waitFile.Remote(ctx, gate, 1))
		r.Release()
	}()
	cw, _ := current()
	for range 3 {
		runtime.GC()
	}
	if o := cw.objects.get(id); o == nil {
		t.Fatal("the pending task's argument was freed when the driver dropped its ref")
	}
	if k, _ := nodes[0].ObjectStoreUsage(); k == 0 {
		t.Fatal("the pending task's argument left the store")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := res.Get(ctx); err != nil || got != sum(want) {
		t.Fatalf("task over its argument: %q, %v; want %s", got, err, sum(want))
	}
	res.Release()
	storeEmpty(t, 20*time.Second, "the argument is freed once its task finished", nodes...)
}

// keeper is an actor that keeps refs it is given, nested in values.
type keeper struct {
	refs   []Ref[[]byte]
	outers []Ref[holder] // Put objects holding refs (contained_test.go)
}

func newKeeper(ctx context.Context) (*keeper, error) { return &keeper{}, nil }

var (
	keeperClass = RegisterActor0(newKeeper)
	keepRefs    = RegisterMethod1(func(k *keeper, ctx context.Context, refs []Ref[[]byte]) (int, error) {
		k.refs = append(k.refs, refs...)
		return len(k.refs), nil
	})
	dropKept = RegisterMethod0(func(k *keeper, ctx context.Context) (int, error) {
		n := len(k.refs)
		k.refs = nil
		runtime.GC() // the actor lets go now rather than at its next collection
		return n, nil
	})
	sumKept = RegisterMethod0(func(k *keeper, ctx context.Context) (string, error) {
		out := ""
		for _, r := range k.refs {
			b, err := r.Get(ctx)
			if err != nil {
				return "", err
			}
			out += sum(b) + ","
		}
		return out, nil
	})
)

func TestNestedRefKeptByActorOutlivesTheDriversHandle(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	h, err := keeperClass.Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := blob(1<<20, 11)
	func() {
		r, err := Put(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := keepRefs.Remote(ctx, h, []Ref[[]byte]{r}).Get(ctx); err != nil || n != 1 {
			t.Fatalf("keep: %d, %v", n, err)
		}
		r.Release()
	}()
	for range 3 {
		runtime.GC()
	}
	got, err := sumKept.Remote(ctx, h).Get(ctx)
	if err != nil || got != sum(want)+"," {
		t.Fatalf("the actor's kept ref after the driver dropped its handle: %q, %v", got, err)
	}
	if k, _ := nodes[0].ObjectStoreUsage(); k == 0 {
		t.Fatal("the borrowed object left the store while the actor keeps its ref")
	}
	// The borrower lets go: the owner hears of it and frees the object.
	if n, err := dropKept.Remote(ctx, h).Get(ctx); err != nil || n != 1 {
		t.Fatalf("drop: %d, %v", n, err)
	}
	storeEmpty(t, 20*time.Second, "the object is freed once its borrower let go", nodes...)
}

// sumNested checksums the values of the refs nested in its argument and
// keeps none of them.
var sumNested = Register1(func(ctx context.Context, refs []Ref[[]byte]) (string, error) {
	out := ""
	for _, r := range refs {
		b, err := r.Get(ctx)
		if err != nil {
			return "", err
		}
		out += sum(b) + ","
	}
	return out, nil
})

func TestNestedArgumentFreedAfterItsTask(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	want := blob(1<<20, 13)
	func() {
		r, err := Put(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		res := sumNested.Remote(ctx, []Ref[[]byte]{r})
		r.Release() // the pending task holds it
		if got, err := res.Get(ctx); err != nil || got != sum(want)+"," {
			t.Fatalf("task over a nested ref the driver released: %q, %v", got, err)
		}
	}()
	// Not pinned until the job ends: freed once the task and its worker
	// process let go.
	storeEmpty(t, 20*time.Second, "the nested argument is freed after its task", nodes...)
}

func TestGetOfFreedObjectIsObjectFreedError(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	small, err := Put(ctx, 42)
	if err != nil {
		t.Fatal(err)
	}
	large, err := Put(ctx, blob(1<<20, 2))
	if err != nil {
		t.Fatal(err)
	}
	// A copy that came back nested in a value has a handle of its own:
	// Free frees the object whatever other handles remain.
	back, err := Put(ctx, []Ref[int]{small})
	if err != nil {
		t.Fatal(err)
	}
	nested, err := back.Get(ctx)
	if err != nil || len(nested) != 1 {
		t.Fatal(nested, err)
	}
	if err := Free(small, large); err != nil {
		t.Fatal(err)
	}
	if err := Free(small, large); err != nil { // idempotent
		t.Fatal(err)
	}
	for _, get := range []func() error{
		func() error { _, err := small.Get(ctx); return err },
		func() error { _, err := large.Get(ctx); return err },
		func() error { _, err := nested[0].Get(ctx); return err },
	} {
		err := get()
		var fe *ObjectFreedError
		if !errors.As(err, &fe) || !errors.Is(err, ErrObjectLost) {
			t.Fatalf("get of a freed object: %v, want *ObjectFreedError (ErrObjectLost)", err)
		}
	}
	// A borrower asking the owner learns it was freed, too.
	_, err = sumRef.Remote(ctx, nested).Get(ctx)
	var te *TaskError
	if !errors.As(err, &te) || !strings.Contains(te.Message, "was freed") {
		t.Fatalf("borrower's get of a freed object: %v, want a task error saying it was freed", err)
	}
	// A freed ref passed as an argument is refused at submission.
	if _, err := square.RemoteArgs(ctx, small).Get(ctx); !errors.As(err, new(*ObjectFreedError)) {
		t.Fatalf("submit with a freed argument: %v", err)
	}
}

func TestFreeReachesSecondaryCopiesOnOtherNodes(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	ctx := ctxT(t)
	on1 := Resources(map[string]float64{"node1": 1})
	want := blob(3<<20, 6)
	func() {
		// The primary copy on n0 (the driver's node), a secondary on n1.
		r, err := Put(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Must(blobSum.Options(on1)).RemoteArgs(ctx, r).Get(ctx)
		if err != nil || got != "n1:"+sum(want) {
			t.Fatalf("task on n1 over n0's object: %q, %v", got, err)
		}
		// The primary copy on n1 (a task result), a secondary on n0.
		res := Must(makeBlob.Options(on1)).Remote(ctx, 2<<20, 3)
		if b, err := res.Get(ctx); err != nil || len(b) != 2<<20 {
			t.Fatalf("driver's get of n1's result: %d bytes, %v", len(b), err)
		}
		// Polled, and named on failure: CI once saw n1 with one object.
		testutil.Until(t, 10*time.Second, "each node holds a primary and a secondary copy", func() error {
			for i, n := range nodes {
				if es, _ := n.ObjectStore().List(); len(es) != 2 {
					return fmt.Errorf("node %d holds %+v; want a primary and a secondary copy of %s (put) and %s (result)", i, es, r.ID(), res.ID())
				}
			}
			return nil
		})
		r.Release()
	}()
	storeEmpty(t, 20*time.Second, "every copy on every node is freed", nodes...)
}

func TestPutAndDropLoopNeverFillsASmallStore(t *testing.T) {
	const storeBytes, objBytes, rounds = 128 << 20, 16 << 20, 40 // 5 times the store
	nodes := startClusterInit(t, 1, func(i int, cfg *cluster.Config) { cfg.ObjectStoreMemory = storeBytes })
	ctx := ctxT(t)
	buf := blob(objBytes, 1) // one buffer: little garbage, so no collection runs by itself
	var peak int64
	for i := range rounds {
		r, err := Put(ctx, buf)
		if err != nil {
			t.Fatalf("put %d of %d MiB on a %d MiB store: %v", i, objBytes>>20, storeBytes>>20, err)
		}
		if i%2 == 0 {
			r.Release() // half released at once, half left to the collector
		}
		_, used := nodes[0].ObjectStoreUsage()
		peak = max(peak, used)
	}
	t.Logf("%d puts of %d MiB through a %d MiB store; peak use %d MiB", rounds, objBytes>>20, storeBytes>>20, peak>>20)
	storeEmpty(t, 20*time.Second, "the store empties", nodes...)
}

// gatedBlob makes a large result once path exists.
var gatedBlob = Register2(func(ctx context.Context, path string, n int) ([]byte, error) {
	if _, err := waitFile.Remote(ctx, path, n).Get(ctx); err != nil {
		return nil, err
	}
	return blob(n, 8), nil
})

// A result whose ref was released, or freed with Free, before its task
// finished is freed when it arrives.
func TestResultDroppedBeforeItsTaskEndsIsFreedOnArrival(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	cw, _ := current()
	gate := filepath.Join(t.TempDir(), "go")
	released := gatedBlob.Remote(ctx, gate, 1<<20)
	freed := gatedBlob.Remote(ctx, gate, 1<<20)
	kept := gatedBlob.Remote(ctx, gate, 1<<20)
	released.Release()
	if err := Free(freed); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := kept.Get(ctx); err != nil || len(b) != 1<<20 {
		t.Fatalf("the kept result: %d bytes, %v", len(b), err)
	}
	testutil.Until(t, 20*time.Second, "the two dropped results are freed on arrival", func() error {
		for _, r := range []Ref[[]byte]{released, freed} {
			if o := cw.objects.get(r.ID()); o != nil {
				return fmt.Errorf("result %s is still in the owner's table (ready %v)", r.ID(), o.ready())
			}
		}
		if k, _ := nodes[0].ObjectStoreUsage(); k != 1 {
			return fmt.Errorf("the store holds %d objects, want the kept result only", k)
		}
		return nil
	})
	if _, err := freed.Get(ctx); !errors.As(err, new(*ObjectFreedError)) {
		t.Fatalf("get of a result freed before it arrived: %v", err)
	}
	runtime.KeepAlive(kept)
}

// putSome puts n small values in the worker (which owns them) and returns
// their refs.
var putSome = Register1(func(ctx context.Context, n int) ([]Ref[int], error) {
	refs := make([]Ref[int], n)
	for i := range refs {
		r, err := Put(ctx, i*i)
		if err != nil {
			return nil, err
		}
		refs[i] = r
	}
	return refs, nil
})

// A process forgets the values it fetched from other owners once it holds
// no Ref to them: a long-running driver does not keep every value it read.
func TestBorrowedValuesAreNotCachedForever(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	cw, _ := current()
	var ids []string
	func() {
		refs, err := putSome.Remote(ctx, 5).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := GetAll(ctx, refs)
		if err != nil || len(vals) != 5 || vals[4] != 16 {
			t.Fatalf("values owned by the worker: %v, %v", vals, err)
		}
		for _, r := range refs {
			if cw.objects.get(r.ID()) == nil {
				t.Fatalf("object %s was not cached while its ref is held", r.ID())
			}
			ids = append(ids, r.ID())
		}
	}()
	testutil.Until(t, 10*time.Second, "the fetched values are dropped with their refs", func() error {
		runtime.GC()
		for _, id := range ids {
			if cw.objects.get(id) != nil {
				return fmt.Errorf("object %s is still cached", id)
			}
		}
		return nil
	})
}
