package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/nodeup/nodeup/worker"
)

// Actor call batch sizes: Ray's ray_perf.py uses 1,000 calls per async
// operation and 5,000 per client for the 1:n and n:n shapes; here 1,000 per
// client so one operation fits a short run on 2 cores.
const (
	actorBatch   = 1000
	actorClients = 4
)

// benchActor is Ray's Actor of ray_perf.py: no-op methods.
type benchActor struct{}

func newBenchActor(ctx context.Context) (*benchActor, error) { return &benchActor{}, nil }

// SmallValue is Ray's small_value: returns b"ok".
func (a *benchActor) SmallValue(ctx context.Context) ([]byte, error) { return okValue, nil }

// SmallValueArg is Ray's small_value_arg: takes a value, returns b"ok".
func (a *benchActor) SmallValueArg(ctx context.Context, x []byte) ([]byte, error) {
	return okValue, nil
}

// clientActor is Ray's Client actor: it calls server actors from inside the cluster.
type clientActor struct{}

func newClientActor(ctx context.Context) (*clientActor, error) { return &clientActor{}, nil }

// CallServers makes n calls spread over servers and waits for them.
func (c *clientActor) CallServers(ctx context.Context, servers []worker.ActorHandle[benchActor], n int) (int, error) {
	return callServers(ctx, servers, n)
}

// CallWithArg makes n calls to server, each with a ref argument (Ray's
// small_value_batch_arg).
func (c *clientActor) CallWithArg(ctx context.Context, server worker.ActorHandle[benchActor], n int) (int, error) {
	ref, err := worker.Put(ctx, okValue)
	if err != nil {
		return 0, err
	}
	refs := make([]worker.Ref[[]byte], n)
	for i := range refs {
		refs[i] = actorSmallValueArg.RemoteArgs(ctx, server, ref)
	}
	_, err = worker.GetAll(ctx, refs)
	return n, err
}

var (
	benchActorClass    = worker.RegisterActor0(newBenchActor)
	actorSmallValue    = worker.RegisterMethod0((*benchActor).SmallValue)
	actorSmallValueArg = worker.RegisterMethod1((*benchActor).SmallValueArg)
	clientActorClass   = worker.RegisterActor0(newClientActor)
	clientCallServers  = worker.RegisterMethod2((*clientActor).CallServers)
	clientCallWithArg  = worker.RegisterMethod2((*clientActor).CallWithArg)
	// callServersTask is a CPUs(0) client task of the n:n shape.
	callServersTask = worker.Register2(callServers)
)

func callServers(ctx context.Context, servers []worker.ActorHandle[benchActor], n int) (int, error) {
	refs := make([]worker.Ref[[]byte], n)
	for i := range refs {
		refs[i] = actorSmallValue.Remote(ctx, servers[i%len(servers)])
	}
	vals, err := worker.GetAll(ctx, refs)
	if err == nil && len(vals) > 0 {
		err = checkOK(vals[0])
	}
	return n, err
}

func init() {
	register(
		&Metric{Name: "1_1_actor_calls_sync", Unit: "calls/s", Group: GroupActors, Baseline: BaselineUnixRTT,
			Desc: "call a no-op actor method and Get the result, one at a time", Setup: setupActorSync},
		&Metric{Name: "1_1_actor_calls_async", Unit: "calls/s", Group: GroupActors,
			Desc: "1,000 calls to one actor, then Get them all", Setup: setupActorAsync(1)},
		&Metric{Name: "1_1_actor_calls_concurrent", Unit: "calls/s", Group: GroupActors,
			Desc: "1,000 calls to one actor with MaxConcurrency 16, then Get them all", Setup: setupActorAsync(16)},
		&Metric{Name: "1_n_actor_calls_async", Unit: "calls/s", Group: GroupActors,
			Desc: "one client actor makes 1,000 calls spread over max(1, CPUs/2) server actors", Setup: setup1N},
		&Metric{Name: "n_n_actor_calls_async", Unit: "calls/s", Group: GroupActors,
			Desc: "4 client tasks (CPUs(0)) each make 1,000 calls spread over max(1, CPUs/2) actors", Setup: setupNN},
		&Metric{Name: "n_n_actor_calls_with_arg_async", Unit: "calls/s", Group: GroupActors,
			Desc: "max(1, CPUs/2) client actors each make 1,000 calls with a ref argument to their own server actor", Setup: setupNNArg},
		&Metric{Name: "actor_creation", Unit: "actors/s", Group: GroupActors,
			Desc:  "create 50 no-op actors (each its own worker process) and wait until each has answered one call; killing them is not timed (Ray's many_actors release test)",
			Setup: setupActorCreation},
	)
}

// actorCreationBatch is how many actors one timed operation creates.
const actorCreationBatch = 50

func setupActorCreation(ctx context.Context, e *Env) (RunFunc, error) {
	return func(ctx context.Context, d time.Duration) ([]float64, error) {
		var actors float64
		var timed time.Duration
		for timed < d {
			start := time.Now()
			hs, err := newServers(ctx, actorCreationBatch)
			timed += time.Since(start)
			if err != nil {
				return nil, err
			}
			actors += float64(len(hs))
			for _, h := range hs {
				if err := worker.Kill(ctx, h, true); err != nil {
					return nil, fmt.Errorf("kill actor %s: %w", h.ID(), err)
				}
			}
		}
		return []float64{actors / timed.Seconds()}, nil
	}, nil
}

func serverCount() int { return max(1, runtime.NumCPU()/2) }

// newServers creates n no-op actors and waits until each answers.
func newServers(ctx context.Context, n int, opts ...worker.Option) ([]worker.ActorHandle[benchActor], error) {
	hs := make([]worker.ActorHandle[benchActor], n)
	for i := range hs {
		h, err := worker.Must(benchActorClass.Options(opts...)).Remote(ctx)
		if err != nil {
			return nil, err
		}
		hs[i] = h
	}
	for _, h := range hs {
		if _, err := actorSmallValue.Remote(ctx, h).Get(ctx); err != nil {
			return nil, fmt.Errorf("start actor: %w", err)
		}
	}
	return hs, nil
}

func setupActorSync(ctx context.Context, e *Env) (RunFunc, error) {
	hs, err := newServers(ctx, 1)
	if err != nil {
		return nil, err
	}
	return throughput(func(ctx context.Context) (float64, error) {
		v, err := actorSmallValue.Remote(ctx, hs[0]).Get(ctx)
		if err != nil {
			return 0, err
		}
		return 1, checkOK(v)
	}), nil
}

func setupActorAsync(concurrency int) func(ctx context.Context, e *Env) (RunFunc, error) {
	return func(ctx context.Context, e *Env) (RunFunc, error) {
		hs, err := newServers(ctx, 1, worker.MaxConcurrency(concurrency))
		if err != nil {
			return nil, err
		}
		return throughput(func(ctx context.Context) (float64, error) {
			n, err := callServers(ctx, hs, actorBatch)
			return float64(n), err
		}), nil
	}
}

func setup1N(ctx context.Context, e *Env) (RunFunc, error) {
	servers, err := newServers(ctx, serverCount())
	if err != nil {
		return nil, err
	}
	client, err := clientActorClass.Remote(ctx)
	if err != nil {
		return nil, err
	}
	return throughput(func(ctx context.Context) (float64, error) {
		n, err := clientCallServers.Remote(ctx, client, servers, actorBatch).Get(ctx)
		return float64(n), err
	}), nil
}

func setupNN(ctx context.Context, e *Env) (RunFunc, error) {
	servers, err := newServers(ctx, serverCount())
	if err != nil {
		return nil, err
	}
	client := worker.Must(callServersTask.Options(worker.CPUs(0)))
	return throughput(func(ctx context.Context) (float64, error) {
		refs := make([]worker.Ref[int], actorClients)
		for i := range refs {
			refs[i] = client.Remote(ctx, servers, actorBatch)
		}
		return sumAll(ctx, refs)
	}), nil
}

func setupNNArg(ctx context.Context, e *Env) (RunFunc, error) {
	k := serverCount()
	servers, err := newServers(ctx, k)
	if err != nil {
		return nil, err
	}
	clients := make([]worker.ActorHandle[clientActor], k)
	for i := range clients {
		if clients[i], err = clientActorClass.Remote(ctx); err != nil {
			return nil, err
		}
	}
	return throughput(func(ctx context.Context) (float64, error) {
		refs := make([]worker.Ref[int], k)
		for i := range refs {
			refs[i] = clientCallWithArg.Remote(ctx, clients[i], servers[i], actorBatch)
		}
		return sumAll(ctx, refs)
	}), nil
}

// sumAll gets the call counts clients return and adds them up.
func sumAll(ctx context.Context, refs []worker.Ref[int]) (float64, error) {
	ns, err := worker.GetAll(ctx, refs)
	total := 0
	for _, n := range ns {
		total += n
	}
	return float64(total), err
}
