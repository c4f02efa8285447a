package wire

import (
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestTaskEventCodecRoundTrip(t *testing.T) {
	in := TaskEventsReport{Events: []TaskEvent{{TaskID: "t-1", JobID: "j1", Name: "f", Function: "main.f", Type: TaskTypeActor, ActorID: "a1",
		State: TaskRunning, Attempt: 2, NodeID: "n1", NodeName: "node", WorkerID: "w1", PID: 42, Owner: "127.0.0.1:1", Error: "e",
		Times: TaskTimes{1, 2, 3, 4, 5, 6}}, {TaskID: "t-2"}}, Dropped: 3}
	b, err := msgpack.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out TaskEventsReport
	if err := msgpack.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
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
