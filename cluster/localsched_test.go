package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// queuedCount is the number of requests waiting in s's queue.
func queuedCount(s *localSched) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// The local queue: waiters are granted in order as resources come back, a
// cancelled waiter leaves the queue, and waiters for a placement-group
// bundle that is returned are refused (errUnfit).
func TestLocalSchedQueue(t *testing.T) {
	cpu := func(n int64) sched.ResourceSet { return sched.ResourceSet{sched.CPU: sched.QuantityOf(n)} }
	s := newLocalSched(cpu(2))
	all := s.tryGrant(cpu(2))
	if all == nil {
		t.Fatal("2 CPUs not granted on an idle 2-CPU node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		l   *lease
		err error
	}
	wait := func(ctx context.Context, res sched.ResourceSet) chan result {
		ch := make(chan result, 1)
		go func() {
			l, err := s.wait(ctx, res)
			ch <- result{l, err}
		}()
		return ch
	}
	queued := func(n int) {
		t.Helper()
		testutil.Until(t, 5*time.Second, fmt.Sprintf("%d queued", n), func() error {
			if q := queuedCount(s); q != n {
				return fmt.Errorf("%d queued", q)
			}
			return nil
		})
	}
	gone, giveUp := context.WithCancel(ctx)
	a, b, c := wait(ctx, cpu(1)), wait(gone, cpu(1)), wait(ctx, cpu(1))
	queued(3)
	giveUp()
	if r := <-b; !errors.Is(r.err, context.Canceled) || r.l != nil {
		t.Fatalf("cancelled waiter: %+v", r)
	}
	queued(2)
	s.release(all.id)
	for _, ch := range []chan result{a, c} {
		if r := <-ch; r.err != nil || r.l == nil {
			t.Fatalf("waiter after release: %+v", r)
		}
	}
	queued(0)
	if free := s.available()[sched.CPU]; free != 0 {
		t.Fatalf("free CPU %s after granting both waiters", free)
	}

	// A bundle's renamed resources: one lease holds them, one waits, then
	// the group is removed.
	const group = "0123456789abcdef"
	s = newLocalSched(cpu(2))
	if why := s.commitBundles(group, []wire.BundleSpec{{Index: 0, Resources: cpu(1)}}); why != "" {
		t.Fatal(why)
	}
	inBundle := sched.PlacementGroupDemand(group, -1, cpu(1))
	held := s.tryGrant(inBundle)
	if held == nil {
		t.Fatal("the bundle's CPU not granted")
	}
	outside := s.tryGrant(cpu(1))
	d := wait(ctx, inBundle)
	queued(1)
	// The lease in the bundle is revoked (not yet tied to a worker, it is
	// refused when it would be); the one outside is not.
	if k, revoked := s.returnBundles(group, nil); k != 1 || len(revoked) != 1 || revoked[0].id != held.id {
		t.Fatalf("returnBundles = %d bundles, revoked %+v; want 1 and lease %d", k, revoked, held.id)
	}
	if s.setWorker(held.id, "w1") || !s.setWorker(outside.id, "w1") {
		t.Fatal("setWorker: the revoked lease was handed out, or the other one refused")
	}
	if r := <-d; !errors.Is(r.err, errUnfit) {
		t.Fatalf("waiter for a returned bundle: %+v, want errUnfit", r)
	}
	queued(0)
}

// wait queues a request until it can be granted or ctx ends, as
// waitOrSpill does for a request that may not move.
func (s *localSched) wait(ctx context.Context, res sched.ResourceSet) (*lease, error) {
	l, w := s.enqueue(res)
	if l != nil {
		return l, nil
	}
	select {
	case l := <-w.grant:
		if l == nil {
			return nil, errUnfit
		}
		return l, nil
	case <-ctx.Done():
		if l := s.withdraw(w); l != nil {
			s.release(l.id)
		}
		return nil, ctx.Err()
	}
}
