package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// leaveRaftTimeout bounds how long a stopping server tries to take itself
// out of the Raft configuration before it stops anyway.
const leaveRaftTimeout = 10 * time.Second

// leaveRaft takes this server out of the Raft configuration before it stops,
// so the voters left keep a quorum (a 2-voter cluster keeps a leader). A
// leader hands leadership to another voter first; then the leader removes
// this node at its request (forward). The last voter stays: removing it
// would leave no cluster. Failures are logged; the stop goes on after
// timeout.
func (n *Node) leaveRaft(timeout time.Duration) {
	suffrage, ok := n.ownSuffrage()
	if !ok {
		return
	}
	if suffrage == raft.Voter && n.otherVoters() == 0 {
		n.logger.Info("last Raft voter: staying in the Raft configuration")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if n.IsLeader() {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.logger.Warn("leadership transfer failed; the leader removes itself", "err", err)
		}
	}
	req := &wire.RaftLeaveRequest{NodeID: n.id.NodeID, Incarnation: n.id.Incarnation}
	if err := n.forward(ctx, wire.MethodRaftLeave, req, &wire.Empty{}); err != nil {
		n.logger.Warn("could not leave the Raft configuration; the cluster removes this node once gossip reports it left",
			"timeout", timeout, "err", err)
		return
	}
	n.logger.Info("left the Raft configuration")
}

// ownSuffrage returns this node's suffrage in the latest Raft
// configuration, and false when it is not in it.
func (n *Node) ownSuffrage() (raft.ServerSuffrage, bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0, false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.id.NodeID {
			return s.Suffrage, true
		}
	}
	return 0, false
}

// raftLeave is the leader's side of leaveRaft: it removes the server from
// the configuration (itself too, when a leadership transfer failed: Raft
// then steps down). It refuses to remove the last voter.
func (n *Node) raftLeave(ctx context.Context, req *wire.RaftLeaveRequest) (*wire.Empty, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	found, voters := false, 0
	for _, s := range f.Configuration().Servers {
		found = found || string(s.ID) == req.NodeID
		if s.Suffrage == raft.Voter && string(s.ID) != req.NodeID {
			voters++
		}
	}
	switch {
	case !found:
		return &wire.Empty{}, nil
	case voters == 0:
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("node %s is the last Raft voter; it stays in the configuration", req.NodeID)}
	}
	n.leader.markLeaving(req.NodeID, req.Incarnation)
	if err := n.raft.RemoveServer(raft.ServerID(req.NodeID), 0, applyTimeout).Error(); err != nil {
		return nil, &rpc.Error{Code: wire.CodeNotLeader, Message: fmt.Sprintf("remove Raft server %s: %v", req.NodeID, err)}
	}
	n.logger.Info("removed a leaving server from Raft", "id", short(req.NodeID))
	return &wire.Empty{}, nil
}
