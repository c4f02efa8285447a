package worker

import (
	"context"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
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
func BenchmarkTasksPipelined(b *testing.B) { benchTasksPipelined(b, context.Background()) }

// BenchmarkTasksPipelinedCancellableCtx is BenchmarkTasksPipelined with a
// ctx that can end, which every task then watches (Remote's ctx cancels it).
func BenchmarkTasksPipelinedCancellableCtx(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	benchTasksPipelined(b, ctx)
}

func benchTasksPipelined(b *testing.B, ctx context.Context) {
	startCluster(b, 1, nil)
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

// benchActor is a no-op actor for the actor benchmarks.
type benchActor struct{}

func newBenchActor(ctx context.Context) (*benchActor, error) { return &benchActor{}, nil }

func (a *benchActor) Noop(ctx context.Context, x int) (int, error) { return x, nil }

var (
	benchActorClass = RegisterActor0(newBenchActor)
	benchNoop       = RegisterMethod1((*benchActor).Noop)
)

// BenchmarkActorCallsSync is Ray's 1_1_actor_calls_sync: one caller, one
// actor on the same node, each no-op call waited for before the next.
func BenchmarkActorCallsSync(b *testing.B) {
	ctx := context.Background()
	h := startedBenchActor(b, ctx)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := benchNoop.Remote(ctx, h, i).Get(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkActorCallsPipelined is Ray's 1_1_actor_calls_async: b.N calls
// submitted, then all waited for.
func BenchmarkActorCallsPipelined(b *testing.B) {
	ctx := context.Background()
	h := startedBenchActor(b, ctx)
	b.ResetTimer()
	refs := make([]Ref[int], b.N)
	for i := range refs {
		refs[i] = benchNoop.Remote(ctx, h, i)
	}
	if _, err := GetAll(ctx, refs); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkActorCreation is Ray's actor creation rate: b.N actors created,
// then one call on each waited for (so each is placed, started and
// constructed).
func BenchmarkActorCreation(b *testing.B) {
	ctx := context.Background()
	startedBenchActor(b, ctx) // warm up: leader ready, binary cached
	b.ResetTimer()
	hs := make([]ActorHandle[benchActor], b.N)
	for i := range hs {
		h, err := benchActorClass.Remote(ctx)
		if err != nil {
			b.Fatal(err)
		}
		hs[i] = h
	}
	refs := make([]Ref[int], b.N)
	for i, h := range hs {
		refs[i] = benchNoop.Remote(ctx, h, i)
	}
	if _, err := GetAll(ctx, refs); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "actors/s")
	b.StopTimer()
	for _, h := range hs {
		_ = Kill(ctx, h, true)
	}
}

// startedBenchActor starts a one-node cluster and a no-op actor that has
// answered a call, so timings exclude startup.
func startedBenchActor(b *testing.B, ctx context.Context) ActorHandle[benchActor] {
	startCluster(b, 1, nil)
	h, err := benchActorClass.Remote(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := benchNoop.Remote(ctx, h, 0).Get(ctx); err != nil {
		b.Fatal(err)
	}
	return h
}

// BenchmarkGetAllLocal is scalability_get_10000_refs in miniature: GetAll
// of 1,000 refs to lists of 1,000 ints this process Put (per op: 1,000 Gets).
func BenchmarkGetAllLocal(b *testing.B) {
	startCluster(b, 1, nil)
	ctx := context.Background()
	v := make([]int, 1000)
	refs := make([]Ref[[]int], 1000)
	for i := range refs {
		var err error
		if refs[i], err = Put(ctx, v); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := GetAll(ctx, refs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetLarge is Get of a 1 MiB object this process put, on its own
// node: Obj.Locate, a copy out of the store, and the release of the
// reader's pin (Obj.Release).
func BenchmarkGetLarge(b *testing.B) {
	startCluster(b, 1, nil)
	ctx := context.Background()
	r, err := Put(ctx, blob(1<<20, 7))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if v, err := r.Get(ctx); err != nil || len(v) != 1<<20 {
			b.Fatal(len(v), err)
		}
	}
}

// BenchmarkResultEncode compares a small task result's encoding as the
// executor does it (marshalArg: also collects refs nested in it, Ray's
// "contained in" references) with plain msgpack.Marshal, its baseline.
func BenchmarkResultEncode(b *testing.B) {
	v := struct {
		A int
		B string
	}{42, "result"}
	b.Run("marshalArg", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, _, err := marshalArg(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshalArg-int", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, _, err := marshalArg(i); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack.Marshal-int", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := msgpack.Marshal(i); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := msgpack.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
