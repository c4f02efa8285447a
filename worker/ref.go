package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// ObjectRef is what every typed Ref has in common: an object's ID and the
// RPC address of its owner (the process that created it, as Ray's ownership).
type ObjectRef interface {
	ID() string
	Owner() string
}

// Ref is a typed object ref: a future for a value of type T produced by a
// task or Put. Refs may be passed to tasks (as arguments, resolved before the
// task runs, or nested inside values, passed as refs) and to other processes.
type Ref[T any] struct {
	id    string
	owner string
	err   error // a submission error (bad option), reported by Get
}

// ID returns the object ID.
func (r Ref[T]) ID() string { return r.id }

// Owner returns the owner's RPC address.
func (r Ref[T]) Owner() string { return r.owner }

// String implements fmt.Stringer.
func (r Ref[T]) String() string { return fmt.Sprintf("Ref(%s)", r.id) }

// EncodeMsgpack writes the ref as [id, owner], so refs nested in values
// travel as refs.
func (r Ref[T]) EncodeMsgpack(enc *msgpack.Encoder) error { return encodePair(enc, r.id, r.owner) }

// DecodeMsgpack reads what EncodeMsgpack wrote.
func (r *Ref[T]) DecodeMsgpack(dec *msgpack.Decoder) (err error) {
	r.id, r.owner, err = decodePair(dec, "object ref: want [id, owner]")
	return err
}

// encodePair writes two strings as a msgpack array, the wire form of refs
// and actor handles.
func encodePair(enc *msgpack.Encoder, a, b string) error {
	if err := enc.EncodeArrayLen(2); err != nil {
		return err
	}
	if err := enc.EncodeString(a); err != nil {
		return err
	}
	return enc.EncodeString(b)
}

// decodePair reads what encodePair wrote; want describes the form in errors.
func decodePair(dec *msgpack.Decoder, want string) (a, b string, err error) {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return "", "", err
	}
	if n != 2 {
		return "", "", fmt.Errorf("%s, got %d elements", want, n)
	}
	if a, err = dec.DecodeString(); err != nil {
		return "", "", err
	}
	b, err = dec.DecodeString()
	return a, b, err
}

// Get waits for the value (honouring ctx's deadline) and returns it, or the
// task's error (*TaskError, *WorkerCrashedError, *InfeasibleError,
// *ObjectLostError), as ray.get.
func (r Ref[T]) Get(ctx context.Context) (T, error) {
	var zero T
	if r.err != nil {
		return zero, r.err
	}
	cw, err := current()
	if err != nil {
		return zero, err
	}
	b, err := cw.getValue(ctx, r.id, r.owner)
	if err != nil {
		return zero, err
	}
	var v T
	if p, ok := any(&v).(*[]byte); ok {
		if view, ok := binView(b); ok {
			*p = view // no copy: a view of the object (read-only for large ones)
			return v, nil
		}
	}
	if err := msgpack.Unmarshal(b, &v); err != nil {
		return zero, fmt.Errorf("decode object %s as %T: %w", r.id, v, err)
	}
	return v, nil
}

// Get is Ref.Get as a function.
func Get[T any](ctx context.Context, r Ref[T]) (T, error) { return r.Get(ctx) }

// GetAll waits for every ref and returns their values in order; the first
// error wins.
func GetAll[T any](ctx context.Context, refs []Ref[T]) ([]T, error) {
	out := make([]T, len(refs))
	for i, r := range refs {
		v, err := r.Get(ctx)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// Put stores v in the object store and returns a ref to it, owned by this
// process (as ray.put).
func Put[T any](ctx context.Context, v T) (Ref[T], error) {
	cw, err := current()
	if err != nil {
		return Ref[T]{}, err
	}
	b, err := msgpack.Marshal(v)
	if err != nil {
		return Ref[T]{}, fmt.Errorf("put %T: %w", v, err)
	}
	id := cw.newObjectID("p")
	if len(b) > inlineMax {
		loc, err := cw.storeLarge(ctx, id, b)
		if err != nil {
			return Ref[T]{}, fmt.Errorf("put %T: %w", v, err)
		}
		cw.objects.completeLoc(id, loc)
	} else {
		cw.objects.complete(id, b, nil)
	}
	return Ref[T]{id: id, owner: cw.addr}, nil
}

// Wait returns once numReturns of refs are ready or timeout passes (or ctx
// ends), as ray.wait: ready and not-ready refs, each in submission order.
// A timeout of zero or less waits without limit.
func Wait[R ObjectRef](ctx context.Context, refs []R, numReturns int, timeout time.Duration) (ready, notReady []R, err error) {
	if numReturns < 0 || numReturns > len(refs) {
		return nil, nil, fmt.Errorf("wait: numReturns %d is outside 0..%d (the number of refs)", numReturns, len(refs))
	}
	cw, err := current()
	if err != nil {
		return nil, nil, err
	}
	parent := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	done := make(chan int, len(refs))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, r := range refs {
		go func(i int, r R) {
			if cw.waitReady(wctx, r.ID(), r.Owner()) == nil {
				done <- i
			}
		}(i, r)
	}
	isReady := make([]bool, len(refs))
	for count := 0; count < numReturns; count++ {
		select {
		case i := <-done:
			isReady[i] = true
		case <-ctx.Done():
			count = numReturns // deadline: report what is ready
		}
	}
	for {
		select {
		case i := <-done:
			isReady[i] = true
			continue
		default:
		}
		break
	}
	for i, r := range refs {
		if isReady[i] {
			ready = append(ready, r)
		} else {
			notReady = append(notReady, r)
		}
	}
	if err := parent.Err(); err != nil && len(ready) < numReturns {
		return ready, notReady, err
	}
	return ready, notReady, nil
}
