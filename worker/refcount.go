package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Reference counting of the objects a process owns, as Ray's ownership
// (Wang et al., NSDI'21): the owner counts its local handles (a Ref and its
// copies share one; it is released by Ref.Release, worker.Free, or when the
// garbage collector finds it unreachable, through runtime.AddCleanup, as
// Ray's Java API uses phantom references) and the tasks and actor calls it
// submitted that take the object as an argument, until they finish. At zero
// it frees the object everywhere: its inline value here, the primary copy
// and every secondary copy in the nodes' stores (Obj.Free to the node of the
// primary copy, which passes it on to the nodes that pulled one). An object
// nested in a task's argument is held by that task until it returns, then
// by the borrowers that kept it (borrow.go). One nested in a Put value or a
// task result is contained in that object (Ray's "contained in"
// references): it stays until the outer object is freed; for a result, the
// process that ran the task owns the nested object and counts the result's
// owner as a borrower until the result is freed (PushTaskReply.Contained,
// Object.RefRemoved).

// Reasons an object was freed, as ObjectFreedError says them.
const (
	reasonUnreferenced = "no reference to it was left in its owner (every Ref released or collected, no task taking it pending)"
	reasonFreed        = "worker.Free freed it"
	reasonReleased     = "this Ref was released (Ref.Release or worker.Free)"
)

// maxFreedKept is how many freed object IDs an owner remembers, to answer
// a late Get with ObjectFreedError rather than ObjectLostError.
const maxFreedKept = 1 << 16

// refHandle is what every copy of a Ref shares: the garbage collector's
// cleanup of it (AddCleanup) releases the local reference its state holds.
// The state is a separate object because a cleanup's argument must not keep
// its own handle reachable.
type refHandle struct{ st *refState }

// refState is one local reference to an object: one this process owns, or
// one it borrows (borrow.go).
type refState struct {
	cw       *coreWorker
	id       string
	borrowed bool
	released atomic.Bool
	// viewed: Get handed out a []byte view of the object's bytes in the
	// node's store. Nothing tells when such a view is dropped, so the
	// garbage collector's cleanup leaves the reference held (the object
	// stays until Release, Free or the job's end) rather than let the
	// store reuse bytes the program may still read.
	viewed atomic.Bool
}

// collected is the garbage collector's cleanup of a handle: it releases
// the reference unless a view of the object was handed out.
func (st *refState) collected() {
	if st.viewed.Load() {
		return
	}
	st.release()
}

// release drops the reference once, whoever calls first (Release, Free, or
// the cleanup).
func (st *refState) release() {
	if !st.released.CompareAndSwap(false, true) {
		return
	}
	if st.borrowed {
		st.cw.releaseBorrow(st.id)
	} else {
		st.cw.objects.releaseLocal(st.id)
	}
}

// newHandle counts a new local reference to object id (which this process
// owns) and returns the handle releasing it; nil when the object is not in
// the table (freed, or after Shutdown): a Get then reports it.
func (cw *coreWorker) newHandle(id string) *refHandle {
	cw.freeOnce.Do(func() {
		cw.objects.setOnFree(cw.queueFree, cw.noteStored, cw.innerFreed, func(ids []string) { go cw.releaseBorrows(ids) })
	})
	if !cw.objects.addLocal(id) {
		return nil
	}
	h := &refHandle{st: &refState{cw: cw, id: id}}
	runtime.AddCleanup(h, (*refState).collected, h.st)
	return h
}

// ownedRef is a Ref of this process's object id with a new local handle.
func ownedRef[T any](cw *coreWorker, id string) Ref[T] {
	return Ref[T]{id: id, owner: cw.addr, h: cw.newHandle(id)}
}

// resultRef is the Ref Remote returns for one result of a submission: with
// a local handle when the submission got as far as an owner.
func resultRef[T any](id, owner string, err error) Ref[T] {
	r := Ref[T]{id: id, owner: owner, err: err}
	if owner == "" || id == "" {
		return r
	}
	if cw, cerr := current(); cerr == nil && cw.addr == owner {
		r.h = cw.newHandle(id)
	}
	return r
}

// Release drops this Ref's reference to its object now, for it and every
// copy of it (copies share one handle), rather than when the garbage
// collector finds the Ref unreachable. Once no Ref, pending task argument or
// nested copy refers to the object, its owner frees it from every node's
// store. A Get through a released Ref returns *ObjectFreedError. Releasing
// twice or a zero Ref does nothing; releasing a Ref this process borrows
// tells the owner once no Ref to the object is left here. A []byte view
// returned by Get of a large object must not be read after its Ref is
// released (the space may be reused); until then it stays valid even when
// the Ref itself becomes unreachable (the object is then kept to the job's
// end).
func (r Ref[T]) Release() {
	if r.h != nil {
		r.h.st.release()
	}
}

// released reports whether the Ref's handle was released.
func (r Ref[T]) released() bool { return r.h != nil && r.h.st.released.Load() }

// Free frees the objects of refs now, as Ray's
// ray._private.internal_api.free: each ref is released (as Release) and its
// object, if this process owns it, is freed from every node's store whatever
// other references remain; a task still producing it runs on, and its result
// is freed when it arrives. Get of a freed object returns *ObjectFreedError.
// Freeing twice is a no-op; refs owned by other processes are only released
// here. Errors: ErrNotInitialized.
func Free(refs ...ObjectRef) error {
	cw, err := current()
	if err != nil {
		return err
	}
	var locs []*wire.ObjectLoc
	for _, r := range refs {
		if r == nil {
			continue
		}
		if rl, ok := r.(interface{ Release() }); ok {
			rl.Release()
		}
		if r.Owner() == cw.addr {
			locs = cw.objects.forceFree(r.ID(), locs)
		}
	}
	if len(locs) > 0 {
		cw.queueFree(locs)
	}
	return nil
}

// ObjectFreedError says an object was freed by its owner before this Get
// (as Ray's "object freed" ObjectLostError): every reference to it was
// released, or worker.Free freed it. errors.Is(err, ErrObjectLost) holds.
type ObjectFreedError struct {
	ObjectID string
	Owner    string // the owner's RPC address
	Reason   string
}

// Is makes errors.Is(err, ErrObjectLost) hold.
func (e *ObjectFreedError) Is(target error) bool { return target == ErrObjectLost }

// Error implements error.
func (e *ObjectFreedError) Error() string {
	return "object " + e.ObjectID + " (owner " + e.Owner + ") was freed: " + e.Reason
}

func (t *objectTable) setOnFree(f func([]*wire.ObjectLoc), stored func(size int64), inner func(owner string, ids []string), borrows func(ids []string)) {
	t.mu.Lock()
	t.onFree, t.onStored, t.onInnerFree, t.onBorrowsFree = f, stored, inner, borrows
	t.mu.Unlock()
}

// innerFreed lets go of refs of another process (owner) that a freed result
// contained: a Ref to one decoded here takes the result's borrow over (its
// release then sends the RefRemoved); the others are removed now. Called
// with objectTable.mu held: it takes only the borrow table's lock and
// queues the messages.
func (cw *coreWorker) innerFreed(owner string, ids []string) {
	for _, id := range ids {
		if !cw.borrows.adopt(id) {
			cw.refRemoved.add(cw, owner, id)
		}
	}
}

// noteStored counts the bytes of stored objects this process came to own
// and, once they pass a quarter of the local store since the last
// collection, starts one in the background. Dropped Refs hold store space,
// not Go heap, so the collector would otherwise run rarely and their
// objects would stay until the store fills (then reclaim collects, but a
// Create waits for it).
func (cw *coreWorker) noteStored(size int64) {
	capacity := cw.arena.capacity()
	if capacity <= 0 || cw.storedSinceGC.Add(size) < capacity/4 {
		return
	}
	if !cw.collecting.CompareAndSwap(false, true) {
		return
	}
	cw.storedSinceGC.Store(0)
	go func() {
		defer cw.collecting.Store(false)
		runtime.GC()
	}()
}

// unreferenced reports whether a counted object has no reference left.
// objectTable.mu must be held.
func (o *object) unreferenced() bool {
	return o.counted && !o.pinned && o.local <= 0 && o.submitted <= 0 && o.borrowed <= 0 && o.captured <= 0
}

// addLocal counts a new local handle of id; false when id is unknown.
func (t *objectTable) addLocal(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.objs[id]
	if o == nil {
		return false
	}
	o.counted = true
	o.local++
	return true
}

// releaseLocal drops a local handle of id, freeing the object if that was
// its last reference and it is ready (else when it becomes ready).
func (t *objectTable) releaseLocal(id string) {
	t.mu.Lock()
	o := t.objs[id]
	if o == nil {
		t.mu.Unlock()
		return
	}
	o.local--
	var locs []*wire.ObjectLoc
	if o.unreferenced() && o.ready() {
		locs = t.freeLocked(id, o, reasonUnreferenced, nil)
	}
	onFree := t.onFree
	t.mu.Unlock()
	if len(locs) > 0 && onFree != nil {
		onFree(locs)
	}
}

// pin keeps object id until its job ends (a Ref to it left the process).
func (t *objectTable) pin(id string) {
	t.mu.Lock()
	if o := t.objs[id]; o != nil {
		o.pinned = true
	}
	t.mu.Unlock()
}

// forceFree frees object id whatever its counts (worker.Free): now if it is
// ready, else once it is. The stored copy to delete is appended to locs.
func (t *objectTable) forceFree(id string, locs []*wire.ObjectLoc) []*wire.ObjectLoc {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.objs[id]
	switch {
	case o == nil:
	case o.ready():
		locs = t.freeLocked(id, o, reasonFreed, locs)
	default:
		o.freeReason = reasonFreed
	}
	return locs
}

// freeLocked removes a ready object from the table, remembers why, and
// appends its stored copy (if any) to locs. t.mu must be held.
func (t *objectTable) freeLocked(id string, o *object, why string, locs []*wire.ObjectLoc) []*wire.ObjectLoc {
	delete(t.objs, id)
	if t.freed == nil {
		t.freed = map[string]string{}
	}
	if _, ok := t.freed[id]; !ok {
		if len(t.freedOrder) >= maxFreedKept {
			delete(t.freed, t.freedOrder[0])
			t.freedOrder = t.freedOrder[1:]
		}
		t.freedOrder = append(t.freedOrder, id)
	}
	t.freed[id] = why
	// A freed object's own pending arguments (freed before its task ended
	// cannot happen: it is freed only once ready) are released already.
	if o.loc != nil {
		locs = append(locs, o.loc)
	}
	o.value = nil
	// The refs its value contained are released: this process's objects
	// here, the worker's through Object.RefRemoved.
	contained, inner := o.contained, o.inner
	o.contained, o.inner = nil, nil
	for _, c := range contained {
		if co := t.objs[c]; co != nil {
			co.captured--
			if co.unreferenced() && co.ready() {
				locs = t.freeLocked(c, co, reasonUnreferenced, locs)
			}
		}
	}
	if len(inner) > 0 && t.onInnerFree != nil {
		t.onInnerFree(o.innerOwner, inner)
	}
	if len(o.borrows) > 0 && t.onBorrowsFree != nil {
		t.onBorrowsFree(o.borrows)
		o.borrows = nil
	}
	return locs
}

// holdBorrowsFor records the borrow handles the Put object id holds; false
// when id is gone (the caller releases them).
func (t *objectTable) holdBorrowsFor(id string, ids []string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.objs[id]
	if o == nil {
		return false
	}
	o.borrows = append(o.borrows, ids...)
	return true
}

// contain records that object id's value nests refs to this process's
// objects ids (a Put value): each stays until id is freed.
func (t *objectTable) contain(id string, ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.objs[id]
	if o == nil {
		return
	}
	for _, c := range ids {
		if co := t.objs[c]; co != nil && c != id {
			co.counted = true
			co.captured++
			o.contained = append(o.contained, c)
		}
	}
}

// holdInner records that the result id contains refs to ids, owned by the
// worker process owner, which counts this process as their borrower until
// it is told RefRemoved: when id is freed, or now if it is gone already.
func (t *objectTable) holdInner(id string, ids []string, owner string) {
	if owner == "" {
		return
	}
	t.mu.Lock()
	if o := t.objs[id]; o != nil {
		o.inner = append(o.inner, ids...)
		o.innerOwner = owner
		t.mu.Unlock()
		return
	}
	onInner := t.onInnerFree
	t.mu.Unlock()
	if onInner != nil {
		onInner(owner, ids)
	}
}

// freedReason says why id was freed here ("" when it was not, or long ago).
func (t *objectTable) freedReason(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.freed[id]
}

// queueFree schedules the deletion of locs' objects from the nodes
// holding their primary copies (Obj.Free, batched per node).
func (cw *coreWorker) queueFree(locs []*wire.ObjectLoc) {
	byNode := map[string][]string{}
	for _, l := range locs {
		byNode[l.NodeAddr] = append(byNode[l.NodeAddr], l.Key)
	}
	for addr, keys := range byNode {
		cw.frees.enqueue(addr, keys, cw.sendFree)
	}
}

// sendFree sends one Obj.Free.
func (cw *coreWorker) sendFree(addr string, keys []string) {
	ctx, cancel := context.WithTimeout(cw.ctx, 10*time.Second)
	defer cancel()
	cw.dialer.markNode(addr)
	if err := cw.pool.Call(ctx, addr, wire.MethodObjectFree, &wire.ObjectFreeRequest{Keys: keys}, nil); err != nil && cw.ctx.Err() == nil {
		// A node that is gone took its store with it; the job's end frees
		// what a failed call left.
		cw.logger.Debug("free objects", "node", addr, "objects", len(keys), "err", err)
	}
}

// storeFullRetry is how long a Create refused for a full store is retried
// while this process frees what it no longer references (a variable for
// tests).
var storeFullRetry = 5 * time.Second

// reclaim runs after the local store refused a Create for lack of space: as
// Ray's global GC on a full object store, it collects garbage so that Refs
// no longer reachable release their objects, waits for the resulting
// deletes to reach the nodes, and reports whether to try again (false once
// storeFullRetry has passed since start, or ctx ended).
func (cw *coreWorker) reclaim(ctx context.Context, start time.Time, attempt int) bool {
	if time.Since(start) >= storeFullRetry || ctx.Err() != nil {
		return false
	}
	runtime.GC()
	// Cleanups run on their own goroutine after the collection: give them
	// a moment, then wait for the deletes they queued.
	sleepCtx(ctx, min(time.Duration(attempt+1)*5*time.Millisecond, 100*time.Millisecond))
	cw.frees.wait(ctx)
	return ctx.Err() == nil
}

// storeFull reports whether err is the node's refusal for lack of space.
func storeFull(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == wire.CodeObjectStoreFull &&
		!strings.Contains(re.Message, objstore.ErrTooLarge.Error()) && // no free makes room for that
		!strings.Contains(re.Message, "spill disk full") // nor for a full spill disk: fail at once
}

// handleObjectRefs answers `nodeup memory`'s question: the references that
// hold each named object this process owns (wire.ObjectRefsReply). One
// lock for the whole answer; counts are read, never changed.
func (cw *coreWorker) handleObjectRefs(ctx context.Context, req *wire.ObjectRefsRequest) (*wire.ObjectRefsReply, error) {
	n := len(req.IDs)
	if n > wire.MaxObjectRefs {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("reference kinds of %d objects: at most %d per request", n, wire.MaxObjectRefs)}
	}
	rep := &wire.ObjectRefsReply{Known: make([]bool, n), Local: make([]int32, n), Submitted: make([]int32, n),
		Borrowed: make([]int32, n), Captured: make([]int32, n), Pinned: make([]bool, n)}
	t := cw.objects
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, id := range req.IDs {
		// Not a cached copy of another owner's object: this process's IDs
		// start with its owner ID.
		o := t.objs[id]
		if o == nil || !strings.HasPrefix(id, cw.ownerID) {
			continue
		}
		rep.Known[i] = true
		rep.Local[i], rep.Submitted[i] = int32(max(o.local, 0)), int32(max(o.submitted, 0))
		rep.Borrowed[i], rep.Captured[i] = int32(max(o.borrowed, 0)), int32(max(o.captured, 0))
		rep.Pinned[i] = o.pinned
	}
	return rep, nil
}
