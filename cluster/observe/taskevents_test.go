package observe

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/internal/fanout"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// fakeNodes is a cluster of TaskEvents records: this node (self), others
// answered through their own List, and unreachable addresses.
type fakeNodes struct {
	self   string
	nodes  map[string]*TaskEvents
	failed map[string]error
	order  []string
}

func (f *fakeNodes) AliveTargets() []fanout.Target {
	var out []fanout.Target
	for _, a := range f.order {
		out = append(out, fanout.Target{Name: "n-" + a, Addr: a, Self: a == f.self})
	}
	return out
}

func (f *fakeNodes) Call(ctx context.Context, addr, method string, req, resp any) error {
	if err := f.failed[addr]; err != nil {
		return err
	}
	if method != wire.MethodTaskEventsList {
		return errors.New("unexpected method " + method)
	}
	l, err := f.nodes[addr].List(ctx, req.(*wire.TaskEventsListRequest))
	if err != nil {
		return err
	}
	*resp.(*wire.TaskEventsList) = *l
	return nil
}

func event(id, state string, at int64) wire.TaskEvent {
	ev := wire.TaskEvent{TaskID: id, JobID: "job1", Name: "f", State: state}
	if p := ev.Times.At(state); p != nil {
		*p = at
	}
	return ev
}

// A batch with one bad event is refused whole, naming the event; a good
// one is kept. A cluster-wide listing merges each task's events from every
// node (the owner's submitted, the executor's finished), names the node
// that did not answer, and a local listing gives only this node's.
func TestTaskEventsReportAndMergedList(t *testing.T) {
	f := &fakeNodes{self: "a:1", nodes: map[string]*TaskEvents{}, failed: map[string]error{"c:1": errors.New("connection refused")}, order: []string{"a:1", "b:1", "c:1"}}
	for _, a := range f.order {
		f.nodes[a] = NewTaskEvents(f)
	}
	ctx := context.Background()
	bad := &wire.TaskEventsReport{Events: []wire.TaskEvent{event("t1", wire.TaskRunning, 1), event("t2", "DANCING", 2)}}
	_, err := f.nodes["a:1"].Report(ctx, bad)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeBadInput || !strings.Contains(re.Message, "event 1") || !strings.Contains(re.Message, "DANCING") {
		t.Fatalf("a batch with a bad state: %v, want bad_input naming event 1 and its state", err)
	}
	if l, _ := f.nodes["a:1"].List(ctx, &wire.TaskEventsListRequest{Local: true}); l.Total != 0 {
		t.Fatalf("a refused batch left %d tasks", l.Total)
	}
	if _, err := f.nodes["a:1"].Report(ctx, &wire.TaskEventsReport{Events: []wire.TaskEvent{event("t1", wire.TaskSubmittedToWorker, 1), event("t3", wire.TaskRunning, 3)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.nodes["b:1"].Report(ctx, &wire.TaskEventsReport{Events: []wire.TaskEvent{event("t1", wire.TaskFinished, 5)}, Dropped: 2}); err != nil {
		t.Fatal(err)
	}
	l, err := f.nodes["a:1"].List(ctx, &wire.TaskEventsListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Total != 2 || len(l.Tasks) != 2 || l.Tasks[0].TaskID != "t1" || l.Tasks[0].State != wire.TaskFinished || l.Dropped != 2 {
		t.Fatalf("merged list: %+v, want t1 FINISHED then t3, 2 dropped", l)
	}
	if len(l.Unreachable) != 1 || !strings.Contains(l.Unreachable[0], "n-c:1 (c:1)") || !strings.Contains(l.Unreachable[0], "connection refused") {
		t.Fatalf("unreachable %q, want the node that failed named with its error", l.Unreachable)
	}
	l, _ = f.nodes["a:1"].List(ctx, &wire.TaskEventsListRequest{State: wire.TaskRunning})
	if l.Total != 1 || l.Tasks[0].TaskID != "t3" {
		t.Fatalf("filtered by state RUNNING: %+v", l)
	}
	if l, _ := f.nodes["b:1"].List(ctx, &wire.TaskEventsListRequest{Local: true}); l.Total != 1 || l.Tasks[0].State != wire.TaskFinished {
		t.Fatalf("b's local list: %+v", l)
	}
}
