package worker

import (
	"context"
	"sync"

	"github.com/nodeup/nodeup/wire"
)

// object is one value this process owns or has fetched: ready once done is
// closed, then either value (msgpack) or err is set.
type object struct {
	done  chan struct{}
	value []byte          // msgpack value of a small object
	loc   *wire.ObjectLoc // where a large object's primary copy lives
	err   error
}

// objectTable is the owner's in-memory store (Ray's CoreWorkerMemoryStore):
// results of tasks this process submitted, its Puts, and cached copies of
// borrowed objects.
type objectTable struct {
	mu   sync.Mutex
	objs map[string]*object
}

func newObjectTable() *objectTable { return &objectTable{objs: map[string]*object{}} }

// pending adds an object that a task will produce.
func (t *objectTable) pending(id string) *object {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.objs[id]
	if !ok {
		o = &object{done: make(chan struct{})}
		t.objs[id] = o
	}
	return o
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

func (t *objectTable) set(id string, value []byte, loc *wire.ObjectLoc, err error) {
	o := t.pending(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-o.done:
		return
	default:
	}
	o.value, o.loc, o.err = value, loc, err
	close(o.done)
}

// clear drops every object (job end).
func (t *objectTable) clear() {
	t.mu.Lock()
	t.objs = map[string]*object{}
	t.mu.Unlock()
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
