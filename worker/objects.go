package worker

import (
	"context"
	"fmt"
	"sync"

	"github.com/nodeup/nodeup/wire"
)

// object is one value this process owns or has fetched: ready once done is
// closed, then either value (msgpack) or err is set.
type object struct {
	done     chan struct{}
	value    []byte          // msgpack value of a small object
	loc      *wire.ObjectLoc // where a large object's primary copy lives
	err      error
	watchers []watcher // guarded by objectTable.mu; told once, when done closes
	// work is the task or actor call of this process that produces the
	// object, until the object is ready (for Cancel); guarded by
	// objectTable.mu.
	work work

	// Reference counts of an object this process owns (Ray's
	// ReferenceCounter), guarded by objectTable.mu: counted is set once a
	// local handle or a submitted task refers to it, and then it is freed
	// when every count is zero and it is ready, unless pinned (encoded into
	// a value this process does not track, e.g. a queue item or an actor
	// constructor's argument: kept until the job ends), counting borrowers
	// (borrow.go) and containing objects too. args are the owned objects
	// the task making this object takes as arguments: released when it is
	// ready.
	counted   bool
	pinned    bool
	local     int
	submitted int
	borrowed  int // borrowers' reports not yet matched by a RefRemoved
	args      []string
	// captured counts the objects here whose value contains a ref to this
	// one (Ray's "contained in" references): a Put value or a task result
	// nesting it. contained are the objects of this process nested in
	// this one's value, released when it is freed; inner are those of
	// another process (innerOwner) nested in a task result, which that
	// process counts this one as a borrower of until told RefRemoved.
	captured   int
	contained  []string
	inner      []string
	innerOwner string
	// borrows are refs of other processes nested in this Put object's
	// value: this process holds a borrow handle of each until it is freed.
	borrows []string
	// freeReason is set by Free on an object not ready yet: it is freed,
	// whatever its counts, once ready.
	freeReason string
	// lin is the lineage of the task that makes the object (nil for a Put,
	// an actor call's result, a borrowed object, or once the object is an
	// inline value or a failure): kept while the object is in the table,
	// to rebuild it if its stored copy is lost (lineage.go).
	lin *lineage
}

// watcher is one position in a Wait (or a borrower's batch get) that is told
// on ch when its object becomes ready.
type watcher struct {
	ch chan<- int
	i  int
}

// objectTable is the owner's in-memory store (Ray's CoreWorkerMemoryStore):
// results of tasks this process submitted, its Puts, and cached copies of
// borrowed objects (or fetches of them in flight).
type objectTable struct {
	mu   sync.Mutex
	objs map[string]*object
	// freed remembers the IDs of the last maxFreedKept objects freed here,
	// and why, so a late Get names the free (ObjectFreedError);
	// freedOrder is its keys, oldest first.
	freed      map[string]string
	freedOrder []string
	// onFree is told the stored copies of freed objects (set once by the
	// core worker; nil in unit tests).
	onFree func(locs []*wire.ObjectLoc)
	// onStored is told the size of each stored copy that becomes ready
	// here (set with onFree; nil in unit tests).
	onStored func(size int64)
	// onInnerFree is told the refs of another process that a freed task
	// result contained (set with onFree; nil in unit tests). Called with
	// mu held.
	onInnerFree func(owner string, ids []string)
	// onBorrowsFree is told the borrow handles a freed Put object held (set
	// with onFree); called with mu held, it hands them to a goroutine.
	onBorrowsFree func(ids []string)
}

func newObjectTable() *objectTable { return &objectTable{objs: map[string]*object{}} }

// pending adds an object that a task will produce.
func (t *objectTable) pending(id string) *object {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pendingLocked(id)
}

func (t *objectTable) pendingLocked(id string) *object {
	o, ok := t.objs[id]
	if !ok {
		o = &object{done: make(chan struct{})}
		t.objs[id] = o
	}
	return o
}

// pendingFor adds the objects that w will produce (its return objects),
// and holds args, the objects of this process w takes as arguments, until
// they are ready (Ray's submitted-task references). An argument already
// freed is skipped (the task then reports it). lin, when not nil, is the
// task's lineage, kept with its return objects; self is this process's
// address.
func (t *objectTable) pendingFor(ids []string, w work, args []string, lin *lineage, self string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if lin != nil {
		t.linkArgsLocked(lin, self)
	}
	for _, id := range ids {
		o := t.pendingLocked(id)
		o.work, o.lin = w, lin
	}
	if len(args) == 0 || len(ids) == 0 {
		return
	}
	held := make([]string, 0, len(args))
	for _, a := range args {
		if o := t.objs[a]; o != nil {
			o.counted = true
			o.submitted++
			held = append(held, a)
		}
	}
	t.objs[ids[0]].args = held
}

// workOf returns what produces object id, or nil once it is ready (or
// for a Put or an object this process does not know).
func (t *objectTable) workOf(id string) work {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.objs[id]; o != nil {
		return o.work
	}
	return nil
}

// get returns the object, or nil when this process does not know it.
func (t *objectTable) get(id string) *object {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.objs[id]
}

// complete sets an object's value or error once.
func (t *objectTable) complete(id string, value []byte, err error) { t.set(id, value, nil, err) }

// completeLoc records where a large object was stored.
func (t *objectTable) completeLoc(id string, loc *wire.ObjectLoc) { t.set(id, nil, loc, nil) }

// failAll completes each of ids with err (a task's or call's return objects).
func (t *objectTable) failAll(ids []string, err error) {
	for _, id := range ids {
		t.complete(id, nil, err)
	}
}

// finish completes a task's or call's return objects ids with its results:
// inline values, or where the worker stored a large one. A result missing
// from the reply fails its object, naming the task.
func (t *objectTable) finish(name string, ids []string, returns [][]byte, stored []*wire.ObjectLoc) {
	t.finishContained(name, ids, returns, stored, nil, "")
}

// finishContained is finish for a reply whose results contain refs owned by
// the worker process (containedOwner), per result: each result holds them
// until it is freed.
func (t *objectTable) finishContained(name string, ids []string, returns [][]byte, stored []*wire.ObjectLoc, contained [][]string, containedOwner string) {
	for i, id := range ids {
		if i < len(contained) && len(contained[i]) > 0 {
			t.holdInner(id, contained[i], containedOwner)
		}
		switch {
		case i < len(stored) && stored[i] != nil:
			t.completeLoc(id, stored[i])
		case i < len(returns):
			t.complete(id, returns[i], nil)
		default:
			t.complete(id, nil, fmt.Errorf("task %s returned %d values, want %d", name, len(returns), len(ids)))
		}
	}
}

func (t *objectTable) set(id string, value []byte, loc *wire.ObjectLoc, err error) {
	t.mu.Lock()
	if _, gone := t.freed[id]; gone && t.objs[id] == nil {
		// Freed already (a late outcome: a cancel racing the result): its
		// stored copy, if any, goes too.
		t.mu.Unlock()
		if loc != nil && t.onFree != nil {
			t.onFree([]*wire.ObjectLoc{loc})
		}
		return
	}
	o := t.pendingLocked(id)
	if o.ready() {
		t.mu.Unlock()
		return
	}
	o.value, o.loc, o.err = value, loc, err
	if loc == nil {
		o.lin = nil // an inline value or a failure is never lost with a node
	}
	close(o.done)
	if loc != nil && t.onStored != nil {
		defer t.onStored(loc.Size) // after the unlock below
	}
	for _, w := range o.watchers {
		w.ch <- w.i // never blocks: ch has room for every position watched
	}
	o.watchers = nil
	w := o.work
	o.work = nil
	var locs []*wire.ObjectLoc
	if o.freeReason != "" || o.unreferenced() {
		why := o.freeReason
		if why == "" {
			why = reasonUnreferenced
		}
		locs = t.freeLocked(id, o, why, locs)
	}
	args := o.args
	o.args = nil
	for _, a := range args {
		if ao := t.objs[a]; ao != nil {
			ao.submitted--
			if ao.unreferenced() && ao.ready() {
				locs = t.freeLocked(a, ao, reasonUnreferenced, locs)
			}
		}
	}
	t.mu.Unlock()
	if w != nil {
		w.finished()
	}
	if len(locs) > 0 && t.onFree != nil {
		t.onFree(locs)
	}
}

// clear drops every object (job end), and stops watching the contexts of
// the work still producing them.
func (t *objectTable) clear() {
	t.mu.Lock()
	objs := t.objs
	t.objs = map[string]*object{}
	t.freed, t.freedOrder = nil, nil
	t.mu.Unlock()
	for _, o := range objs {
		if o.work != nil {
			o.work.finished()
		}
	}
}

// scan marks isReady[i] for the ready objects among id(0..n-1) (ready refs
// already marked are kept), in order, and stops once want are marked. It
// returns how many are marked, and the positions not checked because
// this process does not know their object (missing; only when the scan did
// not stop early). One lock for the whole scan: Wait calls it on every call.
func (t *objectTable) scan(n int, id func(int) string, isReady []bool, want int) (count int, missing []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range n {
		if isReady[i] {
			count++
		}
	}
	for i := 0; i < n && count < want; i++ {
		if isReady[i] {
			continue
		}
		o := t.objs[id(i)]
		switch {
		case o == nil:
			missing = append(missing, i)
		case o.ready():
			isReady[i] = true
			count++
		}
	}
	return count, missing
}

// watch arranges for i to be sent on ch once id(i)'s object is ready, for
// each i in idx; i is sent at once if it is ready already or its object is
// unknown (dropped at job end). ch needs room for every position of idx.
// unwatch undoes it.
func (t *objectTable) watch(idx []int, id func(int) string, ch chan<- int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, i := range idx {
		o := t.objs[id(i)]
		if o == nil || o.ready() {
			ch <- i
			continue
		}
		o.watchers = append(o.watchers, watcher{ch: ch, i: i})
	}
}

// unwatch removes ch's watchers from the objects of idx.
func (t *objectTable) unwatch(idx []int, id func(int) string, ch chan<- int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, i := range idx {
		o := t.objs[id(i)]
		if o == nil || len(o.watchers) == 0 {
			continue
		}
		kept := o.watchers[:0]
		for _, w := range o.watchers {
			if w.ch != ch {
				kept = append(kept, w)
			}
		}
		clear(o.watchers[len(kept):])
		o.watchers = kept
	}
}

// claim adds a pending object for each id of ids(0..n-1) this process does
// not know and whose owner is another process, and returns those ids grouped
// by owner: the caller fetches them (each object is fetched by one claimer).
func (t *objectTable) claim(n int, ref func(int) (id, owner string), self string) map[string][]string {
	var byOwner map[string][]string
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range n {
		id, owner := ref(i)
		if owner == "" || owner == self {
			continue
		}
		if _, ok := t.objs[id]; ok {
			continue
		}
		t.objs[id] = &object{done: make(chan struct{})}
		if byOwner == nil {
			byOwner = map[string][]string{}
		}
		byOwner[owner] = append(byOwner[owner], id)
	}
	return byOwner
}

func (o *object) ready() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// wait blocks until the object is ready or ctx ends.
func (o *object) wait(ctx context.Context) error {
	select {
	case <-o.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
