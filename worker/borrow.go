package worker

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Borrowers, as Ray's: a ref nested in a task's or actor call's argument is
// held by the owner until the task returns (a submitted-task reference); a
// worker process that still holds a Ref to it then (an actor keeping it)
// reports it in the reply (PushTaskReply.Borrowed), and the owner keeps the
// object until that process sends Object.RefRemoved, once its last Ref to
// it is released or collected. A ref of a third process kept past the
// task (found nested in another object, e.g. a result that contains it) is
// registered with its owner directly (Object.Borrowed) before the reply,
// while the outer object still holds it. A borrowed ref nested in a Put
// value keeps a borrow handle until that object is freed. A borrower that
// passes such a ref on nested in a task's argument or result never sends
// RefRemoved for it: its sub-borrowers are not tracked, so the object stays
// until the job ends.

// borrow is this process's hold on an object another process owns.
type borrow struct {
	owner    string
	local    int  // live Ref handles here
	reported bool // told the owner (Borrowed): RefRemoved is owed
	escaped  bool // encoded into a value here: kept until the job ends
}

// borrowTable holds this process's borrows; its zero value is ready.
type borrowTable struct {
	mu sync.Mutex
	m  map[string]*borrow
	// fresh holds, per owner, the borrows not reported yet, so that the
	// report at the end of every task looks at those only.
	fresh map[string]map[string]struct{}
}

// entryLocked returns id's borrow, made (and marked fresh) if new.
func (t *borrowTable) entryLocked(id, owner string) *borrow {
	if t.m == nil {
		t.m = map[string]*borrow{}
		t.fresh = map[string]map[string]struct{}{}
	}
	b := t.m[id]
	if b == nil {
		b = &borrow{owner: owner}
		t.m[id] = b
		f := t.fresh[owner]
		if f == nil {
			f = map[string]struct{}{}
			t.fresh[owner] = f
		}
		f[id] = struct{}{}
	}
	return b
}

// add counts a new Ref handle of id, owned by owner.
func (t *borrowTable) add(id, owner string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entryLocked(id, owner).local++
}

// release drops a handle of id and reports whether the owner is now owed a
// RefRemoved for it (owner is then set).
func (t *borrowTable) release(id string) (owner string, owed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.m[id]
	if b == nil {
		return "", false
	}
	if b.local--; b.local > 0 || b.escaped {
		return "", false
	}
	// The last handle: owner is returned so the cached value goes too.
	delete(t.m, id)
	if !b.reported {
		delete(t.fresh[b.owner], id)
	}
	return b.owner, b.reported
}

// escape marks id, owned by owner, as passed on from here.
func (t *borrowTable) escape(id, owner string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entryLocked(id, owner).escaped = true
}

// adopt makes a live borrow of id, not reported yet, owe the owner a
// RefRemoved (the owner counted it once already, for a result that
// contained it and was freed); false when no such borrow is here.
func (t *borrowTable) adopt(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.m[id]
	if b == nil || b.reported {
		return false
	}
	b.reported = true
	delete(t.fresh[b.owner], id)
	return true
}

// report returns the objects of owner held here and not reported yet, and
// marks them reported: they go into a task reply to that owner.
func (t *borrowTable) report(owner string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.fresh[owner]
	if len(f) == 0 {
		return nil
	}
	delete(t.fresh, owner)
	ids := make([]string, 0, len(f))
	for id := range f {
		if b := t.m[id]; b != nil && !b.reported {
			b.reported = true
			ids = append(ids, id)
		}
	}
	return ids
}

// reportOthers is report for every owner but skip (the task's, told in
// the reply): per owner, the objects held here and not reported yet. The
// caller tells each owner (Object.Borrowed) and unreports what it could
// not.
func (t *borrowTable) reportOthers(skip string) map[string][]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[string][]string
	for owner, f := range t.fresh {
		if owner == skip || len(f) == 0 {
			continue
		}
		delete(t.fresh, owner)
		for id := range f {
			if b := t.m[id]; b != nil && !b.reported {
				b.reported = true
				if out == nil {
					out = map[string][]string{}
				}
				out[owner] = append(out[owner], id)
			}
		}
	}
	return out
}

// unreport marks ids, owned by owner, not reported after all (the owner
// could not be told): no RefRemoved is owed for them.
func (t *borrowTable) unreport(owner string, ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if b := t.m[id]; b != nil {
			b.reported = false
		}
	}
}

// tellOtherOwners registers this process, at a task's end, as a borrower
// with the owners (other than the task's) of refs it still holds: refs it
// found nested in another object, which the task's argument held until
// now. One call per owner, only when there are such refs.
func (cw *coreWorker) tellOtherOwners(taskOwner string) {
	others := cw.borrows.reportOthers(taskOwner)
	for owner, ids := range others {
		for len(ids) > 0 {
			k := min(len(ids), wire.MaxFreeKeys)
			ctx, cancel := context.WithTimeout(cw.ctx, 10*time.Second)
			err := cw.pool.Call(ctx, owner, wire.MethodObjectBorrowed, &wire.ObjectRefRemovedRequest{IDs: ids[:k:k]}, nil)
			cancel()
			if err != nil {
				// An owner that is gone took its objects with it.
				cw.logger.Debug("tell an owner its refs are borrowed", "owner", owner, "objects", k, "err", err)
				cw.borrows.unreport(owner, ids[:k])
			}
			ids = ids[k:]
		}
	}
	if len(others) > 0 {
		cw.collectSoon()
	}
}

// handleBorrowed counts a borrower that holds objects of this process it
// found nested in another object (Object.Borrowed).
func (cw *coreWorker) handleBorrowed(ctx context.Context, req *wire.ObjectRefRemovedRequest) (*wire.Empty, error) {
	if len(req.IDs) > wire.MaxFreeKeys {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("borrow of %d objects: at most %d per request", len(req.IDs), wire.MaxFreeKeys)}
	}
	cw.objects.addBorrowed(req.IDs)
	return &wire.Empty{}, nil
}

// newBorrowHandle counts a Ref handle of id, owned by another process,
// released like an owned one.
func (cw *coreWorker) newBorrowHandle(id, owner string) *refHandle {
	cw.borrows.add(id, owner)
	h := &refHandle{st: &refState{cw: cw, id: id, borrowed: true}}
	runtime.AddCleanup(h, (*refState).collected, h.st)
	return h
}

// releaseBorrow drops a borrowed handle, telling the owner once the last
// one here is gone and the borrow was reported; the value cached here goes
// then too.
func (cw *coreWorker) releaseBorrow(id string) {
	owner, owed := cw.borrows.release(id)
	if owner != "" {
		cw.objects.dropCached(id)
	}
	if owed {
		cw.refRemoved.add(cw, owner, id)
	}
}

// held reports whether a Ref handle of borrowed object id lives here.
func (t *borrowTable) held(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id] != nil
}

// dropCached forgets a ready copy of an object another process owns
// (fetched by a Get, a Wait or a task's argument), so a long-running
// process does not keep every value it ever read. A Get that needs it
// again fetches it again. Objects of this process are never dropped here:
// their IDs cannot match (they carry this process's owner ID).
func (t *objectTable) dropCached(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.objs[id]; o != nil && !o.counted && o.ready() && o.work == nil && len(o.watchers) == 0 {
		delete(t.objs, id)
	}
}

// dropArgs forgets the cached copies of a finished task's arguments that
// other processes own and no Ref here holds.
func (cw *coreWorker) dropArgs(args []wire.Arg) {
	for _, a := range args {
		if a.IsRef && a.Owner != cw.addr && !cw.borrows.held(a.RefID) {
			cw.objects.dropCached(a.RefID)
		}
	}
}

// collectSoon runs the garbage collector shortly after a task reported
// borrows (200 ms, then 2 s later), so that refs the task dropped are
// released and their owners told without waiting for the runtime's own
// collection, which an idle worker process may not run for minutes.
func (cw *coreWorker) collectSoon() {
	if !cw.gcPending.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer cw.gcPending.Store(false)
		for _, d := range []time.Duration{200 * time.Millisecond, 2 * time.Second} {
			sleepCtx(cw.ctx, d)
			if cw.ctx.Err() != nil {
				return
			}
			runtime.GC()
		}
	}()
}

// addBorrowed counts a borrower's report of ids (a task's reply) on the
// objects this process owns.
func (t *objectTable) addBorrowed(ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if o := t.objs[id]; o != nil {
			o.counted = true
			o.borrowed++
		}
	}
}

// dropContained lets go at once of the refs a reply's results contain, for
// a reply whose results are not taken (its task is retried or failed).
func (cw *coreWorker) dropContained(rep *wire.PushTaskReply) {
	if rep.ContainedOwner == "" {
		return
	}
	for _, ids := range rep.Contained {
		for _, id := range ids {
			cw.refRemoved.add(cw, rep.ContainedOwner, id)
		}
	}
}

// handleRefRemoved takes a borrower's word that it let go of objects this
// process owns, freeing those with no reference left.
func (cw *coreWorker) handleRefRemoved(ctx context.Context, req *wire.ObjectRefRemovedRequest) (*wire.Empty, error) {
	if len(req.IDs) > wire.MaxFreeKeys {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("ref removal of %d objects: at most %d per request", len(req.IDs), wire.MaxFreeKeys)}
	}
	t := cw.objects
	t.mu.Lock()
	var locs []*wire.ObjectLoc
	for _, id := range req.IDs {
		o := t.objs[id]
		if o == nil {
			continue // freed by Free meanwhile
		}
		// It may come before the reply that reported the borrow (another
		// connection): the count goes below zero until the report lands,
		// while the task, still pending here, holds the object.
		o.borrowed--
		if o.unreferenced() && o.ready() {
			locs = t.freeLocked(id, o, reasonUnreferenced, locs)
		}
	}
	onFree := t.onFree
	t.mu.Unlock()
	if len(locs) > 0 && onFree != nil {
		onFree(locs)
	}
	return &wire.Empty{}, nil
}

// batchQueue batches IDs per destination address and sends them from one
// goroutine at a time; its zero value is ready (send is given per add).
type batchQueue struct {
	mu      sync.Mutex
	byAddr  map[string][]string
	sending bool
	flushed chan struct{} // closed when the current sender ends
}

// refRemovedQueue sends Object.RefRemoved to owners.
type refRemovedQueue struct{ batchQueue }

func (q *refRemovedQueue) add(cw *coreWorker, owner, id string) {
	q.enqueue(owner, []string{id}, func(addr string, ids []string) {
		ctx, cancel := context.WithTimeout(cw.ctx, 10*time.Second)
		defer cancel()
		if err := cw.pool.Call(ctx, addr, wire.MethodObjectRefRemoved, &wire.ObjectRefRemovedRequest{IDs: ids}, nil); err != nil && cw.ctx.Err() == nil {
			// An owner that is gone freed its objects with it.
			cw.logger.Debug("tell an owner borrowed refs were removed", "owner", addr, "objects", len(ids), "err", err)
		}
	})
}

// enqueue adds ids for addr and starts a sender if none runs; send is
// called with at most wire.MaxFreeKeys IDs at a time.
func (q *batchQueue) enqueue(addr string, ids []string, send func(addr string, ids []string)) {
	q.mu.Lock()
	if q.byAddr == nil {
		q.byAddr = map[string][]string{}
	}
	q.byAddr[addr] = append(q.byAddr[addr], ids...)
	start := !q.sending
	if start {
		q.sending = true
		q.flushed = make(chan struct{})
	}
	q.mu.Unlock()
	if !start {
		return
	}
	go func() {
		for {
			q.mu.Lock()
			batch := q.byAddr
			q.byAddr = nil
			if len(batch) == 0 {
				q.sending = false
				close(q.flushed)
				q.mu.Unlock()
				return
			}
			q.mu.Unlock()
			for a, ids := range batch {
				for len(ids) > 0 {
					k := min(len(ids), wire.MaxFreeKeys)
					send(a, ids[:k:k])
					ids = ids[k:]
				}
			}
		}
	}()
}

// wait waits until what was queued so far was sent (or ctx ends).
func (q *batchQueue) wait(ctx context.Context) {
	q.mu.Lock()
	ch, sending := q.flushed, q.sending
	q.mu.Unlock()
	if !sending {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// nestedSinks maps an encoder that marshalNested runs to the refs found
// nested in the value (EncodeMsgpack adds them).
var nestedSinks sync.Map // *msgpack.Encoder → *refSink

// refSink collects the refs nested in a value being encoded: those this
// process owns, and, for a Put value (keepBorrowed), those it borrows
// ([id, owner]).
type refSink struct {
	owned        []string
	borrowed     [][2]string
	keepBorrowed bool
}

// marshalArg is msgpack.Marshal that also returns the IDs of refs this
// process owns nested in v: the task (an argument) or the object (a
// result) holds them.
func marshalArg(v any) ([]byte, []string, error) {
	b, owned, _, err := marshalNested(v, false)
	return b, owned, err
}

// marshalNested is marshalArg that, with keepBorrowed (a Put value), also
// returns the refs this process borrows nested in v, which the object then
// holds instead of keeping them until the job ends.
func marshalNested(v any, keepBorrowed bool) ([]byte, []string, [][2]string, error) {
	switch v.(type) {
	case nil, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64, string, []byte:
		// Holds no ref: no sink to register (the common result).
		b, err := msgpack.Marshal(v)
		return b, nil, nil, err
	}
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	var buf bytes.Buffer
	enc.Reset(&buf)
	sink := &refSink{keepBorrowed: keepBorrowed}
	nestedSinks.Store(enc, sink)
	err := enc.Encode(v)
	nestedSinks.Delete(enc)
	if err != nil {
		return nil, nil, nil, err
	}
	return buf.Bytes(), sink.owned, sink.borrowed, nil
}

// noteEncoded is EncodeMsgpack's bookkeeping for a ref nested in a value
// being encoded in this process: one it owns is held by the task whose
// argument, or the object whose value (a Put, a result), is encoded
// (marshalNested), else pinned until the job ends; one it borrows is held
// by a Put value that nests it, else passed on, so kept.
func noteEncoded(enc *msgpack.Encoder, cw *coreWorker, id, owner string) {
	s, ok := nestedSinks.Load(enc)
	var sink *refSink
	if ok {
		sink = s.(*refSink)
	}
	if owner != cw.addr {
		switch {
		case owner == "":
		case sink != nil && sink.keepBorrowed:
			sink.borrowed = append(sink.borrowed, [2]string{id, owner})
		default:
			cw.borrows.escape(id, owner)
		}
		return
	}
	if sink != nil {
		sink.owned = append(sink.owned, id)
		return
	}
	cw.objects.pin(id)
}

// holdBorrows takes a borrow handle of each of refs ([id, owner]) for the
// Put object id whose value nests them, released when it is freed.
func (cw *coreWorker) holdBorrows(id string, refs [][2]string) {
	ids := make([]string, len(refs))
	for i, r := range refs {
		cw.borrows.add(r[0], r[1])
		ids[i] = r[0]
	}
	if !cw.objects.holdBorrowsFor(id, ids) {
		cw.releaseBorrows(ids) // freed already
	}
}

// releaseBorrows drops the borrow handles a freed Put object held.
func (cw *coreWorker) releaseBorrows(ids []string) {
	for _, id := range ids {
		cw.releaseBorrow(id)
	}
}
