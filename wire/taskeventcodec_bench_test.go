package wire

import (
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// A node decodes a report per batch of events its workers and drivers
// send, one per task and state change: the decode is on every task's path.
func BenchmarkDecodeTaskEventsReport(b *testing.B) {
	in := TaskEventsReport{}
	for i := range 64 {
		in.Events = append(in.Events, TaskEvent{TaskID: fmt.Sprintf("%032x", i), JobID: "job-0001", Name: "Counter.incr",
			Function: "main.(*Counter).Incr", Type: TaskTypeActor, ActorID: "c1f4e0a0b1c2d3e4f5a6b7c8d9e0f1a2", State: TaskFinished,
			NodeID: "f1de356eddb31151dfbcf3b24aa4a4f2", NodeName: "node-a", WorkerID: "9f24b9cbb2950ab824ba90c5f144425f", PID: 4242,
			Owner: "10.0.0.1:40123", Times: TaskTimes{Running: 1764363521000000000 + int64(i), Finished: 1764363521000100000 + int64(i)}})
	}
	buf, err := msgpack.Marshal(&in)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		var out TaskEventsReport
		if err := msgpack.Unmarshal(buf, &out); err != nil || len(out.Events) != 64 {
			b.Fatal(err)
		}
	}
}
