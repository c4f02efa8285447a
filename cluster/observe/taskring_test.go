package observe

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/wire"
)

func ringEvent(id, state string, attempt int, at int64) *wire.TaskEvent {
	ev := &wire.TaskEvent{TaskID: id, JobID: "job1", Name: "f", State: state, Attempt: attempt}
	*ev.Times.At(state) = at
	return ev
}

func ringIDs(r *taskRing) []string {
	evs, _, _ := r.list(func(*wire.TaskEvent) bool { return true }, 1<<30)
	var ids []string
	for _, e := range evs {
		ids = append(ids, e.TaskID)
	}
	return ids
}

func TestTaskRingBoundEvictsOldestFinishedFirst(t *testing.T) {
	r := newTaskRing(3)
	r.add(ringEvent("a", wire.TaskRunning, 0, 1))
	r.add(ringEvent("b", wire.TaskRunning, 0, 2))
	r.add(ringEvent("c", wire.TaskRunning, 0, 3))
	r.add(ringEvent("b", wire.TaskFinished, 0, 4)) // b finished first
	r.add(ringEvent("c", wire.TaskFailed, 0, 5))
	r.add(ringEvent("d", wire.TaskRunning, 0, 6)) // evicts b (finished longest ago), not a (older, running)
	if got := fmt.Sprint(ringIDs(r)); got != "[c a d]" {
		t.Fatalf("after evicting: %s, want [c a d] (finished first, then running)", got)
	}
	r.add(ringEvent("e", wire.TaskRunning, 0, 7)) // evicts c
	r.add(ringEvent("f", wire.TaskRunning, 0, 8)) // none finished: evicts a, the oldest running
	if got := fmt.Sprint(ringIDs(r)); got != "[d e f]" {
		t.Fatalf("after evicting: %s, want [d e f]", got)
	}
	if _, _, lost := r.list(func(*wire.TaskEvent) bool { return true }, 10); lost != 3 || r.len() != 3 {
		t.Fatalf("lost %d, len %d; want 3 evicted, 3 kept", lost, r.len())
	}
	r.noteDropped(5)
	if _, _, lost := r.list(func(*wire.TaskEvent) bool { return true }, 10); lost != 8 {
		t.Fatalf("lost %d after 5 dropped by a reporter, want 8", lost)
	}
}

func TestTaskRingListLimitCountsTotal(t *testing.T) {
	r := newTaskRing(100)
	for i := range 10 {
		r.add(ringEvent(fmt.Sprint("t", i), wire.TaskRunning, 0, int64(i+1)))
	}
	out, total, _ := r.list(func(e *wire.TaskEvent) bool { return e.TaskID != "t3" }, 4)
	if len(out) != 4 || total != 9 {
		t.Fatalf("limit 4 of 9 matching: got %d listed, total %d", len(out), total)
	}
}

func TestMergeTaskEvent(t *testing.T) {
	// The owner's view: submitted to a worker on node n2.
	owner := ringEvent("x", wire.TaskSubmittedToWorker, 0, 10)
	owner.Times.PendingNodeAssignment = 5
	owner.Owner, owner.NodeID, owner.NodeName = "127.0.0.1:9", "n2id", "n2"
	// The executor's: running, with its PID.
	exec := ringEvent("x", wire.TaskRunning, 0, 12)
	exec.NodeID, exec.NodeName, exec.PID, exec.WorkerID = "n2id", "n2", 42, "w1"
	got := *owner
	wire.MergeTaskEvent(&got, exec)
	if got.State != wire.TaskRunning || got.PID != 42 || got.WorkerID != "w1" || got.Owner != "127.0.0.1:9" ||
		got.Times.PendingNodeAssignment != 5 || got.Times.SubmittedToWorker != 10 || got.Times.Running != 12 {
		t.Fatalf("merged %+v: want RUNNING with the owner's times and the executor's PID", got)
	}
	// An earlier state reported late changes nothing but fills times.
	late := ringEvent("x", wire.TaskPendingNodeAssignment, 0, 4)
	wire.MergeTaskEvent(&got, late)
	if got.State != wire.TaskRunning || got.Times.PendingNodeAssignment != 4 {
		t.Fatalf("after a late pending event: %+v", got)
	}
	// A failure, then a retry: the later attempt wins, keeping the name.
	fail := ringEvent("x", wire.TaskFailed, 0, 20)
	fail.Error = "boom"
	wire.MergeTaskEvent(&got, fail)
	if got.State != wire.TaskFailed || got.Error != "boom" {
		t.Fatalf("after failure: %+v", got)
	}
	retry := &wire.TaskEvent{TaskID: "x", JobID: "job1", State: wire.TaskPendingNodeAssignment, Attempt: 1}
	wire.MergeTaskEvent(&got, retry)
	if got.State != wire.TaskPendingNodeAssignment || got.Attempt != 1 || got.Error != "" || got.Name != "f" || got.Owner != "127.0.0.1:9" {
		t.Fatalf("after retry: %+v, want attempt 1 pending, name and owner kept, no error", got)
	}
	// The old attempt's outcome arriving last does not go back.
	wire.MergeTaskEvent(&got, fail)
	if got.Attempt != 1 || got.State != wire.TaskPendingNodeAssignment {
		t.Fatalf("a stale attempt's event changed the record: %+v", got)
	}
}

// TestTaskRingHundredThousandBounded fills a ring with more than its bound
// of tasks and checks it keeps taskRingSize, lists within the wire bound,
// and its memory stays bounded.
func TestTaskRingHundredThousandBounded(t *testing.T) {
	r := newTaskRing(taskRingSize)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const extra = 20_000
	for i := range taskRingSize + extra {
		ev := &wire.TaskEvent{TaskID: fmt.Sprintf("owner0123456-%x", i), JobID: "job1", Name: "square", Function: "main.square",
			State: wire.TaskFinished, NodeID: "node-a", NodeName: "a", WorkerID: "w1", PID: 7, Owner: "127.0.0.1:4000"}
		ev.Times.Finished = int64(i + 1)
		r.add(ev)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if r.len() != taskRingSize {
		t.Fatalf("ring holds %d tasks, want the bound %d", r.len(), taskRingSize)
	}
	out, total, lost := r.list(func(*wire.TaskEvent) bool { return true }, wire.MaxTaskEventList)
	if len(out) != wire.MaxTaskEventList || total != taskRingSize || lost != extra {
		t.Fatalf("listed %d of %d, lost %d; want %d of %d, %d lost", len(out), total, lost, wire.MaxTaskEventList, taskRingSize, extra)
	}
	if out[0].TaskID != fmt.Sprintf("owner0123456-%x", extra) {
		t.Fatalf("oldest kept is %s, want the first %d evicted", out[0].TaskID, extra)
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if limit := int64(100 << 20); grown > limit {
		t.Fatalf("ring of %d tasks grew the heap by %d MB, more than %d MB", taskRingSize, grown>>20, limit>>20)
	}
	t.Logf("heap grew by %d MB for %d tasks", grown>>20, taskRingSize)
}

// TestTaskRingByteBound: tasks whose records are large (errors and names
// at their bounds) are kept within the ring's byte bound, not its count.
func TestTaskRingByteBound(t *testing.T) {
	r := newTaskRing(1000)
	r.maxBytes = 20 * (wire.MaxTaskEventError + 3*wire.MaxTaskEventName)
	big := func(id string) *wire.TaskEvent {
		ev := ringEvent(id, wire.TaskFailed, 0, 1)
		ev.Error = strings.Repeat("e", wire.MaxTaskEventError)
		ev.Name, ev.Function, ev.NodeName = strings.Repeat("n", wire.MaxTaskEventName), strings.Repeat("f", wire.MaxTaskEventName), strings.Repeat("m", wire.MaxTaskEventName)
		return ev
	}
	for i := range 100 {
		r.add(big(fmt.Sprint("t", i)))
	}
	if r.bytes > r.maxBytes || r.len() >= 20 || r.len() < 10 {
		t.Fatalf("%d tasks of %d bytes, bound %d bytes", r.len(), r.bytes, r.maxBytes)
	}
	if ids := ringIDs(r); ids[len(ids)-1] != "t99" {
		t.Fatalf("newest kept is %s, want t99", ids[len(ids)-1])
	}
	// A task that grows past the bound on merge evicts others.
	r2 := newTaskRing(1000)
	r2.maxBytes = 3 * taskEventSize(ringEvent("a", wire.TaskRunning, 0, 1))
	for _, id := range []string{"a", "b", "c"} {
		r2.add(ringEvent(id, wire.TaskRunning, 0, 1))
	}
	grown := ringEvent("c", wire.TaskFailed, 0, 2)
	grown.Error = strings.Repeat("e", 200)
	r2.add(grown)
	if r2.bytes > r2.maxBytes {
		t.Fatalf("after a merge grew a task: %d bytes, bound %d", r2.bytes, r2.maxBytes)
	}
}
