package worker

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"runtime"
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
//
// The owner frees the object once no Ref to it is left (Release, Free, or
// every copy of the Ref unreachable and collected) and no task taking it as
// an argument is pending; see Release and docs/go-api.md for the lifetime
// rules. Copies of a Ref share one handle: releasing one releases all.
type Ref[T any] struct {
	id    string
	owner string
	err   error      // a submission error (bad option), reported by Get
	h     *refHandle // the local reference, for refs this process owns (nil otherwise)
}

// ID returns the object ID.
func (r Ref[T]) ID() string { return r.id }

// Owner returns the owner's RPC address.
func (r Ref[T]) Owner() string { return r.owner }

// String implements fmt.Stringer.
func (r Ref[T]) String() string { return fmt.Sprintf("Ref(%s)", r.id) }

// EncodeMsgpack writes the ref as [id, owner], so refs nested in values
// travel as refs. A ref this process owns encoded into a task's or actor
// call's argument is held until the task returns, then by the borrowers
// that kept it; one encoded into a Put value or a result is held by that
// object until it is freed; a borrowed ref passed on is kept until the job
// ends.
func (r Ref[T]) EncodeMsgpack(enc *msgpack.Encoder) error {
	if r.h != nil {
		noteEncoded(enc, r.h.st.cw, r.id, r.owner)
	} else if cw, err := current(); err == nil {
		noteEncoded(enc, cw, r.id, r.owner)
	}
	return encodePair(enc, r.id, r.owner)
}

// DecodeMsgpack reads what EncodeMsgpack wrote. The ref gets a local
// handle of its own: a reference of the owner when this process owns it (it
// came back nested in a value), else a borrow, which the owner learns of
// from the reply of the task that brought it here.
func (r *Ref[T]) DecodeMsgpack(dec *msgpack.Decoder) (err error) {
	r.id, r.owner, err = decodePair(dec, "object ref: want [id, owner]")
	r.h = nil
	if err == nil && r.owner != "" && r.id != "" {
		if cw, cerr := current(); cerr == nil {
			if cw.addr == r.owner {
				r.h = cw.newHandle(r.id)
			} else {
				r.h = cw.newBorrowHandle(r.id, r.owner)
			}
		}
	}
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
// *ObjectLostError, *ObjectFreedError once the object was freed), as
// ray.get. The value is the caller's: a large []byte is copied out of the
// node's object store (View reads it in place).
func (r Ref[T]) Get(ctx context.Context) (T, error) {
	var zero T
	if r.err != nil {
		return zero, r.err
	}
	cw, err := current()
	if err != nil {
		return zero, err
	}
	return r.get(ctx, cw)
}

// get is Get with the process's core worker in hand.
func (r Ref[T]) get(ctx context.Context, cw *coreWorker) (T, error) {
	var zero T
	if r.released() {
		return zero, &ObjectFreedError{ObjectID: r.id, Owner: r.owner, Reason: reasonReleased}
	}
	b, release, err := cw.getValue(ctx, r.id, r.owner)
	defer release()        // the value is copied out below
	runtime.KeepAlive(r.h) // the object stays while its value is read
	if err != nil {
		return zero, err
	}
	var v T
	if p, ok := any(&v).(*[]byte); ok {
		if view, ok := binView(b); ok {
			if len(view) > inlineMax {
				// The store's bytes are freed once the Ref is gone, and
				// nothing tells when a view is dropped: a copy (View
				// hands out the bytes themselves).
				view = bytes.Clone(view)
			}
			*p = view
			return v, nil
		}
	}
	if err := msgpack.Unmarshal(b, &v); err != nil {
		return zero, fmt.Errorf("decode object %s as %T: %w", r.id, v, err)
	}
	return v, nil
}

// View is Get of a []byte without a copy: for a value over 100 KiB it
// returns a read-only view of the node's shared-memory object store (a
// write faults), as Ray's zero-copy numpy reads. The view stays valid until
// the Ref is released (Ref.Release, Free) or the job ends: the object is no
// longer freed when the garbage collector finds the Ref unreachable, since
// nothing tells when a view is dropped, so call Release once done with the
// view, and do not read it after. A smaller value is this process's cached
// copy: do not modify it. Errors as Get.
func View(ctx context.Context, r Ref[[]byte]) ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	cw, err := current()
	if err != nil {
		return nil, err
	}
	if r.released() {
		return nil, &ObjectFreedError{ObjectID: r.id, Owner: r.owner, Reason: reasonReleased}
	}
	// The node keeps a viewed object in memory (not spilled) until it is
	// freed: nothing tells when the caller drops the view.
	b, release, err := cw.getValue(ctx, r.id, r.owner)
	if err != nil {
		runtime.KeepAlive(r.h)
		return nil, err
	}
	view, ok := binView(b)
	if !ok {
		defer release()
		var v []byte
		if err := msgpack.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("decode object %s as []byte: %w", r.id, err)
		}
		return v, nil
	}
	if len(view) > inlineMax && r.h != nil {
		r.h.st.viewed.Store(true) // refState.viewed: kept while the view may be read
	}
	runtime.KeepAlive(r.h)
	return view, nil
}

// Get is Ref.Get as a function.
func Get[T any](ctx context.Context, r Ref[T]) (T, error) { return r.Get(ctx) }

// GetAll waits for every ref and returns their values in order; the first
// error wins. Objects owned by other processes are fetched together, one
// batch per owner, before the first is needed (as ray.get of a list).
func GetAll[T any](ctx context.Context, refs []Ref[T]) ([]T, error) {
	cw, cwErr := current()
	if cwErr == nil && len(refs) > 1 {
		cw.prefetch(len(refs), func(i int) (string, string) { return refs[i].id, refs[i].owner })
	}
	out := make([]T, len(refs))
	for i, r := range refs {
		// As r.Get, with the core worker looked up once for all refs.
		if r.err != nil {
			return nil, r.err
		}
		if cwErr != nil {
			return nil, cwErr
		}
		v, err := r.get(ctx, cw)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// Put stores v in the object store and returns a ref to it, owned by this
// process (as ray.put). Refs of this process nested in v are contained in
// the new object: they stay until it is freed, as Ray's.
func Put[T any](ctx context.Context, v T) (Ref[T], error) {
	cw, err := current()
	if err != nil {
		return Ref[T]{}, err
	}
	id := cw.newObjectID("p")
	if raw, ok := any(v).([]byte); ok && len(raw) > inlineMax && uint64(len(raw)) <= math.MaxUint32 {
		// One copy, straight into the store, of what Marshal would write.
		loc, err := cw.storeLarge(ctx, id, cw.addr, "put", binHeader(len(raw)), raw)
		if err != nil {
			return Ref[T]{}, fmt.Errorf("put %T: %w", v, err)
		}
		cw.objects.completeLoc(id, loc)
		return ownedRef[T](cw, id), nil
	}
	b, nested, borrowed, err := marshalNested(v, true)
	if err != nil {
		return Ref[T]{}, fmt.Errorf("put %T: %w", v, err)
	}
	if len(b) > inlineMax {
		loc, err := cw.storeLarge(ctx, id, cw.addr, "put", b)
		if err != nil {
			return Ref[T]{}, fmt.Errorf("put %T: %w", v, err)
		}
		cw.objects.completeLoc(id, loc)
	} else {
		cw.objects.complete(id, b, nil)
	}
	if len(nested) > 0 || len(borrowed) > 0 {
		// Refs nested in the value stay while the object does (Ray's
		// "contained in" references); v keeps them until counted.
		cw.objects.contain(id, nested)
		if len(borrowed) > 0 {
			cw.holdBorrows(id, borrowed)
		}
		runtime.KeepAlive(v)
	}
	return ownedRef[T](cw, id), nil
}

// Wait returns once numReturns of refs are ready or timeout passes (or ctx
// ends), as ray.wait: ready holds at most numReturns refs (the first ready
// ones in the order of refs) and notReady the rest, each in the order of
// refs. A ref is ready once its task finished, successfully or not. On
// timeout it returns what is ready with a nil error; if ctx ends first, the
// partial lists and ctx's error. A timeout of zero or less waits without
// limit. Objects owned by other processes are fetched (small values, and the
// location of large ones; Get pulls those). Errors: a numReturns outside
// 0..len(refs), ErrNotInitialized.
func Wait[R ObjectRef](ctx context.Context, refs []R, numReturns int, timeout time.Duration) (ready, notReady []R, err error) {
	if numReturns < 0 || numReturns > len(refs) {
		return nil, nil, fmt.Errorf("wait: numReturns %d is outside 0..%d (the number of refs)", numReturns, len(refs))
	}
	cw, err := current()
	if err != nil {
		return nil, nil, err
	}
	n := len(refs)
	id := func(i int) string { return refs[i].ID() }
	isReady := make([]bool, n)
	count, missing := cw.objects.scan(n, id, isReady, numReturns)
	if count < numReturns && len(missing) > 0 {
		// Unknown here: fetch those of other owners; one of our own that is
		// unknown is lost, which counts as ready (Get reports the loss).
		for _, i := range missing {
			if o := refs[i].Owner(); o == "" || o == cw.addr {
				isReady[i] = true
			}
		}
		cw.prefetch(len(missing), func(k int) (string, string) { return refs[missing[k]].ID(), refs[missing[k]].Owner() })
		count, _ = cw.objects.scan(n, id, isReady, numReturns)
	}
	parent := ctx
	if count < numReturns {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		pending := make([]int, 0, n-count)
		for i, r := range isReady {
			if !r {
				pending = append(pending, i)
			}
		}
		ch := make(chan int, len(pending))
		cw.objects.watch(pending, id, ch)
		unblock := cw.blocked(ctx)
	wait:
		for count < numReturns {
			select {
			case i := <-ch:
				if !isReady[i] {
					isReady[i] = true
					count++
				}
			case <-ctx.Done():
				break wait
			}
		}
		unblock()
		cw.objects.unwatch(pending, id, ch)
		for drained := false; !drained; {
			select {
			case i := <-ch:
				isReady[i] = true
			default:
				drained = true
			}
		}
	}
	ready, notReady = splitReady(refs, isReady, numReturns)
	if len(ready) < numReturns {
		// Too few: an error only if the caller's ctx ended, not on timeout.
		return ready, notReady, parent.Err()
	}
	return ready, notReady, nil
}

// splitReady puts the first max ready refs in ready and the rest, in order,
// in notReady.
func splitReady[R ObjectRef](refs []R, isReady []bool, max int) (ready, notReady []R) {
	ready = make([]R, 0, max)
	notReady = make([]R, 0, len(refs)-max)
	for i, r := range refs {
		if isReady[i] && len(ready) < max {
			ready = append(ready, r)
		} else {
			notReady = append(notReady, r)
		}
	}
	return ready, notReady
}
