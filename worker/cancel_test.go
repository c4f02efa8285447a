package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// Tasks for the cancel tests. Each writes dir/<tag>.started when it runs;
// awaitCancel writes dir/<tag>.stopped once its ctx ends, ignoreCancel
// never looks at its ctx, and parentOf waits for a child awaitCancel that
// it submits with its own ctx.
var (
	awaitCancel = Register2(func(ctx context.Context, dir, tag string) (string, error) {
		mark(dir, tag, "started")
		select {
		case <-time.After(30 * time.Second):
			return "slept", nil
		case <-ctx.Done():
			mark(dir, tag, "stopped")
			return "", ctx.Err()
		}
	})
	ignoreCancel = Register2(func(ctx context.Context, dir, tag string) (string, error) {
		mark(dir, tag, "started")
		time.Sleep(30 * time.Second)
		return "slept", nil
	})
	parentOf = Register2(func(ctx context.Context, dir, tag string) (string, error) {
		mark(dir, tag, "started")
		return awaitCancel.Remote(ctx, dir, tag+"-child").Get(ctx)
	})
)

// mark adds a byte to dir/<tag>.<what>: its size counts the marks.
func mark(dir, tag, what string) {
	f, err := os.OpenFile(filepath.Join(dir, tag+"."+what), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err == nil {
		_, _ = f.Write([]byte{1})
		_ = f.Close()
	}
}

// marks counts the marks in dir/<tag>.<what>.
func marks(dir, tag, what string) int64 {
	fi, err := os.Stat(filepath.Join(dir, tag+"."+what))
	if err != nil {
		return 0
	}
	return fi.Size()
}

func marked(dir, tag, what string) bool { return marks(dir, tag, what) > 0 }

// waitMarked polls until a cancel-test task wrote dir/<tag>.<what>.
func waitMarked(t *testing.T, dir, tag, what string) {
	t.Helper()
	testutil.Until(t, 20*time.Second, fmt.Sprintf("task %s %s", tag, what), func() error {
		if !marked(dir, tag, what) {
			return errors.New("no mark")
		}
		return nil
	})
}

// getCancelled gets ref and checks that it fails with a *TaskCancelledError
// of cause within 2 s.
func getCancelled[T any](t *testing.T, ref Ref[T], cause error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := ref.Get(ctx)
	var ce *TaskCancelledError
	if !errors.As(err, &ce) || !errors.Is(err, cause) {
		t.Fatalf("Get of a cancelled task = %v, %v; want a *TaskCancelledError of %v", v, err, cause)
	}
}

// TestCancelRunningTask: Cancel of a task that runs (a 30 s wait) cancels
// the ctx its function runs with: Get fails with TaskCancelledError at
// once, the function sees its ctx end, and the node's CPUs are free again.
func TestCancelRunningTask(t *testing.T) {
	startCluster(t, 1, nil)
	ctx, dir := ctxT(t), t.TempDir()
	ref := Must(awaitCancel.Options(CPUs(2))).Remote(ctx, dir, "a")
	waitMarked(t, dir, "a", "started")
	waitAvailable(t, "CPU", 0)
	if err := Cancel(ctx, ref, false); err != nil {
		t.Fatal(err)
	}
	getCancelled(t, ref, ErrCancelled)
	waitMarked(t, dir, "a", "stopped")
	waitAvailable(t, "CPU", 2)
	// The worker process lives on and runs the next task.
	if v, err := square.Remote(ctx, 3).Get(ctx); err != nil || v != 9 {
		t.Fatalf("after a cancel: %d, %v", v, err)
	}
}

// TestCancelForceEndsTaskThatIgnoresItsCtx: a task that never looks at its
// ctx is only stopped with force, which ends its worker process (Ray's
// force=True): Get fails at once, not after a retry, and the CPUs are free.
func TestCancelForceEndsTaskThatIgnoresItsCtx(t *testing.T) {
	startCluster(t, 1, nil)
	ctx, dir := ctxT(t), t.TempDir()
	ref := Must(ignoreCancel.Options(CPUs(2))).Remote(ctx, dir, "f")
	waitMarked(t, dir, "f", "started")
	if err := Cancel(ctx, ref, true); err != nil {
		t.Fatal(err)
	}
	getCancelled(t, ref, ErrCancelled)
	waitAvailable(t, "CPU", 2)
	if v, err := square.Remote(ctx, 4).Get(ctx); err != nil || v != 16 {
		t.Fatalf("after a forced cancel: %d, %v", v, err)
	}
	if n := marks(dir, "f", "started"); n != 1 {
		t.Fatalf("a force-cancelled task ran %d times; want once, no retry", n)
	}
}

// TestCancelQueuedTaskNeverRuns: a task queued behind one that holds every
// CPU is dropped by Cancel: it never runs, though a task queued after it
// does once the CPUs are free.
func TestCancelQueuedTaskNeverRuns(t *testing.T) {
	startCluster(t, 1, nil)
	ctx, dir := ctxT(t), t.TempDir()
	whole := Must(awaitCancel.Options(CPUs(2)))
	blocker := whole.Remote(ctx, dir, "blocker")
	waitMarked(t, dir, "blocker", "started")
	queued := whole.Remote(ctx, dir, "queued")
	if err := Cancel(ctx, queued, false); err != nil {
		t.Fatal(err)
	}
	getCancelled(t, queued, ErrCancelled)
	after := whole.Remote(ctx, dir, "after")
	if err := Cancel(ctx, blocker, false); err != nil {
		t.Fatal(err)
	}
	waitMarked(t, dir, "after", "started") // it was queued behind "queued"
	if marked(dir, "queued", "started") {
		t.Fatal("a task cancelled while queued ran")
	}
	if err := Cancel(ctx, after, false); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, "CPU", 2)
}

// TestRemoteCtxCancelsTask: the end of the ctx given to Remote cancels the
// task as Cancel does, queued or running, with ctx's error as the cause.
func TestRemoteCtxCancelsTask(t *testing.T) {
	startCluster(t, 1, nil)
	ctx, dir := ctxT(t), t.TempDir()
	whole := Must(awaitCancel.Options(CPUs(2)))
	rctx, cancel := context.WithCancel(ctx)
	running := whole.Remote(rctx, dir, "running")
	waitMarked(t, dir, "running", "started")
	qctx, qcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer qcancel()
	queued := whole.Remote(qctx, dir, "queued")
	getCancelled(t, queued, context.DeadlineExceeded)
	cancel()
	getCancelled(t, running, context.Canceled)
	waitMarked(t, dir, "running", "stopped")
	waitAvailable(t, "CPU", 2)
	if marked(dir, "queued", "started") {
		t.Fatal("a task whose ctx ended while it was queued ran")
	}
	// A ctx that ended before Remote: the task is never submitted.
	getCancelled(t, whole.Remote(rctx, dir, "late"), context.Canceled)
	if v, err := square.Remote(ctx, 5).Get(ctx); err != nil || v != 25 {
		t.Fatalf("after cancels: %d, %v", v, err)
	}
	if marked(dir, "late", "started") {
		t.Fatal("a task submitted with an ended ctx ran")
	}
}

// TestCancelIsRecursive: cancelling a task cancels the child it submitted
// with its ctx (Ray's recursive=True), on whichever node it runs.
func TestCancelIsRecursive(t *testing.T) {
	startCluster(t, 2, nil)
	ctx, dir := ctxT(t), t.TempDir()
	parent := parentOf.Remote(ctx, dir, "p")
	waitMarked(t, dir, "p-child", "started")
	if err := Cancel(ctx, parent, false); err != nil {
		t.Fatal(err)
	}
	getCancelled(t, parent, ErrCancelled)
	waitMarked(t, dir, "p-child", "stopped")
	waitAvailable(t, "CPU", 4)
}

// TestCancelFinishedOrForeignRef: Cancel of a finished task or a Put
// changes nothing; a ref another process owns is an error naming it.
func TestCancelFinishedOrForeignRef(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	done := square.Remote(ctx, 6)
	if v, err := done.Get(ctx); err != nil || v != 36 {
		t.Fatal(v, err)
	}
	p, err := Put(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []ObjectRef{done, p} {
		if err := Cancel(ctx, ref, false); err != nil {
			t.Fatalf("cancel %s: %v", ref.ID(), err)
		}
	}
	if v, err := done.Get(ctx); err != nil || v != 36 {
		t.Fatalf("a finished task's ref after Cancel: %d, %v", v, err)
	}
	foreign := Ref[int]{id: "x.0", owner: "127.0.0.1:1"}
	if err := Cancel(ctx, foreign, false); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("cancel of a foreign ref: %v; want an error naming its owner", err)
	}
}

// gatedLog is an actor whose constructor waits until its gate file exists,
// so that calls made meanwhile stay queued in the caller.
type gatedLog struct{ entries []string }

var (
	gatedLogClass = RegisterActor1(func(ctx context.Context, gate string) (*gatedLog, error) {
		for {
			if _, err := os.Stat(gate); err == nil {
				return &gatedLog{}, nil
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	gatedAppend = RegisterMethod1((*gatedLog).Append)
)

// Append records s and returns every entry so far.
func (a *gatedLog) Append(ctx context.Context, s string) ([]string, error) {
	a.entries = append(a.entries, s)
	return a.entries, nil
}

// TestCancelQueuedActorCall: an actor call still queued in the caller is
// dropped by Cancel (or by its ctx's end) and never runs; the calls around
// it run in order. Force is refused for actor calls, as Ray refuses it.
func TestCancelQueuedActorCall(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	gate := filepath.Join(t.TempDir(), "gate")
	h, err := gatedLogClass.Remote(ctx, gate)
	if err != nil {
		t.Fatal(err)
	}
	first := gatedAppend.Remote(ctx, h, "first")
	dropped := gatedAppend.Remote(ctx, h, "dropped")
	cctx, cancel := context.WithCancel(ctx)
	byCtx := gatedAppend.Remote(cctx, h, "by-ctx")
	last := gatedAppend.Remote(ctx, h, "last")
	if err := Cancel(ctx, dropped, true); err == nil || !strings.Contains(err.Error(), "force") {
		t.Fatalf("forced cancel of an actor call: %v; want an error about force", err)
	}
	if err := Cancel(ctx, dropped, false); err != nil {
		t.Fatal(err)
	}
	cancel()
	getCancelled(t, dropped, ErrCancelled)
	getCancelled(t, byCtx, context.Canceled)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Get(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := last.Get(ctx)
	if err != nil || strings.Join(got, ",") != "first,last" {
		t.Fatalf("the actor ran %v, %v; want first,last (the cancelled calls never run)", got, err)
	}
}
