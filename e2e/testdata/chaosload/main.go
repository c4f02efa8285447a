// Command chaosload is the workload of e2e's chaos suite (chaos_test.go): a
// driver that keeps tasks of 0 to 300 ms in flight and calls a few actors
// (one per node) for a given time while the test injects faults, then checks every result
// and that every actor still answers, and writes a JSON summary.
//
// Tasks have MaxRetries(-1) and actors MaxRestarts(-1) and
// MaxTaskRetries(-1), as a program that must ride out node loss would set
// them (Ray's max_retries=-1 and max_restarts=-1): no fault the suite
// injects may then lose or change a result.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/nodeup/nodeup/worker"
)

// result is what a task returns: a value computed from its index and where
// it ran.
type result struct {
	V    int
	Node string
}

var work = worker.Register2(func(ctx context.Context, i, ms int) (result, error) {
	select {
	case <-time.After(time.Duration(ms) * time.Millisecond):
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	return result{V: want(i), Node: worker.NodeName()}, nil
})

func want(i int) int { return i*7 + 1 }

// Echo is a stateless actor: each call returns its argument plus one and the
// node it runs on, so a restarted actor answers like the old one.
type Echo struct{}

func newEcho(ctx context.Context) (*Echo, error) { return &Echo{}, nil }

func (e *Echo) add(ctx context.Context, x int) (result, error) {
	return result{V: x + 1, Node: worker.NodeName()}, nil
}

var (
	echoActor = worker.RegisterActor0(newEcho)
	echoAdd   = worker.RegisterMethod1((*Echo).add)
)

// keeperName is a detached actor every run creates if missing: it outlives
// the driver, and a later run (after a full cluster restart) calls it.
const keeperName = "chaos-keeper"

// summary is the JSON the driver writes; chaos_test.go reads it.
type summary struct {
	Tasks, TasksOK     int
	Wrong              []string       // first wrong results (want, got)
	Failed             map[string]int // error text → count
	TasksByNode        map[string]int
	MaxTaskLatencyMs   int64
	LongestStallMs     int64 // longest time with tasks in flight and none finishing
	ActorCalls         int
	ActorCallsFailed   int
	ActorLongestWaitMs int64 // longest single actor call
	Actors, ActorsOK   int   // actors at the end, and those that answered then
	ActorFinalErrors   []string
	// ActorNodesStart and ActorNodesEnd name the node each actor answered
	// from first and at the end (one actor per alive node at the start).
	ActorNodesStart, ActorNodesEnd []string
	// DetachedID is the ID of the detached actor keeperName, which every
	// run creates or finds and calls last (its last entry in ActorNodesEnd).
	DetachedID string
}

type stats struct {
	mu   sync.Mutex
	s    summary
	last time.Time // last task completion
}

func (st *stats) task(i int, r result, err error, took time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := time.Now()
	if gap := now.Sub(st.last).Milliseconds(); gap > st.s.LongestStallMs {
		st.s.LongestStallMs = gap
	}
	st.last = now
	st.s.Tasks++
	st.s.MaxTaskLatencyMs = max(st.s.MaxTaskLatencyMs, took.Milliseconds())
	switch {
	case err != nil:
		st.s.Failed[err.Error()]++
	case r.V != want(i):
		if len(st.s.Wrong) < 10 {
			st.s.Wrong = append(st.s.Wrong, fmt.Sprintf("task %d: want %d, got %d", i, want(i), r.V))
		}
	default:
		st.s.TasksOK++
		st.s.TasksByNode[r.Node]++
	}
}

func (st *stats) actorCall(err error, took time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.s.ActorCalls++
	st.s.ActorLongestWaitMs = max(st.s.ActorLongestWaitMs, took.Milliseconds())
	if err != nil {
		st.s.ActorCallsFailed++
		st.s.Failed["actor: "+err.Error()]++
	}
}

func main() {
	duration := flag.Duration("duration", 20*time.Second, "how long to keep submitting")
	inflight := flag.Int("inflight", 8, "tasks kept in flight")
	out := flag.String("out", "", "where to write the JSON summary (stdout if empty)")
	ready := flag.String("ready", "", "a file written once the actors answer, just before the tasks start")
	flag.Parse()
	ctx := context.Background()
	// In a worker process, Init serves tasks and never returns.
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	st := &stats{s: summary{Failed: map[string]int{}, TasksByNode: map[string]int{}}}
	handles, where := startActors(ctx)
	st.s.ActorNodesStart = where
	keeper, err := worker.Must(echoActor.Options(worker.Name(keeperName), worker.GetIfExists(), worker.Detached(),
		worker.MaxRestarts(-1), worker.MaxTaskRetries(-1), worker.CPUs(0))).Remote(ctx)
	if err != nil {
		log.Fatalf("create or get the detached actor %q: %v", keeperName, err)
	}
	st.s.DetachedID = keeper.ID()
	if *ready != "" {
		if err := os.WriteFile(*ready, []byte("ready\n"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	// Stalls count from here: the actors' start above is not one.
	st.last = time.Now()
	deadline := time.Now().Add(*duration)
	var wg sync.WaitGroup
	var next struct {
		sync.Mutex
		i int
	}
	for g := 0; g < *inflight; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				next.Lock()
				i := next.i
				next.i++
				next.Unlock()
				start := time.Now()
				tctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
				r, err := worker.Must(work.Options(worker.MaxRetries(-1))).Remote(tctx, i, rand.IntN(300)).Get(tctx)
				cancel()
				st.task(i, r, err, time.Since(start))
			}
		}()
	}
	for _, h := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := 0; time.Now().Before(deadline); x++ {
				start := time.Now()
				cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
				r, err := echoAdd.Remote(cctx, h, x).Get(cctx)
				cancel()
				if err == nil && r.V != x+1 {
					err = fmt.Errorf("actor %s answered %d to %d", h.ID(), r.V, x)
				}
				st.actorCall(err, time.Since(start))
				time.Sleep(50 * time.Millisecond) // pace, not synchronization
			}
		}()
	}
	wg.Wait()
	handles = append(handles, keeper)
	st.s.Actors = len(handles)
	for _, h := range handles {
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		r, err := echoAdd.Remote(cctx, h, 1).Get(cctx)
		cancel()
		if err != nil {
			st.s.ActorFinalErrors = append(st.s.ActorFinalErrors, fmt.Sprintf("%s: %v", h.ID(), err))
			continue
		}
		st.s.ActorsOK++
		st.s.ActorNodesEnd = append(st.s.ActorNodesEnd, r.Node)
	}
	sort.Strings(st.s.ActorFinalErrors)
	write(*out, st.s)
}

// startActors creates one actor on each alive node (soft node affinity,
// so a restart may go elsewhere) and waits until each answers once; it
// returns them and the node each first answered from.
func startActors(ctx context.Context) ([]worker.ActorHandle[Echo], []string) {
	nodes, err := worker.Nodes(ctx)
	if err != nil {
		log.Fatalf("list nodes: %v", err)
	}
	var hs []worker.ActorHandle[Echo]
	var where []string
	for _, n := range nodes {
		if !n.Alive {
			continue
		}
		h, err := worker.Must(echoActor.Options(worker.MaxRestarts(-1), worker.MaxTaskRetries(-1), worker.CPUs(0.1),
			worker.NodeAffinity(n.NodeID, true))).Remote(ctx)
		if err != nil {
			log.Fatalf("create actor on %s: %v", n.NodeName, err)
		}
		r, err := echoAdd.Remote(ctx, h, 0).Get(ctx)
		if err != nil {
			log.Fatalf("first call to the actor on %s: %v", n.NodeName, err)
		}
		hs = append(hs, h)
		where = append(where, r.Node)
	}
	return hs, where
}

func write(path string, s summary) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		log.Fatal(err)
	}
	if path == "" {
		fmt.Println(string(b))
		return
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
