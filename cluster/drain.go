package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// Node drain and eligibility (issue 19), as Nomad's `node drain` and `node
// eligibility`. The flags live in the Raft node table (store.Node's
// Ineligible, Draining, DrainDeadline), set only through the FSM; the
// scheduling policy reads them from the views it is given (snapshotOf, the
// placement-group view); the leader's reconcile moves what a draining node
// still runs (checkDrains).

func (n *Node) drainEndpoints() {
	handleLeader(n, wire.MethodNodeDrain, n.nodeDrain)
	handleLeader(n, wire.MethodNodeEligibility, n.nodeEligibility)
	rpc.Handle(n.rpcServer, wire.MethodNodeDrainStop, func(ctx context.Context, _ *wire.Empty) (*wire.NodeDrainStopReply, error) {
		stopped := n.workers.stopTaskWorkers()
		n.logger.Warn("drain deadline passed: stopped the task workers here", "workers", stopped)
		return &wire.NodeDrainStopReply{Stopped: stopped}, nil
	})
}

// drainMoves is the set of actors whose drain move runs now, so a reconcile
// does not start a second one.
type drainMoves struct {
	mu  sync.Mutex
	ids map[string]bool
}

// start marks id moving; false when it already is.
func (d *drainMoves) start(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ids == nil {
		d.ids = map[string]bool{}
	}
	if d.ids[id] {
		return false
	}
	d.ids[id] = true
	return true
}

func (d *drainMoves) done(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.ids, id)
}

// resolveNode finds the node named by ID or unique name in the Raft table.
func (n *Node) resolveNode(name string) (*store.Node, error) {
	st := n.fsm.State()
	if nd, err := st.NodeByID(name); err != nil || nd != nil {
		return nd, err
	}
	nodes, err := st.NodesByName(name)
	if err != nil {
		return nil, err
	}
	switch len(nodes) {
	case 0:
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("no node with ID or name %q (see nodeup nodes)", name)}
	case 1:
		return nodes[0], nil
	}
	ids := make([]string, len(nodes))
	for i, nd := range nodes {
		ids[i] = nd.ID
	}
	return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("%d nodes are named %q (%s); name one by ID", len(nodes), name, strings.Join(ids, ", "))}
}

func (n *Node) setEligibility(req *store.NodeEligibilityRequest) (*wire.Node, error) {
	if _, err := n.apply(store.NodeEligibilityType, req); err != nil {
		return nil, err
	}
	nd, err := n.fsm.State().NodeByID(req.NodeID)
	if err != nil || nd == nil {
		return nil, fmt.Errorf("read node %s after the change: %v", req.NodeID, err)
	}
	return nd, nil
}

func (n *Node) nodeDrain(ctx context.Context, req *wire.NodeDrainRequest) (*wire.Node, error) {
	if req.DeadlineNanos < 0 {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("drain deadline %s: must not be negative (0: none)", time.Duration(req.DeadlineNanos))}
	}
	nd, err := n.resolveNode(req.Node)
	if err != nil {
		return nil, err
	}
	var deadline int64
	if req.DeadlineNanos > 0 {
		deadline = time.Now().Add(time.Duration(req.DeadlineNanos)).UnixNano()
	}
	out, err := n.setEligibility(&store.NodeEligibilityRequest{NodeID: nd.ID, Drain: true, DrainDeadline: deadline})
	if err != nil {
		return nil, err
	}
	n.logger.Info("node draining", "peer_node", nd.Name, "id", short(nd.ID), "deadline", time.Duration(req.DeadlineNanos))
	n.leaderGo("drain", func(context.Context) { n.checkDrains() })
	return out, nil
}

func (n *Node) nodeEligibility(ctx context.Context, req *wire.NodeEligibilityRequest) (*wire.Node, error) {
	nd, err := n.resolveNode(req.Node)
	if err != nil {
		return nil, err
	}
	out, err := n.setEligibility(&store.NodeEligibilityRequest{NodeID: nd.ID, Eligible: req.Eligible})
	if err != nil {
		return nil, err
	}
	n.logger.Info("node scheduling eligibility", "peer_node", nd.Name, "id", short(nd.ID), "eligible", req.Eligible)
	return out, nil
}

// checkDrains, on the leader at every reconcile, moves what draining nodes
// still hold: their placement-group bundles are unplaced (the group
// reschedules them on eligible nodes, and the node releases them at its
// next heartbeat); their ALIVE actors with restarts left are stopped and
// restart elsewhere (Ray's max_restarts); once a node's deadline has
// passed, its other actors are ended and its task workers stopped (their
// owners retry the tasks elsewhere). Each step is idempotent, so a new
// leader picks a drain up where the last one left it.
func (n *Node) checkDrains() {
	st := n.fsm.State()
	nodes, err := st.Nodes()
	if err != nil {
		return
	}
	now := time.Now()
	for _, nd := range nodes {
		if !nd.Draining || !nd.Status.Live() {
			continue
		}
		past := nd.DrainDeadline != 0 && now.UnixNano() >= nd.DrainDeadline
		n.drainBundles(st, nd, now)
		n.drainActors(st, nd, past)
		if past {
			n.drainStopTasks(nd)
		}
	}
}

// drainStopTasks has a node past its drain deadline stop its task workers,
// once per drain (keyed by node and deadline) while this leader lives.
func (n *Node) drainStopTasks(nd *store.Node) {
	key := fmt.Sprintf("tasks/%s/%d", nd.ID, nd.DrainDeadline)
	if !n.drainMoving.start(key) {
		return
	}
	ok := n.leaderGo("drain-stop-tasks", func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, actorStopTimeout)
		defer cancel()
		var rep wire.NodeDrainStopReply
		if err := n.pool.Call(ctx, nd.Address, wire.MethodNodeDrainStop, &wire.Empty{}, &rep); err != nil {
			n.logger.Warn("drain: stop the task workers of a node past its deadline", "peer_node", nd.Name, "err", err)
			n.drainMoving.done(key) // the next reconcile tries again
			return
		}
		n.logger.Info("drain deadline passed: task workers stopped", "peer_node", nd.Name, "workers", rep.Stopped)
	})
	if !ok {
		n.drainMoving.done(key)
	}
}

func (n *Node) drainBundles(st *store.StateStore, nd *store.Node, now time.Time) {
	groups, err := st.LivePlacementGroups()
	if err != nil {
		return
	}
	moved := false
	for _, g := range groups {
		if g.State != store.PGCreated && g.State != store.PGRescheduling {
			continue
		}
		for _, id := range g.Nodes {
			if id != nd.ID {
				continue
			}
			if err := n.pgs.write(store.PlacementGroupOp{Kind: store.PGOpLose, ID: g.ID, Nodes: []string{nd.ID}, At: now.UnixNano()}); err != nil {
				n.logger.Warn("drain: move a placement group's bundles", "group", g.ID, "peer_node", nd.Name, "err", err)
			} else {
				n.logger.Info("drain: moving placement group bundles off the node", "group", g.ID, "peer_node", nd.Name)
				moved = true
			}
			break
		}
	}
	if moved {
		n.pgs.wake()
	}
}

func (n *Node) drainActors(st *store.StateStore, nd *store.Node, pastDeadline bool) {
	actors, err := st.LiveActors()
	if err != nil {
		return
	}
	for _, a := range actors {
		if a.State != store.ActorAlive || a.NodeID != nd.ID {
			continue
		}
		restartable := a.MaxRestarts < 0 || a.Restarts < a.MaxRestarts
		if !restartable && !pastDeadline {
			continue
		}
		if !n.drainMoving.start(a.ID) {
			continue
		}
		a := a
		ok := n.leaderGo("drain-actor", func(ctx context.Context) {
			defer n.drainMoving.done(a.ID)
			ctx, cancel := context.WithTimeout(ctx, actorStopTimeout)
			defer cancel()
			if !restartable {
				cause := fmt.Sprintf("its node %s was drained and the drain deadline passed", nd.Name)
				if err := n.actors.end(ctx, a.ID, cause); err != nil {
					n.logger.Warn("drain: stop an actor at the deadline", "actor", a.ID, "err", err)
				}
				return
			}
			// Stopped first, then restarted, so two incarnations never run
			// at once; the node's own death report races this one and
			// whichever comes first restarts it.
			if err := n.pool.Call(ctx, a.NodeAddr, wire.MethodActorStop, &wire.ActorStopRequest{ActorID: a.ID}, nil); err != nil {
				n.logger.Warn("drain: stop an actor to move it", "actor", a.ID, "peer_node", nd.Name, "err", err)
				return
			}
			if err := n.actors.diedCtx(ctx, a.ID, a.Restarts, fmt.Sprintf("its node %s is draining", nd.Name)); err != nil {
				n.logger.Warn("drain: restart an actor elsewhere", "actor", a.ID, "err", err)
			}
		})
		if !ok {
			n.drainMoving.done(a.ID)
		}
	}
}

// drainingReason is /v1/health's reason while the leader's last view
// (the heartbeat's) shows this node draining, "" otherwise.
func (n *Node) drainingReason() string {
	v, _ := n.view.Load().([]wire.NodeInfo)
	if self := nodeInView(v, n.id.NodeID); self != nil && self.Draining {
		return "draining: this node is being drained (nodeup node drain); it takes no new work until 'nodeup node eligibility --enable'"
	}
	return ""
}
