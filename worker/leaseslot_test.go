package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// acquireAsync runs acquire in a goroutine and returns its outcome.
func acquireAsync(ls *leaseSlots, ctx context.Context, id uint64, pipelined bool) <-chan bool {
	out := make(chan bool, 1)
	go func() {
		_, ok := ls.acquire(ctx, id, pipelined)
		out <- ok
	}()
	return out
}

func waitOutcome(t *testing.T, ch <-chan bool, what string) bool {
	t.Helper()
	select {
	case ok := <-ch:
		return ok
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: acquire did not return", what)
		return false
	}
}

// waiters reports how many pushes wait on lease id.
func waiters(ls *leaseSlots, id uint64) int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if s := ls.slots[id]; s != nil {
		return len(s.waiters)
	}
	return 0
}

func waitWaiters(t *testing.T, ls *leaseSlots, id uint64, n int) {
	t.Helper()
	testutil.Until(t, 5*time.Second, fmt.Sprintf("lease %d: %d waiters", id, n), func() error {
		if w := waiters(ls, id); w != n {
			return fmt.Errorf("%d waiters", w)
		}
		return nil
	})
}

func newSlots() *leaseSlots {
	return &leaseSlots{slots: map[uint64]*leaseSlot{}, revoked: map[uint64]string{}}
}

// A pipelined push behind a task that blocks is sent away at once, while
// a push that is not pipelined keeps waiting and gets the slot next.
func TestLeaseSlotBlockedTaskSendsPipelinedAway(t *testing.T) {
	ls := newSlots()
	ctx := context.Background()
	s, ok := ls.acquire(ctx, 1, false)
	if !ok {
		t.Fatal("free slot refused")
	}
	plain := acquireAsync(ls, ctx, 1, false)
	waitWaiters(t, ls, 1, 1)
	piped := acquireAsync(ls, ctx, 1, true)
	waitWaiters(t, ls, 1, 2)
	ls.block(s)
	if waitOutcome(t, piped, "pipelined behind a blocked task") {
		t.Fatal("a pipelined push ran behind a blocked task (on the resources it keeps)")
	}
	if _, ok := ls.acquire(ctx, 1, true); ok {
		t.Fatal("a pipelined push arriving after the block got the slot")
	}
	ls.release(1, s)
	if !waitOutcome(t, plain, "not pipelined") {
		t.Fatal("the push that is not pipelined was sent away")
	}
}

// A pipelined push behind a task that runs longer than pipelineWait is
// sent away; pushes behind short tasks get the slot in arrival order.
func TestLeaseSlotPipelineWait(t *testing.T) {
	ls := newSlots()
	ctx := context.Background()
	s, _ := ls.acquire(ctx, 2, false)
	start := time.Now()
	piped := acquireAsync(ls, ctx, 2, true)
	if waitOutcome(t, piped, "behind a long task") {
		t.Fatal("a pipelined push waited behind a task running past pipelineWait")
	}
	if d := time.Since(start); d < pipelineWait {
		t.Fatalf("sent away after %s, before pipelineWait %s", d, pipelineWait)
	}
	ls.release(2, s)

	// Short tasks: a wait long enough that the timer cannot fire on a
	// loaded machine while the waiters line up.
	old := pipelineWait
	pipelineWait = time.Minute
	t.Cleanup(func() { pipelineWait = old })
	s, _ = ls.acquire(ctx, 3, false)
	var order []<-chan bool
	for i := range 3 {
		order = append(order, acquireAsync(ls, ctx, 3, true))
		waitWaiters(t, ls, 3, i+1)
	}
	ls.release(3, s)
	for i, ch := range order {
		if !waitOutcome(t, ch, "behind short tasks") {
			t.Fatalf("pipelined push %d behind short tasks was sent away", i)
		}
		ls.mu.Lock()
		next := ls.slots[3]
		ls.mu.Unlock()
		ls.release(3, next)
	}
	if waiters(ls, 3) != 0 || len(ls.slots) != 0 {
		t.Fatalf("slots left after every push ended: %v", ls.slots)
	}
}

// A push whose context ends stops waiting, and a slot handed to it meanwhile
// passes on.
func TestLeaseSlotContextEnds(t *testing.T) {
	ls := newSlots()
	s, _ := ls.acquire(context.Background(), 4, false)
	ctx, cancel := context.WithCancel(context.Background())
	gone := acquireAsync(ls, ctx, 4, false)
	waitWaiters(t, ls, 4, 1)
	cancel()
	if waitOutcome(t, gone, "cancelled") {
		t.Fatal("a cancelled push got the slot")
	}
	ls.release(4, s)
	if len(ls.slots) != 0 {
		t.Fatalf("slot kept after its last push: %v", ls.slots)
	}
}
