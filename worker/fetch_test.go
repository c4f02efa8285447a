package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestWaitReturnsAtMostNumReturns checks ray.wait's contract: with more refs
// ready than asked for, ready holds exactly numReturns, the first in order.
func TestWaitReturnsAtMostNumReturns(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	var refs []Ref[int]
	for i := range 5 {
		r, err := Put(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	ready, notReady, err := Wait(ctx, refs, 2, 0)
	if err != nil || len(ready) != 2 || ready[0] != refs[0] || ready[1] != refs[1] || len(notReady) != 3 || notReady[0] != refs[2] || notReady[2] != refs[4] {
		t.Fatalf("Wait(5 ready, 2) = %v, %v, %v", ready, notReady, err)
	}
	// Consuming one at a time visits every ref once.
	rest, seen := refs, 0
	for len(rest) > 0 {
		var r []Ref[int]
		if r, rest, err = Wait(ctx, rest, 1, time.Second); err != nil || len(r) != 1 {
			t.Fatalf("Wait(%d, 1) = %v, %v", len(rest), r, err)
		}
		if v, _ := r[0].Get(ctx); v != seen {
			t.Fatalf("ref %d holds %d", seen, v)
		}
		seen++
	}
	if ready, notReady, err := Wait(ctx, refs, 0, 0); err != nil || len(ready) != 0 || len(notReady) != 5 {
		t.Fatalf("Wait(5, 0) = %v, %v, %v", ready, notReady, err)
	}
}

// waitInTask waits inside a task for refs owned by the driver: the borrower
// path (batch fetches from the owner). It returns the positions of the
// ready refs after each Wait of one. Once only one ref is left it sends
// release, which the task behind that ref waits for.
var waitInTask = Register2(func(ctx context.Context, refs []Ref[time.Duration], release Signal) ([]int, error) {
	pos := map[string]int{}
	for i, r := range refs {
		pos[r.ID()] = i
	}
	var order []int
	for rest := refs; len(rest) > 0; {
		if len(rest) == 1 {
			if err := release.Send(ctx, false); err != nil {
				return nil, err
			}
		}
		ready, notReady, err := Wait(ctx, rest, 1, 0)
		if err != nil {
			return nil, err
		}
		if len(ready) != 1 || len(notReady) != len(rest)-1 {
			return nil, fmt.Errorf("Wait(%d, 1) gave %d ready and %d not", len(rest), len(ready), len(notReady))
		}
		order = append(order, pos[ready[0].ID()])
		rest = notReady
	}
	return order, nil
})

// awaitSignal returns once s is sent.
var awaitSignal = Register1(func(ctx context.Context, s Signal) (time.Duration, error) { return 0, s.Wait(ctx) })

func TestWaitInTaskForBorrowedRefs(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	release, err := NewSignal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The held-back task first: a borrower that waited for every ref (or
	// for the first in order) would wait for it, which only the borrower
	// itself releases, after seeing the others ready. The others are Puts,
	// ready from the start.
	refs := []Ref[time.Duration]{Must(awaitSignal.Options(CPUs(0))).Remote(ctx, release)}
	for _, d := range []time.Duration{1, 2} {
		r, err := Put(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	order, err := Must(waitInTask.Options(CPUs(0))).Remote(ctx, refs, release).Get(short)
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 || order[0] != 1 || order[1] != 2 || order[2] != 0 {
		t.Fatalf("the borrower saw the refs ready in order %v; want [1 2 0]", order)
	}
}

// parallelGets Gets each ref from its own goroutine inside one task.
var parallelGets = Register1(func(ctx context.Context, refs []Ref[time.Duration]) (int, error) {
	var wg sync.WaitGroup
	errs := make([]error, len(refs))
	for i, r := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.Get(ctx)
		}()
	}
	wg.Wait()
	return len(refs), errors.Join(errs...)
})

// TestParallelGetsInOneTask: goroutines of one task blocking in Get at the
// same time lend the task's CPU once and take it back once (this used to
// unlock the lease's slot twice and kill the worker process).
func TestParallelGetsInOneTask(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	var refs []Ref[time.Duration]
	for range 4 {
		refs = append(refs, sleepy.Remote(ctx, 300*time.Millisecond))
	}
	n, err := parallelGets.Remote(ctx, refs).Get(ctx)
	if err != nil || n != 4 {
		t.Fatalf("parallel Gets in a task: %d, %v", n, err)
	}
	// The lease works afterwards: the task's slot was handed back once.
	if v, err := square.Remote(ctx, 7).Get(ctx); err != nil || v != 49 {
		t.Fatalf("square after parallel Gets: %d, %v", v, err)
	}
}

// sumAll GetAlls refs owned by the driver (batched per owner) and sums the
// first byte of each value and their lengths.
var sumAll = Register1(func(ctx context.Context, refs []Ref[[]byte]) ([2]int, error) {
	vals, err := GetAll(ctx, refs)
	if err != nil {
		return [2]int{}, err
	}
	var s [2]int
	for _, v := range vals {
		s[0] += int(v[0])
		s[1] += len(v)
	}
	return s, nil
})

// TestGetAllBorrowedRefsInBatches: a task reads 3,000 small objects and 150
// of 90 KB (13.5 MB: more than one reply's 8 MiB) owned by the driver.
func TestGetAllBorrowedRefsInBatches(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	for _, c := range []struct{ n, size int }{{3000, 8}, {150, 90 << 10}} {
		refs := make([]Ref[[]byte], c.n)
		want := [2]int{0, c.n * c.size}
		for i := range refs {
			var err error
			if refs[i], err = Put(ctx, bytes.Repeat([]byte{byte(i % 7)}, c.size)); err != nil {
				t.Fatal(err)
			}
			want[0] += i % 7
		}
		got, err := sumAll.Remote(ctx, refs).Get(ctx)
		if err != nil || got != want {
			t.Fatalf("%d objects of %d bytes: got %v, %v; want %v", c.n, c.size, got, err, want)
		}
	}
}

// TestWaitForLostBorrowedRef: a ref whose owner is gone is ready (Get
// reports the loss) rather than waited for forever.
func TestWaitForLostBorrowedRef(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	lost := Ref[int]{id: "gone-p1", owner: "127.0.0.1:1"}
	ready, _, err := Wait(ctx, []Ref[int]{lost}, 1, 10*time.Second)
	if err != nil || len(ready) != 1 {
		t.Fatalf("Wait on an unreachable owner's ref: %v, %v", ready, err)
	}
	var oe *OwnerDiedError
	if _, err := lost.Get(ctx); !errors.As(err, &oe) || oe.Owner != lost.owner || oe.ObjectID != lost.id || !errors.Is(err, ErrOwnerDied) || !errors.Is(err, ErrObjectLost) {
		t.Fatalf("Get of an unreachable owner's ref: %v, want an OwnerDiedError naming the object and owner that is ErrOwnerDied and ErrObjectLost", err)
	}
}
