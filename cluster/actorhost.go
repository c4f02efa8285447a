package cluster

import (
	"context"
	"log/slog"

	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// actorHost is all the actor manager asks of its node: the replicated state
// and Raft writes, calls to other nodes, the leader's term, and what
// placement sees. *Node implements it; unit tests give the manager a fake
// over a bare FSM (actorhost_test.go), so its transitions are tested
// without Raft, gossip or worker processes. The other managers can follow
// the same pattern.
type actorHost interface {
	// State is the replicated state as this node's FSM holds it.
	State() *store.StateStore
	// apply commits a command through Raft and returns the FSM's result;
	// an FSM error comes back as an *rpc.Error wrapping it.
	apply(t store.MessageType, req any) (any, error)
	// callNode calls method on the node at addr.
	callNode(ctx context.Context, addr, method string, req, resp any) error
	// leaderGo runs f in the current leader term (false: not leading).
	leaderGo(name string, f func(ctx context.Context)) bool
	// lifetime ends when the node stops.
	lifetime() context.Context
	log() *slog.Logger
	// actorPlacementView is the cluster as actor placement sees it now.
	actorPlacementView() []wire.NodeInfo
	// bundleNodes returns the nodes holding a placement group's bundles
	// (index -1: any), or why there are none and whether the group is gone.
	bundleNodes(ctx context.Context, pg string, index int) ([]wire.PGBundle, string, bool)
}

var _ actorHost = (*Node)(nil)

func (n *Node) callNode(ctx context.Context, addr, method string, req, resp any) error {
	return n.pool.Call(ctx, addr, method, req, resp)
}

func (n *Node) lifetime() context.Context { return n.ctx }

func (n *Node) log() *slog.Logger { return n.logger }

// actorPlacementView is the leader's table as it is now (not the view its last
// heartbeat brought, which can be one heartbeat old), with nodes that gossip
// shows suspect, dead or left in their current incarnation marked not alive:
// an actor restarted because its node died must not go back there.
func (n *Node) actorPlacementView() []wire.NodeInfo {
	view, err := n.tableView()
	if err != nil {
		n.logger.Warn("actor placement: read the node table", "err", err)
		return nil
	}
	gossip := map[string]member{}
	for _, mem := range n.members.snapshot() {
		gossip[mem.ID] = mem
	}
	for i := range view {
		nd := &view[i]
		if nd.NodeID == n.id.NodeID {
			nd.Available = n.local.available()
			continue
		}
		if mem, ok := gossip[nd.NodeID]; ok && mem.Status != store.NodeAlive {
			nd.Alive = false
		}
	}
	return view
}
