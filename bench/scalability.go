package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nodeup/nodeup/worker"
)

// Ray's single-node scalability set (release/benchmarks/single_node) at
// reduced size: Ray's counts except 100,000 queued tasks (Ray: 1,000,000),
// and items of 1,000 ints (Ray: 10,000). Each run is one operation in a
// fresh job; the value is its wall time divided by the number of items.
const (
	scaleArgs    = 10000
	scaleReturns = 3000
	scaleGets    = 10000
	scaleQueued  = 100000
	itemInts     = 1000
	scaleRuns    = 3
)

var (
	// sumArgs gets every ref it is passed and sums the values (Ray's
	// sum_args(*args), whose arguments Ray resolves before the task runs;
	// the SDK passes the refs as one list, fetched with one GetAll).
	sumArgs = worker.Register1(func(ctx context.Context, refs []worker.Ref[[]int]) (int, error) {
		vals, err := worker.GetAll(ctx, refs)
		if err != nil {
			return 0, err
		}
		sum := 0
		for _, v := range vals {
			for _, x := range v {
				sum += x
			}
		}
		return sum, nil
	})
	// manyReturns puts n items and returns their refs (Ray's
	// num_returns=3000; the SDK returns at most two values, so the refs
	// come back as one list).
	manyReturns = worker.Register1(func(ctx context.Context, n int) ([]worker.Ref[[]int], error) {
		return putRefs(ctx, n, rangeInts(itemInts))
	})
)

func rangeInts(n int) []int {
	v := make([]int, n)
	for i := range v {
		v[i] = i
	}
	return v
}

func ones(n int) []int {
	v := make([]int, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

func init() {
	register(
		&Metric{Name: "scalability_10000_args", Unit: "µs/item", Group: GroupScalability, LowerIsBetter: true, FreshJob: true,
			Items: scaleArgs, MaxRuns: scaleRuns,
			Desc:  "one task gets 10,000 refs the driver Put (lists of 1,000 ints) and sums them; submit to result, per argument (Ray: 10000_args_time)",
			Setup: setupManyArgs},
		&Metric{Name: "scalability_3000_returns", Unit: "µs/item", Group: GroupScalability, LowerIsBetter: true, FreshJob: true,
			Items: scaleReturns, MaxRuns: scaleRuns,
			Desc:  "one task returns 3,000 refs to lists of 1,000 ints it Put; the driver Gets every one; submit to last Get, per return (Ray: 3000_returns_time)",
			Setup: setupManyReturns},
		&Metric{Name: "scalability_get_10000_refs", Unit: "µs/item", Group: GroupScalability, LowerIsBetter: true, FreshJob: true,
			Items: scaleGets, MaxRuns: scaleRuns,
			Desc:  "GetAll of 10,000 refs the driver Put (lists of 1,000 ints), per ref; the Puts are not timed (Ray: 10000_get_time)",
			Setup: setupGetManyRefs},
		&Metric{Name: "scalability_100000_queued_tasks", Unit: "µs/item", Group: GroupScalability, LowerIsBetter: true, FreshJob: true,
			Items: scaleQueued, MaxRuns: scaleRuns,
			Desc:  "submit 100,000 no-op tasks at once, then GetAll; per task (Ray: 1000000_queued_time, with 1,000,000)",
			Setup: setupQueued},
	)
}

// timedOnce turns op into a RunFunc that does it once and reports µs per item.
func timedOnce(items int, op func(ctx context.Context) error) RunFunc {
	return func(ctx context.Context, d time.Duration) ([]float64, error) {
		start := time.Now()
		if err := op(ctx); err != nil {
			return nil, err
		}
		return []float64{float64(time.Since(start).Nanoseconds()) / 1e3 / float64(items)}, nil
	}
}

// startWorker runs one no-op task, so the timed operation does not include
// starting the job's worker process.
func startWorker(ctx context.Context) error {
	_, err := smallValue.Remote(ctx).Get(ctx)
	return err
}

func setupManyArgs(ctx context.Context, e *Env) (RunFunc, error) {
	n := e.Scale(scaleArgs)
	if err := startWorker(ctx); err != nil {
		return nil, err
	}
	refs, err := putRefs(ctx, n, ones(itemInts))
	if err != nil {
		return nil, err
	}
	return timedOnce(n, func(ctx context.Context) error {
		sum, err := sumArgs.Remote(ctx, refs).Get(ctx)
		if err == nil && sum != n*itemInts {
			err = fmt.Errorf("sum %d, want %d", sum, n*itemInts)
		}
		return err
	}), nil
}

func setupManyReturns(ctx context.Context, e *Env) (RunFunc, error) {
	n := e.Scale(scaleReturns)
	if err := startWorker(ctx); err != nil {
		return nil, err
	}
	return timedOnce(n, func(ctx context.Context) error {
		refs, err := manyReturns.Remote(ctx, n).Get(ctx)
		if err != nil {
			return err
		}
		vals, err := worker.GetAll(ctx, refs)
		if err == nil && (len(vals) != n || len(vals[n-1]) != itemInts) {
			err = fmt.Errorf("got %d returns, want %d of %d ints", len(vals), n, itemInts)
		}
		return err
	}), nil
}

func setupGetManyRefs(ctx context.Context, e *Env) (RunFunc, error) {
	n := e.Scale(scaleGets)
	refs, err := putRefs(ctx, n, rangeInts(itemInts))
	if err != nil {
		return nil, err
	}
	return timedOnce(n, func(ctx context.Context) error {
		vals, err := worker.GetAll(ctx, refs)
		if err == nil && len(vals) != n {
			err = fmt.Errorf("got %d values, want %d", len(vals), n)
		}
		return err
	}), nil
}

func setupQueued(ctx context.Context, e *Env) (RunFunc, error) {
	n := e.Scale(scaleQueued)
	if err := startWorker(ctx); err != nil {
		return nil, err
	}
	return timedOnce(n, func(ctx context.Context) error {
		return submitAndGet(ctx, n)
	}), nil
}

// putRefs puts v n times and returns the refs.
func putRefs[T any](ctx context.Context, n int, v T) ([]worker.Ref[T], error) {
	refs := make([]worker.Ref[T], n)
	for i := range refs {
		r, err := worker.Put(ctx, v)
		if err != nil {
			return nil, err
		}
		refs[i] = r
	}
	return refs, nil
}
