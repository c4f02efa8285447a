package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// pilotDelegate connects raft-autopilot (the library Consul and Nomad use for
// server promotion and dead-server cleanup) to nodeup's gossip view.
type pilotDelegate struct {
	n           *Node
	mu          sync.Mutex
	state       *autopilot.State
	diskFailing map[raft.ServerID]string // servers whose stats report a DiskWriteError
}

// AutopilotConfig implements autopilot.ApplicationIntegration. The
// thresholds are looser than Consul's LAN defaults so a loaded 2-core
// machine does not flap servers between healthy and not.
func (d *pilotDelegate) AutopilotConfig() *autopilot.Config {
	return &autopilot.Config{
		CleanupDeadServers:      true,
		LastContactThreshold:    2 * time.Second,
		MaxTrailingLogs:         500,
		MinQuorum:               0,
		ServerStabilizationTime: 2 * time.Second,
	}
}

// NotifyState implements autopilot.ApplicationIntegration.
func (d *pilotDelegate) NotifyState(s *autopilot.State) {
	d.mu.Lock()
	d.state = s
	d.mu.Unlock()
}

// FetchServerStats implements autopilot.ApplicationIntegration by asking each
// live server over RPC. A server that reports a disk write failure gets a
// LastContact of -1, which autopilot counts as unhealthy (so it is never
// promoted), and is remembered for demoteUnwritableVoters until a round of
// stats no longer reports it.
func (d *pilotDelegate) FetchServerStats(ctx context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	out := map[raft.ServerID]*autopilot.ServerStats{}
	failing := map[raft.ServerID]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, srv := range servers {
		if srv.NodeStatus != autopilot.NodeAlive {
			continue
		}
		wg.Add(1)
		go func(id raft.ServerID, addr string) {
			defer wg.Done()
			var s *wire.RaftStats
			if string(id) == d.n.id.NodeID {
				s, _ = d.n.raftStats(ctx, &wire.Empty{})
			} else {
				var rs wire.RaftStats
				if d.n.pool.Call(ctx, addr, wire.MethodRaftStats, &wire.Empty{}, &rs) == nil {
					s = &rs
				}
			}
			if s == nil {
				return
			}
			mu.Lock()
			if s.DiskError != "" {
				failing[id], s.LastContactNanos = s.DiskError, -1
			}
			out[id] = &autopilot.ServerStats{LastContact: time.Duration(s.LastContactNanos), LastTerm: s.LastTerm, LastIndex: s.LastIndex}
			mu.Unlock()
		}(id, string(srv.Address))
	}
	wg.Wait()
	d.mu.Lock()
	d.diskFailing = failing
	d.mu.Unlock()
	return out
}

// forgetStats drops what the last round of server stats reported, when
// autopilot stops with this node's term.
func (d *pilotDelegate) forgetStats() {
	d.mu.Lock()
	d.diskFailing = nil
	d.mu.Unlock()
}

// unwritable returns the servers that last reported disk write failures,
// with the failure.
func (d *pilotDelegate) unwritable() map[raft.ServerID]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[raft.ServerID]string, len(d.diskFailing))
	for id, e := range d.diskFailing {
		out[id] = e
	}
	return out
}

// KnownServers implements autopilot.ApplicationIntegration: every
// server-eligible member gossip knows, plus (for a grace period after this
// node became leader) Raft servers gossip has not shown yet, so a restarted
// leader does not prune peers it simply has not heard from.
func (d *pilotDelegate) KnownServers() map[raft.ServerID]*autopilot.Server {
	n := d.n
	out := map[raft.ServerID]*autopilot.Server{}
	_, leaderID := n.raft.LeaderWithID()
	for _, m := range n.members.snapshot() {
		if !m.Server {
			continue
		}
		status := autopilot.NodeAlive
		switch m.Status {
		case store.NodeDead:
			status = autopilot.NodeFailed
		case store.NodeLeft:
			status = autopilot.NodeLeft
		}
		id := raft.ServerID(m.ID)
		out[id] = &autopilot.Server{ID: id, Name: m.Name, Address: raft.ServerAddress(m.RPCAddr), NodeStatus: status,
			Version: m.Version, RaftVersion: 3, IsLeader: id == leaderID, NodeType: autopilot.NodeVoter}
	}
	if time.Since(n.leader.leaderSince()) < unseenGrace {
		if f := n.raft.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				if _, ok := out[s.ID]; !ok {
					out[s.ID] = &autopilot.Server{ID: s.ID, Address: s.Address, NodeStatus: autopilot.NodeAlive, RaftVersion: 3, NodeType: autopilot.NodeVoter}
				}
			}
		}
	}
	return out
}

// RemoveFailedServer implements autopilot.ApplicationIntegration; it must not
// block, so the Raft change runs in the background.
func (d *pilotDelegate) RemoveFailedServer(srv *autopilot.Server) {
	n := d.n
	n.leaderGo("raft-remove-server", func(context.Context) {
		n.logger.Info("removing failed Raft server", "node", srv.Name, "id", short(string(srv.ID)))
		if err := n.raft.RemoveServer(srv.ID, 0, applyTimeout).Error(); err != nil {
			n.logger.Warn("remove failed Raft server", "id", srv.ID, "err", err)
		}
	})
}
