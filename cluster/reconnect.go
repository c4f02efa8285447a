package cluster

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/nodeup/nodeup/store"
)

// Gossip declares a member dead once its failure detector gives up, and
// memberlist then forgets it: after GossipToTheDeadTime (30 s) it sends it
// nothing more, so when a partition that lasted longer heals neither side
// talks to the other again. As Serf does for Consul and Nomad, every node
// keeps trying to join the members it saw fail (and the peers its data dir
// remembers but gossip has not shown yet) until ReconnectTimeout.

// reconnectTarget is a peer to try to join: a failed member, or a peer from
// peers.json that gossip has not shown yet.
type reconnectTarget struct {
	ID, Name, GossipAddr string
}

// reconnectTargets lists the failed members (dead, not left) that failed
// less than timeout ago and the remembered peers gossip has not shown (for
// timeout after they were remembered), and counts the live members, this
// node included.
func (m *membership) reconnectTargets(now time.Time, timeout time.Duration) (targets []reconnectTarget, alive int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	alive = 1 // this node (skipped below, whether or not memberlist reported it)
	for id, mem := range m.members {
		switch {
		case id == m.self.ID:
		case mem.Status == store.NodeDead && now.Sub(mem.Since) < timeout:
			targets = append(targets, reconnectTarget{ID: id, Name: mem.Name, GossipAddr: mem.GossipAddr})
		case mem.Status.Live():
			alive++
		}
	}
	for id, p := range m.seeds {
		if _, known := m.members[id]; known || now.Sub(p.since) >= timeout {
			delete(m.seeds, id)
			continue
		}
		targets = append(targets, reconnectTarget{ID: id, Name: p.Name, GossipAddr: p.Gossip})
	}
	return targets, alive
}

// remember adds peers (from the data dir) to try joining until gossip shows
// them or ReconnectTimeout after they failed (or, for peers alive when the
// file was written, after now); this node itself is skipped.
func (m *membership) remember(peers []peerRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for _, p := range peers {
		if p.ID == m.self.ID {
			continue
		}
		since := now
		if failed := time.Unix(p.FailedAt, 0); p.FailedAt > 0 && failed.Before(now) {
			since = failed // keep counting toward ReconnectTimeout across restarts
		}
		if _, known := m.members[p.ID]; !known {
			m.seeds[p.ID] = seed{peerRecord: p, since: since}
		}
	}
}

// seed is a remembered peer not yet seen in gossip.
type seed struct {
	peerRecord
	since time.Time
}

// reconnectLoop tries, every ReconnectInterval, to join one failed member
// chosen at random, as Serf's reconnect does. A round is skipped with
// probability 1 - failed/alive, so the cluster as a whole tries each failed
// member about once an interval however many nodes it has. A join that
// reaches the member merges both sides' state; memberlist's refutations
// then mark each side alive to the other.
func (n *Node) reconnectLoop(ctx context.Context) {
	newRetrier().run(ctx, n.cfg.ReconnectInterval, func(context.Context) { n.reconnectOnce() })
}

func (n *Node) reconnectOnce() {
	targets, alive := n.members.reconnectTargets(time.Now(), n.cfg.ReconnectTimeout)
	if len(targets) == 0 {
		return
	}
	if p := float64(len(targets)) / float64(alive); rand.Float64() > p {
		return
	}
	t := targets[rand.IntN(len(targets))]
	if _, err := n.ml.Join([]string{t.GossipAddr}); err != nil {
		n.logger.Debug("reconnect to failed member", "node", t.Name, "id", short(t.ID), "gossip", t.GossipAddr, "err", err)
		return
	}
	n.logger.Info("reconnected to failed member", "node", t.Name, "id", short(t.ID), "gossip", t.GossipAddr)
}
