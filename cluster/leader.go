package cluster

import (
	"context"
	"maps"
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
	term    *goGroup // this term's goroutines; nil when not leading
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

// clear drops the soft state a term gathered, once it ended.
func (l *leaderState) clear() {
	l.mu.Lock()
	l.soft, l.leaving = nil, nil
	l.mu.Unlock()
}

// prune forgets the soft state of nodes live does not call live (dead,
// left, or gone from the table): a node that comes back registers afresh.
func (l *leaderState) prune(live map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps.DeleteFunc(l.soft, func(id string, _ softState) bool { return !live[id] })
	maps.DeleteFunc(l.leaving, func(id string, _ uint64) bool { return !live[id] })
}

func (l *leaderState) setTerm(g *goGroup) {
	l.mu.Lock()
	l.term = g
	l.mu.Unlock()
}

func (l *leaderState) currentTerm() *goGroup {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term
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

// leaderStopBound is how long revokeLeadership waits for the leader's
// goroutines to return before it logs the ones still running and goes on.
const leaderStopBound = 10 * time.Second

// monitorLeadership establishes leadership when Raft makes this node leader
// and revokes it when Raft takes it away or the node stops (as Nomad's
// monitorLeadership).
func (n *Node) monitorLeadership() {
	var term *goGroup
	for {
		select {
		case isLeader := <-n.leaderCh:
			switch {
			case isLeader && term == nil:
				term = n.establishLeadership()
			case !isLeader && term != nil:
				n.revokeLeadership(term)
				term = nil
			}
		case <-n.ctx.Done():
			if term != nil {
				n.revokeLeadership(term)
			}
			return
		}
	}
}

// establishLeadership starts one term of leadership: fresh leader state,
// and in the term's goroutine group (leaderGo) every leader-only loop, once
// a barrier shows the FSM holds every committed entry: the cluster's
// identity and the head's first join token, autopilot, the reconcile loop, and the retry loops that pick
// up actors' and placement groups' pending work. revokeLeadership ends it.
func (n *Node) establishLeadership() *goGroup {
	n.logger.Info("became cluster leader")
	n.leader.reset()
	term := newGoGroup(n.ctx, n.logger.With("goroutines", "leader"))
	n.leader.setTerm(term)
	// The placement-group queues and loops serve from the term's start:
	// a create forwarded here the moment Raft elects this node waits for
	// them (pgTermWait), not for the barrier.
	n.pgs.lead(term.ctx, term.goCtx)
	term.goCtx("leader-establish", func(ctx context.Context) {
		if !n.leaderBarrier(ctx) || ctx.Err() != nil {
			return // the term ended first
		}
		n.establishCluster()
		n.ensureInitialToken()
		n.pilot.Start(ctx)
		term.goCtx("leader-reconcile", n.reconcileLoop)
		term.goCtx("actor-retry", n.actors.run)
		term.goCtx("pg-retry", n.pgs.run)
		term.goCtx("job-reap", n.reapJobs)
	})
	return term
}

// revokeLeadership ends a term that establishLeadership started: it stops
// the term's goroutines and autopilot, waiting for them (leaderStopBound at
// most for the goroutines), and drops the state only a leader keeps.
func (n *Node) revokeLeadership(term *goGroup) {
	n.leader.setTerm(nil)
	n.pgs.endTerm()
	term.stop(leaderStopBound)
	<-n.pilot.Stop()
	n.leader.clear()
	n.pilotDelegate.forgetStats()
	n.pgs.revoke()
	n.logger.Info("no longer cluster leader")
}

// leaderBarrier waits until the FSM reflects every entry committed before
// this term, retrying a failed barrier every second; false when ctx ended
// first.
func (n *Node) leaderBarrier(ctx context.Context) bool {
	for ctx.Err() == nil {
		err := n.raft.Barrier(applyTimeout).Error()
		if err == nil {
			return true
		}
		n.logger.Warn("leader barrier failed", "err", err)
		sleepCtx(ctx, time.Second)
	}
	return false
}

// reconcileLoop runs reconcile every ReconcileInterval and at every gossip
// change until ctx (the term) ends.
func (n *Node) reconcileLoop(ctx context.Context) {
	n.members.changed.run(ctx, n.cfg.ReconcileInterval, func(context.Context) { n.reconcile() })
}

// leaderGo runs f in the current term's goroutine group, its ctx ending
// with the term; false (f not run) when this node does not lead.
func (n *Node) leaderGo(name string, f func(ctx context.Context)) bool {
	term := n.leader.currentTerm()
	return term != nil && term.goCtx(name, f)
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
	live := map[string]bool{}
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
		live[nd.ID] = want.Live()
	}
	n.leader.prune(live)
	n.pgs.prune(live)
	n.demoteUnwritableVoters()
	n.growRaft(members)
	n.actors.checkNodes()
	n.pgs.checkNodes()
	n.checkDrains()
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
