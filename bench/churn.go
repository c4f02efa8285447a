package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/wire"
	"github.com/nodeup/nodeup/worker"
)

// Sizes of object_churn: the driver's objects, the chain's results and the
// store they churn through (issue 16's figures).
const (
	churnPutSize   = 16 << 20
	churnStepSize  = 10 << 20
	churnStore     = 1 << 30
	churnRunFactor = 20 // a run lasts this many times Options.Duration: 10 s by default
	churnRuns      = 2
	// churnGrace bounds how long a run may overrun its length (a put or a
	// chain step that never returns) before it fails instead of hanging.
	churnGrace = 30 * time.Second
	// churnPoll is how often the peak store use is sampled.
	churnPoll = 2 * time.Millisecond
)

var (
	// churnFirst starts the chain: a 10 MiB result whose first byte is 0.
	churnFirst = worker.Register1(func(ctx context.Context, n int) ([]byte, error) {
		return make([]byte, n), nil
	})
	// churnStep passes the chain along: a new 10 MiB result copied from its
	// argument with the first byte counted up, so the driver can check that
	// every step saw its predecessor's value.
	churnStep = worker.Register1(func(ctx context.Context, in []byte) ([]byte, error) {
		out := make([]byte, len(in))
		copy(out, in)
		if len(out) > 0 {
			out[0]++
		}
		return out, nil
	})
)

func init() {
	register(&Metric{Name: "object_churn", Unit: "GB/s", Group: GroupObjects, Baseline: BaselineMemcpy,
		FreshJob: true, MaxRuns: churnRuns, RunFactor: churnRunFactor, StoreBytes: churnStore,
		Also: []Also{
			{Name: "object_churn_peak_store_bytes", Unit: "bytes", LowerIsBetter: true, NoBaseline: true},
			{Name: "object_churn_operations", Unit: "operations", NoBaseline: true},
			{Name: "object_churn_spilled_bytes", Unit: "bytes", LowerIsBetter: true, NoBaseline: true},
		},
		Desc: "for 20 run lengths (10 s by default), with a 1 GiB store of its own: the driver Puts a 16 MiB []byte and drops the ref, " +
			"while a chain of tasks passes 10 MiB results along (one step per Put); bytes put and passed per second, " +
			"the peak store use sampled every 2 ms, the Puts plus steps done, and the bytes spilled to disk meanwhile. A full store ends the run as object_store_full",
		Setup: setupChurn})
}

// isStoreFull reports whether err says an object did not fit in a store,
// from a Put (a coded error) or a task whose result did not fit (its text).
func isStoreFull(err error) bool {
	return errors.Is(err, worker.ErrObjectStoreFull) ||
		strings.Contains(err.Error(), wire.CodeObjectStoreFull) || strings.Contains(err.Error(), "object store full")
}

func setupChurn(ctx context.Context, e *Env) (RunFunc, error) {
	node := e.store
	if node == nil {
		return nil, fmt.Errorf("object_churn runs on a node of its own (Metric.StoreBytes); none was started")
	}
	buf := make([]byte, churnPutSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	return func(ctx context.Context, d time.Duration) ([]float64, error) {
		length := churnRunFactor * d
		ctx, cancel := context.WithTimeout(ctx, length+churnGrace)
		defer cancel()
		var peak atomic.Int64
		sample := func() {
			if u := node.ObjectStoreUsed(); u > peak.Load() {
				peak.Store(u)
			}
		}
		done := make(chan struct{})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			t := time.NewTicker(churnPoll)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					sample()
				}
			}
		}()
		var puts, steps int
		spilled0, _ := node.ObjectSpillTotals()
		start := time.Now()
		err := func() error {
			prev := churnFirst.Remote(ctx, churnStepSize)
			for time.Since(start) < length || puts == 0 {
				next := churnStep.RemoteArgs(ctx, prev)
				if _, err := worker.Put(ctx, buf); err != nil { // the ref is dropped at once
					return fmt.Errorf("put %d: %w", puts+1, err)
				}
				puts++
				v, err := next.Get(ctx)
				if err != nil {
					return fmt.Errorf("chain step %d: %w", steps+1, err)
				}
				if len(v) != churnStepSize || v[0] != byte(steps+1) {
					return fmt.Errorf("chain step %d returned %d bytes starting %d, want %d bytes starting %d",
						steps+1, len(v), v[0], churnStepSize, byte(steps+1))
				}
				steps++
				// The previous result was read as a view: Release frees it
				// (the collector leaves viewed objects alone).
				prev.Release()
				prev = next
			}
			return nil
		}()
		elapsed := time.Since(start)
		close(done)
		<-stopped
		sample()
		spilled1, _ := node.ObjectSpillTotals()
		values := []float64{(float64(puts)*churnPutSize + float64(steps)*churnStepSize) / 1e9 / elapsed.Seconds(),
			float64(peak.Load()), float64(puts + steps), float64(spilled1 - spilled0)}
		switch {
		case err == nil:
			return values, nil
		case isStoreFull(err):
			return nil, &partialError{values: values, err: fmt.Errorf(
				"%s after %d Puts of 16 MiB and %d chain steps of 10 MiB in %.2f s: peak store use %d of %d bytes "+
					"(what no ref holds is freed, and with spilling on the rest spills: a full store means the live objects outgrew it): %w",
				wire.CodeObjectStoreFull, puts, steps, elapsed.Seconds(), peak.Load(), e.storeCap, err)}
		case ctx.Err() != nil && time.Since(start) >= length+churnGrace:
			return nil, fmt.Errorf("object_churn did not finish within %v of its %v run (%d Puts, %d chain steps done): %w",
				churnGrace, length, puts, steps, err)
		default:
			return nil, err
		}
	}, nil
}
