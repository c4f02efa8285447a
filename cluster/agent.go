package cluster

import (
	"context"
	"time"

	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// agentLoop registers this node in the Raft node table and then reports its
// soft state to the leader every HeartbeatInterval, registering again when
// the leader does not know its current incarnation.
func (n *Node) agentLoop() {
	registered := false
	tick := time.NewTicker(n.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		n.live.beat()
		ctx, cancel := context.WithTimeout(n.ctx, forwardTimeout)
		if !registered {
			err := n.forward(ctx, wire.MethodNodeRegister, &wire.NodeRegisterRequest{Node: n.record()}, nil)
			if err == nil {
				registered = true
				n.live.markRegistered()
				n.logger.Info("registered with the cluster leader")
			} else if n.ctx.Err() == nil {
				n.logger.Warn("register with leader", "err", err)
			}
		}
		if registered {
			for _, b := range n.local.expirePrepared(prepareTimeout) {
				n.logger.Warn("released a prepared bundle never committed", "bundle", b, "after", prepareTimeout)
			}
			var resp wire.HeartbeatResponse
			err := n.forward(ctx, wire.MethodNodeHeartbeat, &wire.HeartbeatRequest{NodeID: n.id.NodeID, Incarnation: n.id.Incarnation,
				Available: n.local.available(), Pending: n.local.queued(), GPUs: n.heartbeatGPUs(), Bundles: n.local.heldBundles(),
				Actors: n.workers.heldActors()}, &resp)
			if err == nil && resp.View != nil {
				n.view.Store(resp.View)
				n.spills.reset()
				n.viewUpdates.publish()
			}
			if err == nil && !resp.Known {
				registered = false
				cancel()
				continue
			}
			if err == nil && resp.LeaderAddr != "" {
				n.leaderHint.Store(resp.LeaderAddr)
			}
			if err == nil {
				for _, s := range resp.StaleActors {
					n.logger.Warn("stopping an actor the cluster has moved past", "actor", s.ID, "incarnation", s.Incarnation, "reason", s.Reason)
					n.group.goFunc("stop-stale-actor", func() { n.workers.stopStale(s) })
				}
			}
		}
		cancel()
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// record is this node's entry for the Raft node table.
func (n *Node) record() store.Node {
	_, labels := n.settings.get()
	return store.Node{
		ID: n.id.NodeID, Name: n.cfg.NodeName, Address: n.rpcAddr, GossipAddress: n.ml.LocalNode().Address(),
		HTTPAddress: n.httpAddr, Server: n.cfg.Server, Resources: n.Resources(), Labels: labels,
		Status: store.NodeAlive, Incarnation: n.id.Incarnation, Version: n.cfg.Version,
	}
}
