package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// maxLineageDepth bounds how many generations of freed arguments a task's
// lineage keeps (Ray bounds lineage by bytes, max_lineage_bytes): a chain
// of tasks each taking the last one's result keeps at most this many
// ancestors of a live object, so a long-running chain does not grow the
// owner's memory without bound. An ancestor past it that was freed cannot
// be rebuilt (the descendant's rebuild then fails naming it).
const maxLineageDepth = 32

// lostPollInterval is how often a Get whose copy could not be read asks
// the local node whether the holder was declared dead.
const lostPollInterval = 200 * time.Millisecond

// lineage is what the owner keeps of a task to rebuild its return objects
// once their stored copies are lost with a node (Ray's lineage
// reconstruction): the task's spec as submitted, its options and how many
// of its retries were used. It lives as long as one of the task's return
// objects is in the owner's table (ref count above zero), or a live
// descendant's lineage keeps it (args, up to maxLineageDepth generations):
// a spec each (its inline arguments, each at most 100 KiB).
type lineage struct {
	spec wire.TaskSpec // Args as encoded at submission: refs this process owns stay refs
	opts taskOptions
	ids  []string
	deps []int // positions in spec.Args of refs this process owns, resolved before each run
	// args holds the lineage of argument objects this process owns that
	// are task returns, so that one freed since can be rebuilt; depth is
	// 1 + the deepest kept.
	args  map[string]*lineage
	depth int
	// used counts the runs beyond the first (worker crashes, application
	// retries, rebuilds), against opts.maxRetries as Ray's max_retries.
	used atomic.Int32
}

// newLineage records the lineage of a task submitted with spec, opts and
// return ids; deps are the positions of the owned refs among its args.
func newLineage(spec wire.TaskSpec, opts taskOptions, ids []string, deps []int) *lineage {
	spec.Args = slices.Clone(spec.Args)
	return &lineage{spec: spec, opts: opts, ids: ids, deps: deps, depth: 1}
}

// linkArgsLocked keeps the lineage of lin's owned argument objects that
// have one, within maxLineageDepth. objectTable.mu must be held.
func (t *objectTable) linkArgsLocked(lin *lineage, self string) {
	for _, a := range lin.spec.Args {
		if !a.IsRef || a.Owner != self {
			continue
		}
		ao := t.objs[a.RefID]
		if ao == nil || ao.lin == nil || ao.lin.depth >= maxLineageDepth {
			continue
		}
		if lin.args == nil {
			lin.args = map[string]*lineage{}
		}
		lin.args[a.RefID] = ao.lin
		lin.depth = max(lin.depth, ao.lin.depth+1)
	}
}

// lostRead is readLarge's failure on an object this process owns: it waits
// until the node holding the copy is declared dead (or the holder says it
// lacks the object), then rebuilds the object from its lineage and reads
// the new copy. A read that works meanwhile (a passing failure) is
// returned. Errors: *ObjectLostError naming the object, owner and node
// when it cannot be rebuilt (a Put object, MaxRetries used up), or when
// the local node cannot say whether the holder is dead.
func (cw *coreWorker) lostRead(ctx context.Context, id string, loc *wire.ObjectLoc, readErr error) ([]byte, func(), error) {
	b, release, err := cw.recoverOwned(ctx, id, loc, readErr)
	if err != nil || release != nil {
		return b, release, err
	}
	return cw.getValueView(ctx, id, cw.addr)
}

// recoverOwned is lostRead up to the rebuild: it returns the re-read
// value (release not nil) when the copy became readable, or nothing once
// the object is rebuilding (pending in the table), or the loss.
func (cw *coreWorker) recoverOwned(ctx context.Context, id string, loc *wire.ObjectLoc, readErr error) ([]byte, func(), error) {
	for {
		var v wire.ClusterView
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		verr := cw.pool.Call(vctx, cw.nodeAddr, wire.MethodClusterView, &wire.Empty{}, &v)
		cancel()
		if verr != nil {
			why := readErr.Error()
			var le *ObjectLostError
			if errors.As(readErr, &le) {
				why = le.Reason
			}
			if loc.NodeAddr == cw.nodeAddr {
				why = "this process's node held its only copy and does not answer: " + why
			} else {
				why += fmt.Sprintf(" (and this process's node cannot say whether the holder lives: %v)", verr)
			}
			return nil, nil, &ObjectLostError{ObjectID: id, Owner: cw.addr, Node: loc.NodeAddr, Reason: why}
		}
		dead := map[string]bool{}
		node, alive := loc.NodeAddr, false
		for _, nd := range v.Nodes {
			if !nd.Alive {
				dead[nd.Addr] = true
			}
			if nd.Addr == loc.NodeAddr {
				node, alive = nd.NodeName, nd.Alive
			}
		}
		if !alive {
			dead[loc.NodeAddr] = true // declared dead, or gone from the view
		}
		if !alive || holderLacks(readErr) {
			why := "node " + node + " died"
			if alive {
				why = "node " + node + " no longer holds it"
			}
			if err := cw.rebuild(id, loc, node, why, dead); err != nil {
				return nil, nil, err
			}
			cw.logger.Info("object lost with its node: rebuilding it from its lineage", "object", id, "node", node)
			return nil, nil, nil
		}
		sleepCtx(ctx, lostPollInterval)
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("get %s: its copy on node %s could not be read (%v), and the node was not declared dead before: %w",
				id, node, readErr, ctx.Err())
		}
		b, release, err := cw.readLarge(ctx, loc)
		if err == nil {
			return b, release, nil
		}
		readErr = err
	}
}

// maxRecoverWait caps how long an owner holds a borrower's Object.Recover.
const maxRecoverWait = 60 * time.Second

// handleObjectRecover serves a borrower that could not read an object this
// process owns at the location it was given: once the holder is declared
// dead the object is rebuilt, and the answer (as Object.Get's) is the new
// copy, when it is ready within WaitMillis. A copy the owner can read
// after all is answered as it is.
func (cw *coreWorker) handleObjectRecover(ctx context.Context, req *wire.ObjectRecoverRequest) (*wire.ObjectGetReply, error) {
	wait := min(max(time.Duration(req.WaitMillis)*time.Millisecond, 0), maxRecoverWait)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	o := cw.objects.get(req.ID)
	if o == nil {
		rep := cw.unknownReply(req.ID)
		return &rep, nil
	}
	if o.ready() && o.err == nil && o.loc != nil && o.loc.Key == req.Key && o.loc.NodeAddr == req.NodeAddr {
		readErr := &ObjectLostError{ObjectID: req.ID, Node: req.NodeAddr, Reason: "a borrower could not read it"}
		_, release, err := cw.recoverOwned(ctx, req.ID, o.loc, readErr)
		if release != nil {
			release()
		}
		if err != nil {
			if ctx.Err() != nil {
				return &wire.ObjectGetReply{NotReady: true}, nil
			}
			return &wire.ObjectGetReply{Lost: err.Error()}, nil
		}
		if o = cw.objects.get(req.ID); o == nil {
			rep := cw.unknownReply(req.ID)
			return &rep, nil
		}
	}
	if o.wait(ctx) != nil {
		return &wire.ObjectGetReply{NotReady: true}, nil
	}
	rep := o.reply()
	return &rep, nil
}

// recoverBorrowed is readLarge's failure on a borrowed object: the owner
// is asked to rebuild it (Object.Recover), and the new copy is read and
// cached. Errors: *OwnerDiedError when the owner cannot be reached,
// *ObjectLostError when it cannot rebuild the object.
func (cw *coreWorker) recoverBorrowed(ctx context.Context, id, owner string, loc *wire.ObjectLoc, readErr error) ([]byte, func(), error) {
	for {
		var rep wire.ObjectGetReply
		cctx, cancel := context.WithTimeout(ctx, maxRecoverWait+30*time.Second)
		err := cw.pool.Call(cctx, owner, wire.MethodObjectRecover,
			&wire.ObjectRecoverRequest{ID: id, Key: loc.Key, NodeAddr: loc.NodeAddr, WaitMillis: maxRecoverWait.Milliseconds()}, &rep)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, nil, fmt.Errorf("get %s: %w (its copy could not be read: %v)", id, ctx.Err(), readErr)
		case err != nil && rpc.IsTransport(err):
			return nil, nil, &OwnerDiedError{ObjectID: id, Owner: owner, Reason: err.Error()}
		case err != nil:
			return nil, nil, fmt.Errorf("%w; asking its owner %s to rebuild it: %v", readErr, owner, err)
		case rep.NotReady:
			continue
		case rep.Lost != "":
			return nil, nil, &ObjectLostError{ObjectID: id, Owner: owner, Node: loc.NodeAddr, Reason: rep.Lost}
		case rep.Error != nil:
			return nil, nil, taskErrorFrom(rep.TaskName, rep.Error)
		case rep.Loc == nil:
			return rep.Value, nil, nil
		case *rep.Loc == *loc:
			return nil, nil, readErr // the owner reads it where this process cannot
		}
		cw.objects.relocate(id, rep.Loc)
		return cw.readLarge(ctx, rep.Loc)
	}
}

// relocate points the cached entry of a borrowed object at its new copy.
func (t *objectTable) relocate(id string, loc *wire.ObjectLoc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.objs[id]; o != nil && o.ready() && o.loc != nil {
		n := *o
		n.loc = loc
		t.objs[id] = &n
	}
}

// holderLacks reports whether a failed read's node answered that no node
// holds the object (object_lost): a lost copy whatever its holder's state.
func holderLacks(err error) bool {
	var le *ObjectLostError
	return errors.As(err, &le) && le.holderLacks
}

// rebuild re-runs the task that made object id, whose copy at stale is
// lost with node (why says how), after its arguments that are lost too (on
// a node in dead) or freed since, recursively. It returns once the runs
// are queued; the object is pending until its run ends. A rebuild already
// under way (id no longer at stale) is left to finish.
func (cw *coreWorker) rebuild(id string, stale *wire.ObjectLoc, node, why string, dead map[string]bool) error {
	t := cw.objects
	t.mu.Lock()
	o := t.objs[id]
	if o == nil || !o.ready() || o.loc != stale {
		t.mu.Unlock()
		return nil // freed (Get reports it), or rebuilt meanwhile
	}
	var runs []*pendingTask
	err := t.rebuildLocked(cw, id, node, why, dead, &runs, 0)
	t.mu.Unlock()
	for _, r := range runs {
		if len(r.lin.deps) > 0 {
			go cw.sub.resolveThenEnqueue(r, r.lin.deps)
		} else {
			cw.sub.enqueue(r)
		}
	}
	return err
}

// rebuildLocked makes the ready, lost object id pending again on a new run
// of its task, appended to runs, and does the same first for the task's
// lost or freed arguments (level is the recursion's depth). objectTable.mu
// must be held.
func (t *objectTable) rebuildLocked(cw *coreWorker, id, node, why string, dead map[string]bool, runs *[]*pendingTask, level int) error {
	o := t.objs[id]
	lin := o.lin
	if lin == nil {
		return &ObjectLostError{ObjectID: id, Owner: cw.addr, Node: node,
			Reason: why + ", which held its only copy; it has no lineage to rebuild it from (a Put object or an actor call's result, as Ray)"}
	}
	used := int(lin.used.Load())
	if lin.opts.maxRetries >= 0 && used >= lin.opts.maxRetries {
		return &ObjectLostError{ObjectID: id, Owner: cw.addr, Node: node,
			Reason: fmt.Sprintf("%s, which held its only copy; its task %s may not run again to rebuild it (MaxRetries %d, %d used)",
				why, lin.spec.Name, lin.opts.maxRetries, used)}
	}
	if !slices.ContainsFunc(lin.ids, func(rid string) bool { return t.objs[rid] != nil }) {
		return nil // every return freed: nothing to rebuild
	}
	spec := lin.spec
	spec.Args = slices.Clone(spec.Args)
	run := &pendingTask{sub: cw.sub, spec: spec, ids: lin.ids, opts: lin.opts, crashes: used + 1, lin: lin}
	var first *object
	for _, rid := range lin.ids {
		old := t.objs[rid]
		if old == nil {
			continue // freed: its new result is dropped when the run ends
		}
		n := &object{done: make(chan struct{}), work: run, lin: lin, counted: old.counted, pinned: old.pinned,
			local: old.local, submitted: old.submitted, borrowed: old.borrowed, freeReason: old.freeReason,
			captured: old.captured, contained: old.contained, inner: old.inner, innerOwner: old.innerOwner, borrows: old.borrows}
		t.objs[rid] = n
		if first == nil {
			first = n
		}
	}
	// The run holds its owned arguments until it ends, as the first did;
	// those lost or freed are rebuilt first (resolveThenEnqueue waits).
	var held []string
	for _, a := range spec.Args {
		if !a.IsRef || a.Owner != cw.addr {
			continue
		}
		ao := t.objs[a.RefID]
		if ao == nil && lin.args[a.RefID] != nil && level < maxLineageDepth {
			// Freed since: a lost placeholder that is rebuilt below.
			ao = &object{done: make(chan struct{}), lin: lin.args[a.RefID], counted: true}
			close(ao.done)
			t.objs[a.RefID] = ao
			if err := t.rebuildLocked(cw, a.RefID, node, "it was freed after task "+spec.Name+" used it", dead, runs, level+1); err != nil {
				t.objs[a.RefID] = lostObject(ao, err)
			}
			ao = t.objs[a.RefID]
		} else if ao != nil && ao.ready() && ao.err == nil && ao.loc != nil && dead[ao.loc.NodeAddr] && level < maxLineageDepth {
			if err := t.rebuildLocked(cw, a.RefID, ao.loc.NodeAddr, "its node "+ao.loc.NodeAddr+" died", dead, runs, level+1); err != nil {
				t.objs[a.RefID] = lostObject(ao, err)
			}
			ao = t.objs[a.RefID]
		}
		if ao != nil {
			ao.counted = true
			ao.submitted++
			held = append(held, a.RefID)
		}
	}
	first.args = held
	*runs = append(*runs, run)
	return nil
}

// lostObject is old, ready with err instead of its lost copy (its counts
// kept).
func lostObject(old *object, err error) *object {
	n := &object{done: make(chan struct{}), err: err, counted: old.counted, pinned: old.pinned,
		local: old.local, submitted: old.submitted, borrowed: old.borrowed,
		captured: old.captured, contained: old.contained, inner: old.inner, innerOwner: old.innerOwner, borrows: old.borrows}
	close(n.done)
	return n
}

// locateLacks reports whether a Locate error is the node's object_lost:
// no node holds the object any more.
func locateLacks(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == wire.CodeObjectLost
}
