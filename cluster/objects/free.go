package objects

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// maxHoldersPerObject bounds the nodes remembered as holding a secondary
// copy of one object: a peer naming made-up pullers costs at most this.
const maxHoldersPerObject = 1024

// copyHolders is the node's record, for Obj.Free, of which nodes pulled a
// secondary copy of its objects (learnt from their Obj.Read of a first
// chunk), and of its own pulls in flight, which a free must not delete
// under (their chunks are still being written into the space).
type copyHolders struct {
	mu      sync.Mutex
	holders map[string][]string // object key → pullers' RPC addresses
	pulling map[string]bool     // object key → freed while pulling
}

// note records that puller reads key from this node. Entries of objects no
// longer in the store are dropped now and then, so the map stays within
// about twice the store's object count.
func (c *copyHolders) note(store *objstore.Store, key, puller string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holders == nil {
		c.holders = map[string][]string{}
	}
	h := c.holders[key]
	if slices.Contains(h, puller) || len(h) >= maxHoldersPerObject {
		return
	}
	c.holders[key] = append(h, puller)
	if len(c.holders) > 2*store.Len()+256 {
		for k := range c.holders {
			if _, ok := store.Locate(k); !ok {
				delete(c.holders, k)
			}
		}
	}
}

// take forgets and returns the nodes that pulled key.
func (c *copyHolders) take(key string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.holders[key]
	delete(c.holders, key)
	return h
}

// startPull marks a pull of key in flight.
func (c *copyHolders) startPull(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pulling == nil {
		c.pulling = map[string]bool{}
	}
	c.pulling[key] = false
}

// endPull ends a pull of key and reports whether key was freed meanwhile
// (then the puller drops its copy).
func (c *copyHolders) endPull(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	freed := c.pulling[key]
	delete(c.pulling, key)
	return freed
}

// freeWhilePulling marks key freed if a pull of it is in flight, and
// reports whether it was (the pull then deletes it when it ends).
func (c *copyHolders) freeWhilePulling(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pulling[key]; ok {
		c.pulling[key] = true
		return true
	}
	return false
}

// Free deletes the named objects from this node's store, in memory and
// spilled (Obj.Free; absent ones are skipped: frees are idempotent) and,
// for a request from an owner, passes it on to the nodes that pulled a
// secondary copy, in the background; only nodes in this node's view are
// called. More than wire.MaxFreeKeys keys is bad_input naming the limit.
func (o *Service) Free(ctx context.Context, r *wire.ObjectFreeRequest) (*wire.Empty, error) {
	if len(r.Keys) > wire.MaxFreeKeys {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("free of %d objects: at most %d per request", len(r.Keys), wire.MaxFreeKeys)}
	}
	var byHolder map[string][]string
	freed := 0
	for _, key := range r.Keys {
		o.spill.forget(key)
		if !o.copies.freeWhilePulling(key) && o.store.Delete(key) == nil {
			freed++
		}
		if r.FromNode {
			continue
		}
		for _, h := range o.copies.take(key) {
			if byHolder == nil {
				byHolder = map[string][]string{}
			}
			byHolder[h] = append(byHolder[h], key)
		}
	}
	if freed > 0 {
		o.log.Debug("freed objects", "asked", len(r.Keys), "freed", freed, "from_node", r.FromNode)
	}
	if len(byHolder) == 0 {
		return &wire.Empty{}, nil
	}
	peers := o.host.PeerAddrs()
	for addr, keys := range byHolder {
		if addr == o.selfAddr || !slices.Contains(peers, addr) {
			continue // gone (its store with it), or not a node of this cluster
		}
		o.host.Go("object-free-forward", func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := o.host.Call(ctx, addr, wire.MethodObjectFree, &wire.ObjectFreeRequest{Keys: keys, FromNode: true}, nil); err != nil {
				o.log.Debug("pass a free on to a node holding copies", "node", addr, "objects", len(keys), "err", err)
			}
		})
	}
	return &wire.Empty{}, nil
}
