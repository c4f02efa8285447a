package cluster

import (
	"context"
	"log/slog"
	"time"

	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// pgHost is all the placement-group manager asks of its node: the
// replicated state and Raft writes, calls to other nodes, tracked and
// leader-term goroutines, this node's own bundles, and ending actors.
// *Node implements it; pgmanager_test.go gives the manager a fake over a
// bare FSM, so its create and remove loops are tested without Raft,
// gossip or other nodes.
type pgHost interface {
	// State is the replicated state as this node's FSM holds it.
	State() *store.StateStore
	// apply commits a command through Raft and returns the FSM's result.
	apply(t store.MessageType, req any) (any, error)
	// callNode calls method on the node at addr.
	callNode(ctx context.Context, addr, method string, req, resp any) error
	// goFunc runs f as a goroutine the node tracks (false: stopping).
	goFunc(name string, f func()) bool
	// leaderGo runs f in the current leader term (false: not leading).
	leaderGo(name string, f func(ctx context.Context)) bool
	// leaderSince is when this node's current leader term began.
	leaderSince() time.Time
	// lifetime ends when the node stops.
	lifetime() context.Context
	log() *slog.Logger
	// selfID is this node's ID: its bundles are handled without a call.
	selfID() string
	// bundlesHere serves a bundle request (prepare, commit, return) on
	// this node, as its endpoint does for others.
	bundlesHere(method string, req *wire.BundlesRequest) (*wire.BundlesReply, error)
	// returnBundlesHere gives back this node's bundles of group (indexes
	// nil: all), revoking the leases in them.
	returnBundlesHere(group string, indexes []int)
	// endActor ends an actor (DEAD in Raft, its worker process exited).
	endActor(ctx context.Context, id, cause string) error
}

var _ pgHost = (*Node)(nil)

func (n *Node) leaderSince() time.Time { return n.leader.leaderSince() }

func (n *Node) selfID() string { return n.id.NodeID }

func (n *Node) bundlesHere(method string, req *wire.BundlesRequest) (*wire.BundlesReply, error) {
	return n.bundleCall(method, req)
}

func (n *Node) returnBundlesHere(group string, indexes []int) { n.returnBundles(group, indexes) }

func (n *Node) endActor(ctx context.Context, id, cause string) error {
	return n.actors.end(ctx, id, cause)
}
