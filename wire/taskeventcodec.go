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
	var st eventStrings
	return decodeTaskEvent(dec, e, &st)
}

// DecodeMsgpack implements msgpack.CustomDecoder for a report as the
// plain struct encodes it (a map of "Events" and "Dropped"; other keys
// skipped), decoding its events with one string table, so that the values
// a batch repeats (job, node, worker, function, state) are allocated once
// a batch rather than once an event: a node decodes a report on every
// task's path.
func (r *TaskEventsReport) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeMapLen()
	if err != nil {
		return fmt.Errorf("task events report: %w", err)
	}
	*r = TaskEventsReport{}
	var st eventStrings
	for range max(n, 0) {
		key, err := st.read(dec, false)
		if err != nil {
			return fmt.Errorf("task events report key: %w", err)
		}
		switch key {
		case "Events":
			count, err := dec.DecodeArrayLen()
			if err != nil {
				return fmt.Errorf("task events report: events: %w", err)
			}
			// A nil takes one byte of the frame and an event about 250 of
			// memory: past one over the most a batch may hold (which the
			// node then refuses, by Len), events are skipped, not kept.
			r.count = count
			if count > 0 {
				r.Events = make([]TaskEvent, min(count, MaxTaskEventBatch+1))
			}
			for i := range count {
				if i >= len(r.Events) {
					err = dec.Skip()
				} else {
					err = decodeTaskEvent(dec, &r.Events[i], &st)
				}
				if err != nil {
					return fmt.Errorf("task events report: event %d: %w", i, err)
				}
			}
		case "Dropped":
			if r.Dropped, err = dec.DecodeInt64(); err != nil {
				return fmt.Errorf("task events report: dropped: %w", err)
			}
		default:
			if err := dec.Skip(); err != nil {
				return fmt.Errorf("task events report: %q: %w", key, err)
			}
		}
	}
	return nil
}

// decodeTaskEvent decodes one event, its repeated strings through st.
func decodeTaskEvent(dec *msgpack.Decoder, e *TaskEvent, st *eventStrings) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("task event: %w", err)
	}
	*e = TaskEvent{}
	for i := 0; i < n; i++ {
		switch i {
		case 0:
			e.TaskID, err = st.read(dec, false)
		case 1:
			e.JobID, err = st.read(dec, true)
		case 2:
			e.Name, err = st.read(dec, true)
		case 3:
			e.Function, err = st.read(dec, true)
		case 4:
			e.Type, err = st.read(dec, true)
		case 5:
			e.ActorID, err = st.read(dec, true)
		case 6:
			e.State, err = st.read(dec, true)
		case 7:
			e.Attempt, err = dec.DecodeInt()
		case 8:
			e.NodeID, err = st.read(dec, true)
		case 9:
			e.NodeName, err = st.read(dec, true)
		case 10:
			e.WorkerID, err = st.read(dec, true)
		case 11:
			e.PID, err = dec.DecodeInt()
		case 12:
			e.Owner, err = st.read(dec, true)
		case 13:
			e.Error, err = st.read(dec, false)
		case 14:
			e.Times.PendingArgsAvail, err = dec.DecodeInt64()
		case 15:
			e.Times.PendingNodeAssignment, err = dec.DecodeInt64()
		case 16:
			e.Times.SubmittedToWorker, err = dec.DecodeInt64()
		case 17:
			e.Times.Running, err = dec.DecodeInt64()
		case 18:
			e.Times.Finished, err = dec.DecodeInt64()
		case 19:
			e.Times.Failed, err = dec.DecodeInt64()
		default:
			err = dec.Skip()
		}
		if err != nil {
			return fmt.Errorf("task event value %d: %w", i, err)
		}
	}
	return nil
}

// Bounds of eventStrings' table: strings longer than maxInterned bytes
// and strings past maxInternedCount distinct ones are allocated each time.
const (
	maxInterned      = 128
	maxInternedCount = 256
)

// eventStrings reads msgpack strings for one batch of task events,
// returning one string for each distinct short value it interns.
type eventStrings struct {
	buf  [maxInterned]byte
	seen map[string]string
}

// read decodes a string (nil is ""); intern says the value may repeat.
func (st *eventStrings) read(dec *msgpack.Decoder, intern bool) (string, error) {
	n, err := dec.DecodeBytesLen()
	if err != nil || n <= 0 {
		return "", err
	}
	if !intern || n > maxInterned {
		b := make([]byte, n)
		if err := dec.ReadFull(b); err != nil {
			return "", err
		}
		return string(b), nil
	}
	b := st.buf[:n]
	if err := dec.ReadFull(b); err != nil {
		return "", err
	}
	if s, ok := st.seen[string(b)]; ok {
		return s, nil
	}
	s := string(b)
	if st.seen == nil {
		st.seen = make(map[string]string, 16)
	}
	if len(st.seen) < maxInternedCount {
		st.seen[s] = s
	}
	return s, nil
}
