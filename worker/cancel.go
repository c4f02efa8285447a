package worker

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// TaskCancelledError is the error of a task or actor call that was
// cancelled before it finished, by Cancel or by the end of the ctx it was
// submitted with, as Ray's TaskCancelledError. A cancelled task is not
// retried, and a result it produces after all is discarded.
type TaskCancelledError struct {
	TaskName string // Options Name, else the registered function or method name
	TaskID   string
	// Cause is why: context.Cause of the submitting ctx when that ended
	// (so errors.Is(err, context.DeadlineExceeded) holds for a deadline),
	// ErrCancelled for Cancel.
	Cause error
}

// Error implements error.
func (e *TaskCancelledError) Error() string {
	return fmt.Sprintf("task %s (%s) was cancelled: %v", e.TaskName, e.TaskID, e.Cause)
}

// Unwrap returns Cause.
func (e *TaskCancelledError) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, ErrCancelled) hold whatever the Cause.
func (e *TaskCancelledError) Is(target error) bool { return target == ErrCancelled }

// cancelTimeout bounds the call that tells a task's worker of a cancel
// made by the end of the task's submitting ctx (no caller waits for it).
const cancelTimeout = 5 * time.Second

// Cancel cancels the task or actor call that produces ref, as Ray's
// ray.cancel (recursive, as Ray's default):
//
//   - a task still queued in this process (waiting for its arguments or a
//     worker lease) is removed and never runs;
//   - a task pushed to a worker has the context.Context its function runs
//     with cancelled; a task waiting there behind another one never
//     starts. Its children submitted with that ctx are cancelled in turn.
//     A function that ignores its ctx runs on, holding its resources,
//     until it returns; its result is discarded. With force, a running
//     task's worker process exits at once instead, as Ray's force=True,
//     and with it every other task that process was running (each is
//     retried while its MaxRetries allows);
//   - an actor call still queued in this process is removed and never
//     runs; one already sent to the actor runs to its end and its result
//     stands (Ray does not interrupt a running call of a threaded actor).
//
// Once Cancel returns, Get of a cancelled task's refs returns a
// *TaskCancelledError whose Cause is ErrCancelled. A task that already
// finished, a Put's ref and a ref this process does not know are left as
// they are (nil error). Errors: ErrNotInitialized; a ref owned by another
// process (only the submitter can cancel); force for an actor call (as
// Ray, which refuses it); a worker that could not be told (the task's refs
// are cancelled all the same, but it may run on).
func Cancel(ctx context.Context, ref ObjectRef, force bool) error {
	cw, err := current()
	if err != nil {
		return err
	}
	switch ref.Owner() {
	case "":
		return nil // a ref that failed before it was submitted
	case cw.addr:
	default:
		return fmt.Errorf("cancel %s: it is owned by the process at %s; only the process that submitted a task can cancel it", ref.ID(), ref.Owner())
	}
	w := cw.objects.workOf(ref.ID())
	if w == nil {
		return nil
	}
	return w.cancel(ctx, force, ErrCancelled)
}

// work is what produces objects this process owns: a task it submitted or
// an actor call it made.
type work interface {
	// cancel cancels it (see Cancel), failing its objects with a
	// *TaskCancelledError of cause; ctx bounds telling its worker.
	cancel(ctx context.Context, force bool, cause error) error
	// finished says its objects are ready: it stops watching its ctx.
	finished()
}

// ctxWatch ties work to the ctx it was submitted with, so that ctx's end
// cancels it, as Cancel would (Remote's ctx).
type ctxWatch struct {
	stop atomic.Pointer[func() bool] // stops the watch; set once
}

// watch calls cancel with ctx's cause once ctx ends, unless finished is
// called first. A ctx that never ends costs nothing.
func (w *ctxWatch) watch(ctx context.Context, cancel func(cause error)) {
	if ctx.Done() == nil {
		return
	}
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	w.stop.Store(&stop)
}

// finished stops the watch (if it was started and has not fired).
func (w *ctxWatch) finished() {
	if stop := w.stop.Load(); stop != nil {
		(*stop)()
	}
}

// cancelledErr is the error a cancelled task's objects get.
func cancelledErr(spec *wire.TaskSpec, cause error) error {
	return &TaskCancelledError{TaskName: spec.Name, TaskID: spec.TaskID, Cause: cause}
}

// watchCtx cancels t when ctx (its Remote's) ends first.
func (s *submitter) watchCtx(ctx context.Context, t *pendingTask) {
	t.watch(ctx, func(cause error) {
		cctx, cancel := context.WithTimeout(s.cw.ctx, cancelTimeout)
		defer cancel()
		if err := s.cancel(cctx, t, false, cause); err != nil {
			s.cw.logger.Warn("cancel task on its ctx's end", "task", t.spec.Name, "err", err)
		}
	})
}

func (t *pendingTask) cancel(ctx context.Context, force bool, cause error) error {
	return t.sub.cancel(ctx, t, force, cause)
}

// cancel cancels t: dropped from its queue when queued, else (pushed) its
// worker is told. Its objects fail with a *TaskCancelledError either way;
// whatever its push brings back later is discarded (push, requeueLocked).
func (s *submitter) cancel(ctx context.Context, t *pendingTask, force bool, cause error) error {
	s.mu.Lock()
	if t.cancelled {
		s.mu.Unlock()
		return nil
	}
	t.cancelled = true
	l := t.lease
	if l == nil && t.q != nil {
		t.q.tasks = slices.DeleteFunc(t.q.tasks, func(x *pendingTask) bool { return x == t })
	}
	s.mu.Unlock()
	s.failTask(t, cancelledErr(&t.spec, cause))
	if l == nil {
		return nil
	}
	err := s.cw.pool.Call(ctx, l.rep.WorkerAddr, wire.MethodTaskCancel, &wire.TaskCancelRequest{TaskID: t.spec.TaskID, Force: force}, nil)
	if err != nil && !(force && rpc.IsTransport(err)) { // a forced worker may exit before it answers
		return fmt.Errorf("cancel task %s: tell its worker at %s: %w", t.spec.Name, l.rep.WorkerAddr, err)
	}
	return nil
}

// requeueLocked puts t back on q to run again (at the front for a retry
// that used no attempt), unless it was cancelled meanwhile.
func (s *submitter) requeueLocked(q *keyQueue, t *pendingTask, front bool) {
	switch {
	case t.cancelled:
	case front:
		q.tasks = append([]*pendingTask{t}, q.tasks...)
		s.noteTask(t, wire.TaskPendingNodeAssignment)
	default:
		q.tasks = append(q.tasks, t)
		s.noteTask(t, wire.TaskPendingNodeAssignment)
	}
}

// cancel drops call if it is still queued here; once sent it runs to its
// end (see Cancel).
func (call *actorCall) cancel(ctx context.Context, force bool, cause error) error {
	if force {
		return fmt.Errorf("cancel call %s: force is not supported for actor calls (as Ray); cancel without it", call.spec.Name)
	}
	c := call.conn
	c.mu.Lock()
	queued := slices.Contains(c.queue, call)
	if queued {
		c.queue = slices.DeleteFunc(c.queue, func(x *actorCall) bool { return x == call })
	}
	c.mu.Unlock()
	if queued {
		call.fail(c.cw, cancelledErr(&call.spec, cause))
	}
	return nil
}

// handleOwnerCancel serves Owner.CancelTask: cancel a task this process
// submitted, by its ID, as Cancel does.
func (cw *coreWorker) handleOwnerCancel(ctx context.Context, req *wire.TaskCancelRequest) (*wire.Empty, error) {
	if err := wire.CheckID("task ID", req.TaskID); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	w := cw.objects.workOf(returnID(req.TaskID, 0))
	if w == nil {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("task %s: the process at %s holds no unfinished task of that ID (it finished, its refs were dropped, or another process submitted it)", req.TaskID, cw.addr)}
	}
	if err := w.cancel(ctx, req.Force, ErrCancelled); err != nil {
		return nil, err // force on an actor call, or its worker not told
	}
	return &wire.Empty{}, nil
}
