package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

const (
	// fetchBatch is the most object IDs one Object.GetMany asks for.
	fetchBatch = 4096
	// fetchPollMillis is how long the owner holds a batch get open while
	// none of its objects is ready.
	fetchPollMillis = 10_000
	// getManyMaxBytes is the default cap on one batch reply's values (bytes),
	// far below the RPC frame limit.
	getManyMaxBytes = 8 << 20
)

// prefetch starts fetching, from their owners, the objects among
// ref(0..n-1) that this process does not know yet: one long-poll batch per
// owner (Object.GetMany), each object claimed once however many Gets and
// Waits ask for it. A fetch outlives the call that started it and ends with
// this process's job, so a Get that gives up never leaves a half-made entry
// behind. Refs owned by this process are left alone (Get reports them lost).
func (cw *coreWorker) prefetch(n int, ref func(int) (id, owner string)) {
	for owner, ids := range cw.objects.claim(n, ref, cw.addr) {
		for len(ids) > 0 {
			k := min(len(ids), fetchBatch)
			go cw.fetchFrom(owner, ids[:k:k])
			ids = ids[k:]
		}
	}
}

// fetchFrom asks owner for ids until each is ready there (value, location
// of a large object, or failure) and completes them in the table. An owner
// that cannot be reached has lost its objects (no lineage reconstruction).
func (cw *coreWorker) fetchFrom(owner string, ids []string) {
	for len(ids) > 0 {
		ctx, cancel := context.WithTimeout(cw.ctx, fetchPollMillis*time.Millisecond+30*time.Second)
		var rep wire.ObjectGetManyReply
		err := cw.pool.Call(ctx, owner, wire.MethodObjectGetMany, &wire.ObjectGetManyRequest{IDs: ids, WaitMillis: fetchPollMillis}, &rep)
		cancel()
		if err == nil && len(rep.Objects) != len(ids) {
			err = fmt.Errorf("owner answered %d objects for %d asked", len(rep.Objects), len(ids))
		}
		if err != nil {
			if cw.ctx.Err() != nil {
				return // job over: nobody waits any more
			}
			if ctx.Err() == nil && !rpc.IsTransport(err) {
				for _, id := range ids {
					cw.objects.complete(id, nil, fmt.Errorf("get %s from its owner %s: %w", id, owner, err))
				}
				return
			}
			for _, id := range ids {
				cw.objects.complete(id, nil, &OwnerDiedError{ObjectID: id, Owner: owner, Reason: err.Error()})
			}
			return
		}
		rest := ids[:0:0]
		for i, r := range rep.Objects {
			id := ids[i]
			switch {
			case r.NotReady:
				rest = append(rest, id)
			case r.Lost != "" && r.Freed:
				cw.objects.complete(id, nil, &ObjectFreedError{ObjectID: id, Owner: owner, Reason: r.Lost})
			case r.Lost != "":
				cw.objects.complete(id, nil, &ObjectLostError{ObjectID: id, Owner: owner, Reason: r.Lost})
			case r.Loc != nil && r.Error == nil:
				cw.objects.completeLoc(id, r.Loc)
			case r.Error != nil:
				cw.objects.complete(id, nil, taskErrorFrom(r.TaskName, r.Error))
			default:
				cw.objects.complete(id, r.Value, nil)
			}
		}
		ids = rest
	}
}

// handleObjectGetMany serves a borrower's batch get of objects this process
// owns: it waits up to WaitMillis for any of them to be ready, then answers
// every ready one (up to MaxBytes of values) and NotReady for the rest.
func (cw *coreWorker) handleObjectGetMany(ctx context.Context, req *wire.ObjectGetManyRequest) (*wire.ObjectGetManyReply, error) {
	id := func(i int) string { return req.IDs[i] }
	n := len(req.IDs)
	if req.WaitMillis > 0 && n > 0 {
		isReady := make([]bool, n)
		if count, missing := cw.objects.scan(n, id, isReady, 1); count == 0 && len(missing) == 0 {
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			ch := make(chan int, n)
			cw.objects.watch(all, id, ch)
			wctx, cancel := context.WithTimeout(ctx, time.Duration(req.WaitMillis)*time.Millisecond)
			select {
			case <-ch:
			case <-wctx.Done():
			}
			cancel()
			cw.objects.unwatch(all, id, ch)
		}
	}
	budget := req.MaxBytes
	if budget <= 0 {
		budget = getManyMaxBytes
	}
	rep := &wire.ObjectGetManyReply{Objects: make([]wire.ObjectGetReply, n)}
	sent := false
	for i, oid := range req.IDs {
		out := &rep.Objects[i]
		o := cw.objects.get(oid)
		switch {
		case o == nil:
			*out = cw.unknownReply(oid)
		case !o.ready() || (sent && int64(len(o.value)) > budget):
			out.NotReady = true
		default:
			*out = o.reply()
			budget -= int64(len(o.value))
			sent = true
		}
	}
	return rep, nil
}
