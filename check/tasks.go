package check

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nodeup/nodeup/worker"
)

// TaskArgs is what a workload task receives: who it is, what it asked
// for (for the record), how long to run, and what to wait on meanwhile.
type TaskArgs struct {
	ID       string
	Demand   map[string]float64
	Strategy string
	DurMs    int64
	// Crash makes the first attempt exit the worker process (os.Exit(1))
	// after recording a Crash event.
	Crash bool
	// Waits are refs the task Gets (or Waits on, with UseWait) halfway
	// through its run; each wait is recorded as Block/Unblock.
	Waits   []worker.Ref[int]
	UseWait bool
	// Signal, when HasSignal, is waited on halfway through the run.
	HasSignal bool
	Signal    worker.Signal
}

// ActorArgs is what a workload actor's constructor receives.
type ActorArgs struct {
	ID       string
	Demand   map[string]float64
	Strategy string
}

// probe is the workload's actor: it records its start and answers pings.
type probe struct{ id string }

var (
	// stepTask runs one workload task; dep is a direct argument (a
	// dependency's result, or 0), which makes it wait before it starts.
	stepTask = worker.Register2(func(ctx context.Context, a TaskArgs, dep int) (int, error) { return runStep(ctx, a) })

	probeActor = worker.RegisterActor1(newProbe)
	probePing  = worker.RegisterMethod0((*probe).Ping)
)

// runStep is a workload task's body: record the start, maybe crash, run
// half the time, wait on refs and the signal, run the rest, record the end.
func runStep(ctx context.Context, a TaskArgs) (int, error) {
	rec := RecorderFromEnv()
	if rec == nil {
		return 0, fmt.Errorf("task %s: $%s is not set in the worker: the job's runtime env did not reach it", a.ID, EnvTrace)
	}
	attempt, err := rec.NextAttempt(a.ID)
	if err != nil {
		return 0, err
	}
	gpus, err := worker.GPUIDs(ctx)
	if err != nil {
		return 0, err
	}
	ev := Event{Task: a.ID, Attempt: attempt, Node: worker.NodeName()}
	start := ev
	start.Kind, start.Demand, start.Strategy, start.GPUIDs = Start, a.Demand, a.Strategy, gpus
	if err := rec.Record(start); err != nil {
		return 0, err
	}
	half := time.Duration(a.DurMs) * time.Millisecond / 2
	if a.Crash && attempt == 0 {
		pause(ctx, half)
		ev.Kind = Crash
		_ = rec.Record(ev)
		os.Exit(1)
	}
	pause(ctx, half)
	if err := waitOn(ctx, rec, ev, a); err != nil {
		return 0, fmt.Errorf("task %s attempt %d: %w", a.ID, attempt, err)
	}
	pause(ctx, half)
	ev.Kind = End
	return attempt, rec.Record(ev)
}

// waitOn blocks on a's refs and signal, recording each wait.
func waitOn(ctx context.Context, rec *Recorder, ev Event, a TaskArgs) error {
	blocked := func(what string, wait func() error) error {
		ev.Kind = Block
		if err := rec.Record(ev); err != nil {
			return err
		}
		err := wait()
		ev.Kind = Unblock
		if rerr := rec.Record(ev); err == nil {
			err = rerr
		}
		if err != nil {
			return fmt.Errorf("wait on %s: %w", what, err)
		}
		return nil
	}
	for i, r := range a.Waits {
		err := blocked(fmt.Sprintf("ref %d", i), func() error {
			if a.UseWait {
				_, _, err := worker.Wait(ctx, []worker.Ref[int]{r}, 1, 0)
				return err
			}
			_, err := r.Get(ctx)
			return err
		})
		if err != nil {
			return err
		}
	}
	if a.HasSignal {
		return blocked("signal", func() error { return a.Signal.Wait(ctx) })
	}
	return nil
}

// pause simulates work for d (or until ctx ends).
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// newProbe records the actor incarnation's start: its node, process and
// GPUs.
func newProbe(ctx context.Context, a ActorArgs) (*probe, error) {
	rec := RecorderFromEnv()
	if rec == nil {
		return nil, fmt.Errorf("actor %s: $%s is not set in the worker", a.ID, EnvTrace)
	}
	attempt, err := rec.NextAttempt(a.ID)
	if err != nil {
		return nil, err
	}
	gpus, err := worker.GPUIDs(ctx)
	if err != nil {
		return nil, err
	}
	err = rec.Record(Event{Kind: Start, Task: a.ID, Attempt: attempt, Actor: true, Node: worker.NodeName(),
		Demand: a.Demand, Strategy: a.Strategy, GPUIDs: gpus})
	return &probe{id: a.ID}, err
}

// Ping answers once the actor is constructed.
func (p *probe) Ping(ctx context.Context) (string, error) { return p.id, nil }
