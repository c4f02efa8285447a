package worker

import (
	"context"
	"testing"
)

var noop = Register1(func(ctx context.Context, x int) (int, error) { return x, nil })

// BenchmarkTasksSync is Ray's single_client_tasks_sync: submit one no-op
// task and wait for it, repeatedly; the driver (this process) and the worker
// are separate processes on one node.
func BenchmarkTasksSync(b *testing.B) {
	startCluster(b, 1, nil)
	ctx := context.Background()
	if _, err := noop.Remote(ctx, 0).Get(ctx); err != nil { // warm up: start the worker
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := noop.Remote(ctx, i).Get(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkTasksPipelined is Ray's single_client_tasks_async: submit b.N
// no-op tasks, then wait for all of them.
func BenchmarkTasksPipelined(b *testing.B) {
	startCluster(b, 1, nil)
	ctx := context.Background()
	if _, err := noop.Remote(ctx, 0).Get(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	refs := make([]Ref[int], b.N)
	for i := range refs {
		refs[i] = noop.Remote(ctx, i)
	}
	if _, err := GetAll(ctx, refs); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}
