package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// unseenGrace is how long a new leader waits before it marks dead a node
// that the table calls alive but gossip has never shown it: long enough for
// gossip to converge after the leader itself restarted.
const unseenGrace = 15 * time.Second

// leaderState is what only the leader keeps: each node's soft state, in
// memory (as Ray's GCS keeps resource reports out of its tables).
type leaderState struct {
	mu      sync.Mutex
	since   time.Time
	soft    map[string]softState
	leaving map[string]uint64 // node ID -> incarnation that left Raft (leave.go)
}

type softState struct {
	incarnation uint64
	available   sched.ResourceSet
	pending     []wire.PendingDemand
	gpus        *gpu.Status // last reported GPU status (gpus.go)
	at          time.Time
}

func (l *leaderState) reset() {
	l.mu.Lock()
	l.since = time.Now()
	l.soft = map[string]softState{}
	l.leaving = map[string]uint64{}
	l.mu.Unlock()
}

// markLeaving records that incarnation inc of node id left Raft on its way
// out, so growRaft does not add it back while gossip still shows it alive.
func (l *leaderState) markLeaving(id string, inc uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leaving == nil {
		l.leaving = map[string]uint64{}
	}
	l.leaving[id] = inc
}

// isLeaving reports whether incarnation inc of node id left Raft.
func (l *leaderState) isLeaving(id string, inc uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	left, ok := l.leaving[id]
	return ok && left == inc
}

// setSoft replaces node id's soft state with s (a copy of its available
// set, stamped now): a heartbeat's report, or an empty one at registration.
func (l *leaderState) setSoft(id string, s softState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.soft == nil {
		l.soft = map[string]softState{}
	}
	s.available, s.at = s.available.Clone(), time.Now()
	l.soft[id] = s
}

// pendingOf returns a node's last reported waiting demand.
func (l *leaderState) pendingOf(id string) []wire.PendingDemand {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.soft[id].pending
}

// available returns a node's last reported free resources (its totals when it
// has not reported since this leader took over) and the report's time.
func (l *leaderState) available(nd *store.Node) (sched.ResourceSet, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.soft[nd.ID]
	if !ok || s.available == nil || s.incarnation != nd.Incarnation {
		return nd.Resources.Clone(), 0
	}
	return s.available.Clone(), s.at.UnixNano()
}

func (l *leaderState) leaderSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since
}

// monitorLeadership runs the leader loop while this node leads (as Nomad's
// monitorLeadership).
func (n *Node) monitorLeadership() {
	var stop context.CancelFunc
	var done chan struct{}
	for {
		select {
		case isLeader := <-n.leaderCh:
			switch {
			case isLeader && stop == nil:
				var ctx context.Context
				ctx, stop = context.WithCancel(n.ctx)
				done = make(chan struct{})
				go func() {
					defer close(done)
					n.leaderLoop(ctx)
				}()
			case !isLeader && stop != nil:
				stop()
				<-done
				stop = nil
			}
		case <-n.ctx.Done():
			if stop != nil {
				stop()
				<-done
			}
			return
		}
	}
}

func (n *Node) leaderLoop(ctx context.Context) {
	n.logger.Info("became cluster leader")
	defer n.logger.Info("no longer cluster leader")
	n.leader.reset()
	// A barrier makes the FSM reflect every committed entry before we act on it.
	if err := n.raft.Barrier(applyTimeout).Error(); err != nil {
		n.logger.Warn("leader barrier failed", "err", err)
		return
	}
	n.establishCluster()
	n.actors.resume()
	n.pgs.resume(ctx)
	n.pilot.Start(ctx)
	defer func() { <-n.pilot.Stop() }()
	tick := time.NewTicker(n.cfg.ReconcileInterval)
	defer tick.Stop()
	for {
		n.reconcile()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-n.members.changed:
		}
	}
}

// establishCluster records the cluster's identity the first time a leader exists.
func (n *Node) establishCluster() {
	meta, err := n.fsm.State().ClusterMeta()
	if err != nil || meta != nil {
		return
	}
	_, err = n.apply(store.ClusterInitType, &store.ClusterInitRequest{Meta: store.ClusterMeta{
		ID: n.id.ClusterID, Name: n.id.ClusterName, CreatedAt: time.Now().UnixNano()}})
	if err != nil {
		n.logger.Warn("record cluster identity", "err", err)
	}
}

// reconcile brings the Raft node table in line with gossip (gossip informs,
// Raft decides) and grows the Raft group toward the target voter count.
func (n *Node) reconcile() {
	nodes, err := n.fsm.State().Nodes()
	if err != nil {
		n.logger.Warn("reconcile: read nodes", "err", err)
		return
	}
	members := n.members.snapshot()
	seen := map[string]member{}
	for _, m := range members {
		seen[m.ID] = m
	}
	now := time.Now()
	for _, nd := range nodes {
		want := nd.Status
		if m, ok := seen[nd.ID]; ok {
			// Gossip about an older incarnation must not overrule a fresh registration.
			if m.Incarnation >= nd.Incarnation {
				want = m.Status
			}
		} else if nd.Status.Live() && now.Sub(n.leader.leaderSince()) > unseenGrace {
			want = store.NodeDead
		}
		if want != nd.Status {
			n.logger.Info("node status change", "node", nd.Name, "id", short(nd.ID), "from", nd.Status, "to", want)
			if _, err := n.apply(store.NodeStatusType, &store.NodeStatusRequest{NodeID: nd.ID, Status: want, At: now.UnixNano()}); err != nil {
				n.logger.Warn("reconcile: apply node status", "node", nd.ID, "err", err)
			}
		}
	}
	n.demoteUnwritableVoters()
	n.growRaft(members)
	n.actors.checkNodes()
	n.pgs.checkNodes()
}

// growRaft adds live server-eligible members to Raft (as non-voters that
// autopilot promotes once stable) until the group has RaftVoters servers.
// Dead servers are removed by autopilot, after which this refills the group.
func (n *Node) growRaft(members []member) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	inRaft := map[string]bool{}
	for _, s := range f.Configuration().Servers {
		inRaft[string(s.ID)] = true
	}
	count := len(inRaft)
	for _, m := range members {
		if count >= n.cfg.RaftVoters {
			return
		}
		if !m.Server || inRaft[m.ID] || m.Status != store.NodeAlive || m.Leaving || n.leader.isLeaving(m.ID, m.Incarnation) {
			continue
		}
		n.logger.Info("adding Raft server", "node", m.Name, "id", short(m.ID), "addr", m.RPCAddr)
		err := n.pilot.AddServer(&autopilot.Server{ID: raft.ServerID(m.ID), Name: m.Name,
			Address: raft.ServerAddress(m.RPCAddr), NodeStatus: autopilot.NodeAlive, Version: m.Version, RaftVersion: 3})
		if err != nil {
			n.logger.Warn("add Raft server", "node", m.Name, "err", err)
			return
		}
		count++
	}
}
