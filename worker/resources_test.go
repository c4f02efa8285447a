package worker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
)

// inSlot counts tasks running at once in this worker process; maxInSlot is
// the most seen. Every task needing "slot" runs in its node's one worker
// process, so these see all of a node's concurrent slot holders.
var inSlot, maxInSlot atomic.Int64

var useSlot = Register1(func(ctx context.Context, hold time.Duration) (string, error) {
	n := inSlot.Add(1)
	defer inSlot.Add(-1)
	for {
		m := maxInSlot.Load()
		if n <= m || maxInSlot.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(hold) // simulated work while holding the slot
	return fmt.Sprintf("%s:%d", NodeName(), maxInSlot.Load()), nil
})

func TestCustomResourceNeverOvercommitted(t *testing.T) {
	startCluster(t, 3, func(i int) sched.ResourceSet { return sched.ResourceSet{"slot": sched.QuantityOf(2)} })
	ctx := ctxT(t)
	f := Must(useSlot.Options(Resources(map[string]float64{"slot": 1}), CPUs(0)))
	// Each task holds its slot 20 ms: 3 s of work for one node's two
	// slots, long enough for the spilled leases' worker processes to start
	// on the others even on a loaded machine.
	refs := make([]Ref[string], 300)
	for i := range refs {
		refs[i] = f.Remote(ctx, 20*time.Millisecond)
	}
	out, err := GetAll(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for _, s := range out {
		node, mostText, _ := strings.Cut(s, ":")
		most, err := strconv.Atoi(mostText)
		if err != nil {
			t.Fatalf("task result %q: %v", s, err)
		}
		if most > 2 {
			t.Fatalf("node %s ran %d slot tasks at once; it has 2 slots", node, most)
		}
		perNode[node]++
	}
	if len(perNode) < 2 {
		t.Fatalf("%d tasks ran on %v only: no spillback", len(refs), perNode)
	}
	t.Logf("tasks per node: %v", perNode)
	// Every slot is given back.
	testutil.Until(t, 10*time.Second, "all 6 slots available after all tasks ended", func() error {
		avail, err := AvailableResources(ctx)
		if err == nil && avail["slot"] != 6 {
			err = fmt.Errorf("%v slots available", avail["slot"])
		}
		return err
	})
}
