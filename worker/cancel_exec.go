package worker

import (
	"context"
	"errors"
	"os"
	"sync"

	"github.com/nodeup/nodeup/wire"
)

// maxEarlyCancels bounds the cancels remembered for tasks not (yet) pushed
// here: a cancel may overtake its task's push, or arrive after it ended.
const maxEarlyCancels = 1024

// errCancelledByOwner is the cause of a task ctx cancelled by its owner.
var errCancelledByOwner = errors.New("task cancelled by its owner")

// taskRuns are the tasks pushed to this worker process and not finished,
// by task ID, so that their owners can cancel them (Task.Cancel).
type taskRuns struct {
	mu    sync.Mutex
	runs  map[string]*taskRunCancel
	early map[string]bool // cancels that came before their task (bounded)
}

// taskRunCancel is one pushed task: how to cancel its ctx, and whether its
// function runs (it holds its lease's slot).
type taskRunCancel struct {
	cancel  context.CancelCauseFunc
	running bool
}

var runs = &taskRuns{runs: map[string]*taskRunCancel{}, early: map[string]bool{}}

// start registers a pushed task and returns the ctx it runs with: ended by
// its owner's cancel, or when the push's connection closes while it runs,
// but not when it returns (children it submitted with the ctx outlive it).
// ok is false when the task was cancelled before it arrived. done
// unregisters it.
func (r *taskRuns) start(push context.Context, id string) (ctx context.Context, done func(), ok bool) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(push))
	stop := context.AfterFunc(push, func() { cancel(context.Cause(push)) })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.early[id] {
		delete(r.early, id)
		stop()
		cancel(errCancelledByOwner)
		return ctx, func() {}, false
	}
	r.runs[id] = &taskRunCancel{cancel: cancel}
	return ctx, func() {
		stop()
		r.mu.Lock()
		delete(r.runs, id)
		r.mu.Unlock()
	}, true
}

// begin marks task id as running; false if it was cancelled before.
func (r *taskRuns) begin(ctx context.Context, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	r.runs[id].running = true
	return true
}

// cancel cancels task id's ctx and reports whether its function runs; a
// task not here yet is remembered, so that it never starts.
func (r *taskRuns) cancel(id string) (running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run := r.runs[id]
	if run == nil {
		if len(r.early) >= maxEarlyCancels {
			clear(r.early)
		}
		r.early[id] = true
		return false
	}
	run.cancel(errCancelledByOwner)
	return run.running
}

// handleTaskCancel cancels a task its owner cancelled (Cancel); with Force
// a running task takes this process down with it, as Ray's force=True.
func (cw *coreWorker) handleTaskCancel(ctx context.Context, req *wire.TaskCancelRequest) (*wire.Empty, error) {
	if runs.cancel(req.TaskID) && req.Force {
		cw.logger.Warn("task cancelled with force: this worker process exits", "task", req.TaskID, "pid", os.Getpid())
		os.Exit(1)
	}
	return &wire.Empty{}, nil
}
