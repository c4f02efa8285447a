package cluster

import (
	"context"

	"github.com/nodeup/nodeup/cluster/observe"
	"github.com/nodeup/nodeup/internal/fanout"
)

// aliveTargets is every node alive in clusterView, in its order; this
// node is the one with this node's ID.
func (n *Node) aliveTargets() []fanout.Target {
	var out []fanout.Target
	for _, nd := range n.clusterView() {
		if nd.Alive {
			out = append(out, fanout.Target{Name: nd.NodeName, Addr: nd.Addr, Self: nd.NodeID == n.id.NodeID})
		}
	}
	return out
}

// liveMemberTargets is every gossip member whose status is live, in
// snapshot order (by ID); this node is the one with this node's RPC
// address.
func (n *Node) liveMemberTargets() []fanout.Target {
	var out []fanout.Target
	for _, m := range n.members.snapshot() {
		if m.Status.Live() {
			out = append(out, fanout.Target{Name: m.Name, Addr: m.RPCAddr, Self: m.RPCAddr == n.rpcAddr})
		}
	}
	return out
}

// observeHost is what the observability subsystem asks of the node.
type observeHost struct{ n *Node }

var _ observe.Host = observeHost{}

func (h observeHost) AliveTargets() []fanout.Target { return h.n.aliveTargets() }

func (h observeHost) Call(ctx context.Context, addr, method string, req, resp any) error {
	return h.n.pool.Call(ctx, addr, method, req, resp)
}
