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

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// waitForFile runs until the file at path exists (or its ctx ends): a task
// that runs for as long as the test wants.
var waitForFile = Register1(func(ctx context.Context, path string) (string, error) {
	return untilFile(ctx, path)
})

func untilFile(ctx context.Context, path string) (string, error) {
	for {
		if _, err := os.Stat(path); err == nil {
			return NodeName(), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// failWhenFile fails once the file at path exists.
var failWhenFile = Register1(func(ctx context.Context, path string) (string, error) {
	if _, err := untilFile(ctx, path); err != nil {
		return "", err
	}
	return "", errors.New("failed on purpose")
})

// TestListTasksAcrossNodes runs tasks on three nodes: long ones pinned to
// node 1 and node 2 are listed RUNNING there while they run, then FINISHED
// or FAILED; quick ones FINISHED; the listing is asked of any node and
// merges the owner's node's record with the executor's.
func TestListTasksAcrossNodes(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	ctx := ctxT(t)
	release := filepath.Join(t.TempDir(), "release")
	long := Must(waitForFile.Options(Resources(map[string]float64{"node1": 1}), Name("long"), MaxRetries(0))).Remote(ctx, release)
	bad := Must(failWhenFile.Options(Resources(map[string]float64{"node2": 1}), Name("bad"), MaxRetries(0))).Remote(ctx, release)
	var quick []Ref[int]
	for i := range 5 {
		quick = append(quick, Must(square.Options(Name("sq"))).Remote(ctx, i))
	}
	if _, err := GetAll(ctx, quick); err != nil {
		t.Fatal(err)
	}

	list := func(nd int, req *wire.TaskEventsListRequest) *wire.TaskEventsList {
		t.Helper()
		var out wire.TaskEventsList
		if err := nodeCall(t, nodes[nd], wire.MethodTaskEventsList, req, &out); err != nil {
			t.Fatal(err)
		}
		return &out
	}
	byName := func(l *wire.TaskEventsList, name string) []wire.TaskEvent {
		var out []wire.TaskEvent
		for _, ev := range l.Tasks {
			if ev.Name == name {
				out = append(out, ev)
			}
		}
		return out
	}
	poll := func(what string, ok func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			good, last := ok()
			if good {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s; last: %s", what, last)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	poll("long and bad RUNNING on nodes 1 and 2", func() (bool, string) {
		l := list(2, &wire.TaskEventsListRequest{State: wire.TaskRunning})
		lg, bd := byName(l, "long"), byName(l, "bad")
		ok := len(lg) == 1 && len(bd) == 1 && lg[0].NodeName == nodes[1].Name() && bd[0].NodeName == nodes[2].Name() &&
			lg[0].PID > 0 && lg[0].Owner != "" && lg[0].Times.PendingNodeAssignment > 0 && lg[0].Times.Running >= lg[0].Times.PendingNodeAssignment
		return ok, fmtTasks(l)
	})
	// Worker.List shows long's worker process on node 1.
	poll("long's worker listed on node 1", func() (bool, string) {
		var ws wire.WorkerList
		if err := nodeCall(t, nodes[0], wire.MethodWorkerList, &wire.WorkerListRequest{}, &ws); err != nil {
			t.Fatal(err)
		}
		lg := byName(list(0, &wire.TaskEventsListRequest{Name: "long"}), "long")
		for _, w := range ws.Workers {
			if len(lg) == 1 && w.WorkerID == lg[0].WorkerID && w.NodeName == nodes[1].Name() && w.PID == lg[0].PID {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", ws.Workers)
	})
	poll("the quick tasks FINISHED", func() (bool, string) {
		l := list(0, &wire.TaskEventsListRequest{Name: "sq", State: wire.TaskFinished})
		return l.Total == 5 && len(byName(l, "sq")) == 5, fmtTasks(l)
	})
	// The limit says what it left out.
	l := list(1, &wire.TaskEventsListRequest{Limit: 2})
	if l.Total != 7 || len(l.Tasks) != 2 || l.LeftOut != 5 {
		t.Fatalf("limit 2 of 7 tasks: %d listed, total %d, left out %d", len(l.Tasks), l.Total, l.LeftOut)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := long.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Get(ctx); err == nil {
		t.Fatal("bad did not fail")
	}
	poll("long FINISHED on node 1, bad FAILED on node 2 with its error", func() (bool, string) {
		l := list(0, &wire.TaskEventsListRequest{})
		lg, bd := byName(l, "long"), byName(l, "bad")
		ok := len(lg) == 1 && len(bd) == 1 && lg[0].State == wire.TaskFinished && lg[0].NodeName == nodes[1].Name() &&
			bd[0].State == wire.TaskFailed && bd[0].NodeName == nodes[2].Name() && strings.Contains(bd[0].Error, "failed on purpose") &&
			lg[0].Times.Finished >= lg[0].Times.Running
		return ok, fmtTasks(l)
	})
	// Filters by node (name or ID) and a summary by name and state.
	if l := list(0, &wire.TaskEventsListRequest{Node: nodes[2].ID()}); l.Total != len(byName(l, "bad"))+len(byName(l, "sq")) || len(byName(l, "bad")) != 1 {
		t.Fatalf("node filter %s: %s", nodes[2].ID(), fmtTasks(l))
	}
	s := list(1, &wire.TaskEventsListRequest{Summary: true})
	counts := map[string]int{}
	for _, r := range s.Summary {
		counts[r.Name+"/"+r.State] = r.Count
	}
	if counts["sq/FINISHED"] != 5 || counts["long/FINISHED"] != 1 || counts["bad/FAILED"] != 1 || s.Total != 7 {
		t.Fatalf("summary %v, total %d", counts, s.Total)
	}
}

func fmtTasks(l *wire.TaskEventsList) string {
	var b strings.Builder
	for _, ev := range l.Tasks {
		b.WriteString(ev.Name + ":" + ev.State + "@" + ev.NodeName + " ")
	}
	return b.String()
}

// TestTaskEventsReportRefusesHostile sends a node batches no SDK sends: too
// many events, a bad ID, an unknown state, an oversized error; each is
// refused whole with bad_input naming what is wrong.
func TestTaskEventsReportRefusesHostile(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	good := wire.TaskEvent{TaskID: "abc-1", JobID: "job1", Name: "f", State: wire.TaskRunning}
	cases := []struct {
		name string
		rep  wire.TaskEventsReport
		want string
	}{
		{"huge batch", wire.TaskEventsReport{Events: make([]wire.TaskEvent, wire.MaxTaskEventBatch+1)}, "the most accepted is 1000"},
		{"bad task ID", wire.TaskEventsReport{Events: []wire.TaskEvent{good, {TaskID: "../x", JobID: "job1", State: wire.TaskRunning}}}, "task event 1 of the batch: task ID"},
		{"bad job ID", wire.TaskEventsReport{Events: []wire.TaskEvent{{TaskID: "t1", JobID: "-x", State: wire.TaskRunning}}}, "job ID"},
		{"bad state", wire.TaskEventsReport{Events: []wire.TaskEvent{{TaskID: "t1", JobID: "job1", State: "DONE"}}}, `state "DONE"`},
		{"huge error", wire.TaskEventsReport{Events: []wire.TaskEvent{{TaskID: "t1", JobID: "job1", State: wire.TaskFailed, Error: strings.Repeat("x", 5000)}}}, "error of 5000 bytes"},
		{"negative dropped", wire.TaskEventsReport{Events: []wire.TaskEvent{good}, Dropped: -1}, "dropped -1"},
	}
	for _, c := range cases {
		err := nodeCall(t, nodes[0], wire.MethodTaskEventsReport, &c.rep, nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != wire.CodeBadInput || !strings.Contains(re.Message, c.want) {
			t.Errorf("%s: got %v, want bad_input containing %q", c.name, err, c.want)
		}
	}
	var l wire.TaskEventsList
	if err := nodeCall(t, nodes[0], wire.MethodTaskEventsList, &wire.TaskEventsListRequest{Local: true}, &l); err != nil {
		t.Fatal(err)
	}
	if l.Total != 0 {
		t.Fatalf("refused batches left %d tasks in the record: %s", l.Total, fmtTasks(&l))
	}
	if err := nodeCall(t, nodes[0], wire.MethodTaskEventsList, &wire.TaskEventsListRequest{State: "nope"}, &l); err == nil || !strings.Contains(err.Error(), `state filter "nope"`) {
		t.Fatalf("a bad state filter: %v", err)
	}
}

// TestTaskEventsHundredThousandListedWithinBound reports 101,000 tasks to
// one node through TaskEvents.Report: its record keeps 100,000, says it
// lost 1,000, and a limited listing says how many it left out.
func TestTaskEventsHundredThousandListedWithinBound(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	const batches = 101
	for b := range batches {
		rep := wire.TaskEventsReport{Events: make([]wire.TaskEvent, wire.MaxTaskEventBatch)}
		for i := range rep.Events {
			id := b*wire.MaxTaskEventBatch + i
			rep.Events[i] = wire.TaskEvent{TaskID: fmt.Sprintf("load-%d", id), JobID: "load", Name: "f", State: wire.TaskFinished,
				Times: wire.TaskTimes{Finished: int64(id + 1)}}
		}
		if err := nodeCall(t, nodes[0], wire.MethodTaskEventsReport, &rep, nil); err != nil {
			t.Fatal(err)
		}
	}
	var l wire.TaskEventsList
	if err := nodeCall(t, nodes[0], wire.MethodTaskEventsList, &wire.TaskEventsListRequest{JobID: "load", Limit: 10}, &l); err != nil {
		t.Fatal(err)
	}
	if l.Total != 100_000 || len(l.Tasks) != 10 || l.LeftOut != 99_990 || l.Dropped != 1000 {
		t.Fatalf("listed %d, total %d, left out %d, dropped %d; want 10 of 100000, 99990 left out, 1000 dropped", len(l.Tasks), l.Total, l.LeftOut, l.Dropped)
	}
	if l.Tasks[0].TaskID != "load-1000" {
		t.Fatalf("oldest listed %s, want load-1000 (the first 1000 evicted)", l.Tasks[0].TaskID)
	}
	var all wire.TaskEventsList
	if err := nodeCall(t, nodes[0], wire.MethodTaskEventsList, &wire.TaskEventsListRequest{JobID: "load", Limit: wire.MaxTaskEventList}, &all); err != nil {
		t.Fatal(err)
	}
	if len(all.Tasks) != 100_000 || all.LeftOut != 0 {
		t.Fatalf("the whole record: %d listed, %d left out", len(all.Tasks), all.LeftOut)
	}
	var s wire.TaskEventsList
	if err := nodeCall(t, nodes[0], wire.MethodTaskEventsList, &wire.TaskEventsListRequest{Summary: true, State: wire.TaskFinished}, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Summary) != 1 || s.Summary[0].Count != 100_000 {
		t.Fatalf("summary %+v", s.Summary)
	}
}

// TestTaskEventsRetryAndCancel: a task whose worker crashes once is listed
// at attempt 1, FINISHED; a task cancelled while queued is FAILED with the
// cancellation; a task waiting for an argument is PENDING_ARGS_AVAIL.
func TestTaskEventsRetryAndCancel(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	if _, err := Must(crashOnce.Options(Name("crashy"), MaxRetries(1))).Remote(ctx, filepath.Join(dir, "marker")).Get(ctx); err != nil {
		t.Fatal(err)
	}
	release := filepath.Join(dir, "release")
	blocker := Must(waitForFile.Options(CPUs(2), Name("blocker"))).Remote(ctx, release)
	queued := Must(waitForFile.Options(CPUs(2), Name("queued"))).Remote(ctx, release)
	waiting := Must(add.Options(Name("waiting"))).RemoteArgs(ctx, Must(square.Options(CPUs(2))).Remote(ctx, 3), Val(1))
	if err := Cancel(ctx, queued, false); err != nil {
		t.Fatal(err)
	}
	find := func(name string) (wire.TaskEvent, bool) {
		var l wire.TaskEventsList
		if err := nodeCall(t, nodes[0], wire.MethodTaskEventsList, &wire.TaskEventsListRequest{Name: name}, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Tasks) != 1 {
			return wire.TaskEvent{}, false
		}
		return l.Tasks[0], true
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, okC := find("crashy")
		q, okQ := find("queued")
		w, okW := find("waiting")
		if okC && okQ && okW && c.Attempt == 1 && c.State == wire.TaskFinished && q.State == wire.TaskFailed &&
			strings.Contains(q.Error, "cancelled") && w.State == wire.TaskPendingArgsAvail {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("crashy %+v\nqueued %+v\nwaiting %+v", c, q, w)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := waiting.Get(ctx); err != nil || v != 10 {
		t.Fatalf("waiting = %d, %v", v, err)
	}
}

// TestOwnerCancelByTaskID is what `nodeup cancel <task-id>` does: find a
// running task's owner in the task record and ask it (Owner.CancelTask)
// to cancel the task; its result fails with ErrCancelled and the record
// says FAILED. Another job's token, no token, or an unknown ID is refused.
func TestOwnerCancelByTaskID(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	drv, err := current()
	if err != nil {
		t.Fatal(err)
	}
	victim := Must(waitForFile.Options(Name("victim"))).Remote(ctx, filepath.Join(t.TempDir(), "never"))
	var ev wire.TaskEvent
	deadline := time.Now().Add(20 * time.Second)
	for {
		var l wire.TaskEventsList
		if err := nodeCall(t, nodes[0], wire.MethodTaskEventsList, &wire.TaskEventsListRequest{Name: "victim", State: wire.TaskRunning}, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Tasks) == 1 {
			ev = l.Tasks[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("victim not listed RUNNING within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ev.Owner != drv.addr {
		t.Fatalf("owner %q, want the driver's %q", ev.Owner, drv.addr)
	}
	req := &wire.TaskCancelRequest{TaskID: ev.TaskID}
	wantDenied(t, "no token", callCoreWorker(ctx, ev.Owner, "", wire.MethodOwnerCancel, req, nil), wire.MethodOwnerCancel, "none")
	var re *rpc.Error
	if err := callCoreWorker(ctx, ev.Owner, drv.jobToken, wire.MethodOwnerCancel, &wire.TaskCancelRequest{TaskID: "nope-1"}, nil); !errors.As(err, &re) || re.Code != wire.CodeNotFound {
		t.Fatalf("unknown task: %v, want not_found", err)
	}
	if err := callCoreWorker(ctx, ev.Owner, drv.jobToken, wire.MethodOwnerCancel, req, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.Get(ctx); !errors.Is(err, ErrCancelled) {
		t.Fatalf("victim after cancel: %v, want ErrCancelled", err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		var l wire.TaskEventsList
		if err := nodeCall(t, nodes[0], wire.MethodTaskEventsList, &wire.TaskEventsListRequest{TaskID: ev.TaskID}, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Tasks) == 1 && l.Tasks[0].State == wire.TaskFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("victim not FAILED after cancel: %s", fmtTasks(&l))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
