package cluster

import (
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/raft"
)

// HealthError is why a node reports itself unhealthy on /v1/health, as
// Nomad's /v1/agent/health: one line per failing check.
type HealthError struct {
	// Reasons are the failing checks, each a sentence: "no leader: …" while
	// Raft knows no leader (or, on a node that is not a server, no server
	// could name one), a *DiskWriteError's text while the data dir or
	// raft.db cannot be written, or "draining: …" while the leader's view
	// shows this node drained (nodeup node drain).
	Reasons []string
}

// Error joins the reasons with "; ".
func (e *HealthError) Error() string {
	s := ""
	for i, r := range e.Reasons {
		if i > 0 {
			s += "; "
		}
		s += r
	}
	return s
}

// Healthy returns nil while the node knows a cluster leader and can write its
// data dir and raft.db, and otherwise a *HealthError naming every failing
// check. It reads only state the node keeps anyway (Raft's leader, the
// outcome of the latest writes), so a load balancer may call it often.
func (n *Node) Healthy() error {
	var reasons []string
	if why := n.noLeader(); why != "" {
		reasons = append(reasons, why)
	}
	if err := n.Health(); err != nil {
		reasons = append(reasons, err.Error())
	}
	if why := n.drainingReason(); why != "" {
		reasons = append(reasons, why)
	}
	if len(reasons) == 0 {
		return nil
	}
	return &HealthError{Reasons: reasons}
}

// noLeader returns why the node knows no leader, or "" when it knows one. A
// node in the Raft configuration asks its Raft (which forgets the leader
// once an election starts); a node outside it uses the leader its
// heartbeats and forwarded
// calls reach, forgotten when a call to it fails and no server names another.
func (n *Node) noLeader() string {
	if n.hasRaftState() {
		if addr, _ := n.raft.LeaderWithID(); addr != "" {
			return ""
		}
		state := n.raft.State()
		since := "never"
		if last := n.raft.LastContact(); !last.IsZero() {
			since = time.Since(last).Round(time.Millisecond).String() + " ago"
		}
		return fmt.Sprintf("no leader: Raft knows no leader (this server is %s, last contact with a leader %s); is a quorum of voters up?", raftStateName(state), since)
	}
	if n.leaderHint.Load().(string) == "" {
		return "no leader: no server named a leader; are the servers reachable and is a quorum of voters up?"
	}
	return ""
}

func raftStateName(s raft.RaftState) string {
	switch s {
	case raft.Follower:
		return "a follower"
	case raft.Candidate:
		return "a candidate"
	case raft.Leader:
		return "the leader"
	}
	return "shut down"
}

// httpHealth answers 200 {"healthy": true, …} while Healthy returns nil, and
// 503 with "reason" (all reasons joined) and "reasons" (a list) while it does
// not, so a load balancer takes the node out of rotation.
func (n *Node) httpHealth(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"node_id": n.id.NodeID, "leader": "", "healthy": true}
	if n.noLeader() == "" {
		body["leader"] = n.leaderAddr()
	}
	if err := n.Healthy(); err != nil {
		body["healthy"], body["reason"] = false, err.Error()
		if he, ok := err.(*HealthError); ok {
			body["reasons"] = he.Reasons
		}
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, body)
}
