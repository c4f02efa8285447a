package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// nodeTarget is one node a cluster-wide listing asks: its name and RPC
// address (what an error about it names) and whether it is this node.
type nodeTarget struct {
	name, addr string
	self       bool
}

// String is "name (addr)", as the Unreachable lists name a node.
func (t nodeTarget) String() string { return fmt.Sprintf("%s (%s)", t.name, t.addr) }

// aliveTargets is every node alive in clusterView, in its order; this
// node is the one with this node's ID.
func (n *Node) aliveTargets() []nodeTarget {
	var out []nodeTarget
	for _, nd := range n.clusterView() {
		if nd.Alive {
			out = append(out, nodeTarget{name: nd.NodeName, addr: nd.Addr, self: nd.NodeID == n.id.NodeID})
		}
	}
	return out
}

// liveMemberTargets is every gossip member whose status is live, in
// snapshot order (by ID); this node is the one with this node's RPC
// address.
func (n *Node) liveMemberTargets() []nodeTarget {
	var out []nodeTarget
	for _, m := range n.members.snapshot() {
		if m.Status.Live() {
			out = append(out, nodeTarget{name: m.Name, addr: m.RPCAddr, self: m.RPCAddr == n.rpcAddr})
		}
	}
	return out
}

// askNodes asks every target at once, one goroutine each: this node
// (self) through local, without a network call and without a deadline of
// its own; every other through remote with its address, under ctx bounded
// by timeout. It hands each target's answer, or its error, to merge: one
// call at a time (merge needs no lock of its own), in the order the
// answers come, so that an answer can be dropped once merged. It returns
// once every target has been merged; the caller orders what it merged.
func askNodes[R any](ctx context.Context, targets []nodeTarget, timeout time.Duration,
	local func() (R, error), remote func(ctx context.Context, addr string) (R, error),
	merge func(t nodeTarget, r R, err error)) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r R
			var err error
			if t.self {
				r, err = local()
			} else {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				r, err = remote(cctx, t.addr)
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			merge(t, r, err)
		}()
	}
	wg.Wait()
}

// remoteCall is a remote for askNodes: method with req through call (the
// node's pool.Call or callNode), its answer decoded into a new Resp.
func remoteCall[Resp any](call func(ctx context.Context, addr, method string, req, resp any) error, method string, req any) func(context.Context, string) (*Resp, error) {
	return func(ctx context.Context, addr string) (*Resp, error) {
		resp := new(Resp)
		if err := call(ctx, addr, method, req, resp); err != nil {
			return nil, err
		}
		return resp, nil
	}
}
