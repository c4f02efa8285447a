package wire

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestTaskEventCodecRoundTrip(t *testing.T) {
	in := TaskEventsReport{Events: []TaskEvent{{TaskID: "t-1", JobID: "j1", Name: "f", Function: "main.f", Type: TaskTypeActor, ActorID: "a1",
		State: TaskRunning, Attempt: 2, NodeID: "n1", NodeName: "node", WorkerID: "w1", PID: 42, Owner: "127.0.0.1:1", Error: "e",
		Times: TaskTimes{1, 2, 3, 4, 5, 6}}, {TaskID: "t-2"}}, Dropped: 3}
	out := reportRoundTrip(t, in)
	if len(out.Events) != 2 || out.Events[0] != in.Events[0] || out.Events[1] != in.Events[1] || out.Dropped != 3 {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
	// A longer array (a newer sender's) decodes, its extra values skipped;
	// a wrong type is an error naming the value.
	longer, _ := msgpack.Marshal([]any{"t-3", "j1", "f", "", "", "", TaskFinished, 0, "", "", "", 0, "", "", 0, 0, 0, 0, 9, 0, "extra", []int{1}})
	var ev TaskEvent
	if err := msgpack.Unmarshal(longer, &ev); err != nil || ev.TaskID != "t-3" || ev.Times.Finished != 9 || CheckTaskEvent(&ev) != nil {
		t.Fatalf("longer array: %+v, %v", ev, err)
	}
	bad, _ := msgpack.Marshal([]any{"t-4", "j1", 5})
	if err := msgpack.Unmarshal(bad, &ev); err == nil || !strings.Contains(err.Error(), "value 2") {
		t.Fatalf("a number for the name: %v", err)
	}
}

func TestCheckTaskEvent(t *testing.T) {
	ok := TaskEvent{TaskID: "abc-1", JobID: "job1", Name: "f", State: TaskFailed, Error: ClipTaskError(strings.Repeat("é", 2000))}
	if err := CheckTaskEvent(&ok); err != nil {
		t.Fatalf("a clipped error refused: %v", err)
	}
	for name, e := range map[string]TaskEvent{
		"empty task ID": {JobID: "j", State: TaskRunning},
		"slash in ID":   {TaskID: "a/b", JobID: "j", State: TaskRunning},
		"bad worker ID": {TaskID: "a", JobID: "j", State: TaskRunning, WorkerID: "x y"},
		"no state":      {TaskID: "a", JobID: "j"},
		"bad type":      {TaskID: "a", JobID: "j", State: TaskRunning, Type: "X"},
		"long name":     {TaskID: "a", JobID: "j", State: TaskRunning, Name: strings.Repeat("n", MaxTaskEventName+1)},
		"negative time": {TaskID: "a", JobID: "j", State: TaskRunning, Times: TaskTimes{Running: -1}},
		"negative PID":  {TaskID: "a", JobID: "j", State: TaskRunning, PID: -1},
	} {
		if err := CheckTaskEvent(&e); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// pythonTaskEventHex is a TaskEvent as the Python SDK's reporter encodes it
// (python/tests/test_taskevents.py's GOLDEN_HEX, from GOLDEN_EVENT): the two
// encoders must agree byte for byte.
const pythonTaskEventHex = "dc0014a7616231322d6333a46a6f6231ac662e3c6c6f63616c733e2e67ac662e3c6c6f63616c733e2e67ab4e4f524d414c5f5441534ba0a64641494c454402a66e6f64652d31a26e31a3772d39cd1092ae3132372e302e302e313a35303030ae56616c75654572726f723a20c3a90001ce00100000cf000001000000000000cf187c3fb4d99d0000"

// TestTaskEventPythonBytes decodes the Python SDK's encoding of an event
// and checks Go encodes the same event to the same bytes.
func TestTaskEventPythonBytes(t *testing.T) {
	want := TaskEvent{TaskID: "ab12-c3", JobID: "job1", Name: "f.<locals>.g", Function: "f.<locals>.g", Type: TaskTypeNormal,
		State: TaskFailed, Attempt: 2, NodeID: "node-1", NodeName: "n1", WorkerID: "w-9", PID: 4242, Owner: "127.0.0.1:5000",
		Error: "ValueError: é", Times: TaskTimes{PendingNodeAssignment: 1, SubmittedToWorker: 1 << 20, Running: 1 << 40, Failed: 1764355200000000000}}
	b, err := msgpack.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(b); got != pythonTaskEventHex {
		t.Fatalf("Go encodes the event as\n%s\nthe Python SDK as\n%s", got, pythonTaskEventHex)
	}
	raw, _ := hex.DecodeString(pythonTaskEventHex)
	var got TaskEvent
	if err := msgpack.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	if err := CheckTaskEvent(&got); err != nil {
		t.Fatal(err)
	}
}

// A report's events decode exactly whatever their strings: values repeated
// across the batch (interned), more distinct values than the table keeps,
// values longer than it interns, and empty ones.
func TestTaskEventsReportDecodesEveryString(t *testing.T) {
	in := TaskEventsReport{Dropped: 7}
	for i := range 600 {
		in.Events = append(in.Events, TaskEvent{TaskID: fmt.Sprintf("t-%d", i), JobID: "job1", Name: fmt.Sprintf("f%d", i%300),
			Function: strings.Repeat("x", maxInterned+i%3), State: TaskFinished, NodeName: strings.Repeat("n", i%2*5),
			Owner: fmt.Sprintf("10.0.0.%d:1", i), Times: TaskTimes{Finished: int64(i)}})
	}
	out := reportRoundTrip(t, in)
	if out.Dropped != 7 || len(out.Events) != len(in.Events) {
		t.Fatalf("decoded %d events, dropped %d; want %d, 7", len(out.Events), out.Dropped, len(in.Events))
	}
	for i := range in.Events {
		if out.Events[i] != in.Events[i] {
			t.Fatalf("event %d: %+v, want %+v", i, out.Events[i], in.Events[i])
		}
	}
	// Keys it does not know are skipped; a report with none is empty.
	extra, _ := msgpack.Marshal(map[string]any{"Future": []int{1, 2}, "Dropped": 2})
	if err := msgpack.Unmarshal(extra, &out); err != nil || out.Dropped != 2 || out.Events != nil {
		t.Fatalf("a report with an unknown key: %+v, %v", out, err)
	}
	if err := msgpack.Unmarshal([]byte{0x81, 0xa6, 'E', 'v', 'e', 'n', 't', 's', 0x05}, &out); err == nil {
		t.Fatal("events given as a number decoded without an error")
	}
}

// A report claiming more events than a batch may hold keeps one over the
// most (so the node refuses it, naming the count claimed) and skips the
// rest without allocating for them: a 64 MiB frame of nils would
// otherwise become 64 Mi events of about 250 bytes each.
func TestTaskEventsReportKeepsAtMostOneOverTheBatch(t *testing.T) {
	const claimed = 1 << 20
	frame := []byte{0x81, 0xa6, 'E', 'v', 'e', 'n', 't', 's', 0xdd, 0x00, 0x10, 0x00, 0x00} // an array of 1 Mi
	frame = append(frame, bytes.Repeat([]byte{0xc0}, claimed)...)                           // of nils
	var r TaskEventsReport
	if err := msgpack.Unmarshal(frame, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Events) != MaxTaskEventBatch+1 || r.Len() != claimed {
		t.Fatalf("kept %d events, Len %d; want %d kept and Len %d", len(r.Events), r.Len(), MaxTaskEventBatch+1, claimed)
	}
}

// reportRoundTrip encodes in as a sender does and decodes it as a node
// does.
func reportRoundTrip(t *testing.T, in TaskEventsReport) TaskEventsReport {
	t.Helper()
	b, err := msgpack.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out TaskEventsReport
	if err := msgpack.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
