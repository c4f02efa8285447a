package wire

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// taskEventFields is how many values a TaskEvent is encoded as: its
// fields in declaration order, Times flattened (six, in TaskStates'
// order). A decoder skips values past the ones it knows, and leaves
// fields missing from a shorter array zero, so fields can be added at the
// end.
const taskEventFields = 20

// EncodeMsgpack implements msgpack.CustomEncoder: a TaskEvent is an array
// of taskEventFields values, cheaper to encode and decode than a map of
// field names (a node decodes one per task its processes run).
func (e TaskEvent) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(taskEventFields); err != nil {
		return err
	}
	for _, s := range []string{e.TaskID, e.JobID, e.Name, e.Function, e.Type, e.ActorID, e.State} {
		if err := enc.EncodeString(s); err != nil {
			return err
		}
	}
	if err := enc.EncodeInt(int64(e.Attempt)); err != nil {
		return err
	}
	for _, s := range []string{e.NodeID, e.NodeName, e.WorkerID} {
		if err := enc.EncodeString(s); err != nil {
			return err
		}
	}
	if err := enc.EncodeInt(int64(e.PID)); err != nil {
		return err
	}
	for _, s := range []string{e.Owner, e.Error} {
		if err := enc.EncodeString(s); err != nil {
			return err
		}
	}
	t := e.Times
	for _, v := range []int64{t.PendingArgsAvail, t.PendingNodeAssignment, t.SubmittedToWorker, t.Running, t.Finished, t.Failed} {
		if err := enc.EncodeInt(v); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder, the inverse of
// EncodeMsgpack; nil decodes as the zero TaskEvent. Sizes are bounded by
// the caller (mpsafe) and values by CheckTaskEvent.
func (e *TaskEvent) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("task event: %w", err)
	}
	*e = TaskEvent{}
	strs := []*string{0: &e.TaskID, 1: &e.JobID, 2: &e.Name, 3: &e.Function, 4: &e.Type, 5: &e.ActorID, 6: &e.State,
		8: &e.NodeID, 9: &e.NodeName, 10: &e.WorkerID, 12: &e.Owner, 13: &e.Error}
	ints := []*int64{14: &e.Times.PendingArgsAvail, 15: &e.Times.PendingNodeAssignment, 16: &e.Times.SubmittedToWorker,
		17: &e.Times.Running, 18: &e.Times.Finished, 19: &e.Times.Failed}
	for i := 0; i < n; i++ {
		switch {
		case i < len(strs) && strs[i] != nil:
			*strs[i], err = dec.DecodeString()
		case i == 7:
			e.Attempt, err = dec.DecodeInt()
		case i == 11:
			e.PID, err = dec.DecodeInt()
		case i < len(ints) && ints[i] != nil:
			*ints[i], err = dec.DecodeInt64()
		default:
			err = dec.Skip()
		}
		if err != nil {
			return fmt.Errorf("task event value %d: %w", i, err)
		}
	}
	return nil
}
