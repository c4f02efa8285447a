// Package fanout asks every node of a list at once and merges their
// answers: the cluster-wide listings of the daemon (task events, worker
// processes, logs), in the root package and in its subsystems alike. It
// imports nothing of nodeup.
package fanout

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Target is one node a cluster-wide listing asks: its name and RPC
// address (what an error about it names) and whether it is this node.
type Target struct {
	Name, Addr string
	Self       bool
}

// String is "name (addr)", as the Unreachable lists name a node.
func (t Target) String() string { return fmt.Sprintf("%s (%s)", t.Name, t.Addr) }

// Ask asks every target at once, one goroutine each: this node
// (self) through local, without a network call and without a deadline of
// its own; every other through remote with its address, under ctx bounded
// by timeout. It hands each target's answer, or its error, to merge: one
// call at a time (merge needs no lock of its own), in the order the
// answers come, so that an answer can be dropped once merged. It returns
// once every target has been merged; the caller orders what it merged.
func Ask[R any](ctx context.Context, targets []Target, timeout time.Duration,
	local func() (R, error), remote func(ctx context.Context, addr string) (R, error),
	merge func(t Target, r R, err error)) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r R
			var err error
			if t.Self {
				r, err = local()
			} else {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				r, err = remote(cctx, t.Addr)
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			merge(t, r, err)
		}()
	}
	wg.Wait()
}

// RemoteCall is a remote for Ask: method with req through call (the
// node's pool.Call or callNode), its answer decoded into a new Resp.
func RemoteCall[Resp any](call func(ctx context.Context, addr, method string, req, resp any) error, method string, req any) func(context.Context, string) (*Resp, error) {
	return func(ctx context.Context, addr string) (*Resp, error) {
		resp := new(Resp)
		if err := call(ctx, addr, method, req, resp); err != nil {
			return nil, err
		}
		return resp, nil
	}
}
