package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// Operator endpoints (issue 19), as Consul's `operator raft` and `operator
// snapshot`: all run at the leader.
func (n *Node) operatorEndpoints() {
	handleLeader(n, wire.MethodRaftPeers, n.raftPeers)
	handleLeader(n, wire.MethodRaftRemovePeer, n.raftRemovePeer)
	handleLeader(n, wire.MethodSnapshotSave, n.snapshotSave)
	handleLeader(n, wire.MethodSnapshotRestore, n.snapshotRestore)
}

// ErrLastVoter is why remove-peer refuses (a bad_input rpc.Error whose Err
// it is on the leader, and whose message ends with it over the wire) when
// remove-peer names the only voter: removing it would leave no cluster.
var ErrLastVoter = errors.New("is the last Raft voter; removing it would leave no cluster")

// raftServers returns the latest Raft configuration with node names from
// the node table (else gossip) and the leader marked, sorted by name then ID.
func (n *Node) raftServers() ([]wire.RaftServer, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read the Raft configuration: %w", err)
	}
	nodes, err := n.fsm.State().Nodes()
	if err != nil {
		return nil, err
	}
	// Gossip names a server that has not registered yet.
	names := map[string]string{}
	for _, m := range n.members.snapshot() {
		names[m.ID] = m.Name
	}
	for _, nd := range nodes {
		names[nd.ID] = nd.Name
	}
	_, leaderID := n.raft.LeaderWithID()
	var out []wire.RaftServer
	for _, s := range f.Configuration().Servers {
		out = append(out, wire.RaftServer{ID: string(s.ID), Name: names[string(s.ID)], Address: string(s.Address),
			Suffrage: strings.ToLower(s.Suffrage.String()), Leader: s.ID == leaderID})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name+out[i].ID < out[j].Name+out[j].ID })
	return out, nil
}

func (n *Node) raftPeers(ctx context.Context, _ *wire.Empty) (*wire.RaftPeersResponse, error) {
	servers, err := n.raftServers()
	if err != nil {
		return nil, err
	}
	return &wire.RaftPeersResponse{Servers: servers}, nil
}

// raftRemovePeer takes the server named by ID or Raft address out of the
// configuration, as `consul operator raft remove-peer`. It refuses the last
// voter. The node's current incarnation is marked leaving so reconcile does
// not add a live node straight back; restarted (a new incarnation), it may
// be added again.
func (n *Node) raftRemovePeer(ctx context.Context, req *wire.RaftRemovePeerRequest) (*wire.RaftServer, error) {
	servers, err := n.raftServers()
	if err != nil {
		return nil, err
	}
	var target *wire.RaftServer
	voters := 0
	var known []string
	for i, s := range servers {
		if s.ID == req.Peer || s.Address == req.Peer {
			target = &servers[i]
		} else if s.Suffrage == "voter" {
			voters++
		}
		known = append(known, s.ID+" ("+s.Address+")")
	}
	if target == nil {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("no Raft server with ID or address %q; the servers are: %s", req.Peer, strings.Join(known, ", "))}
	}
	if target.Suffrage == "voter" && voters == 0 {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("Raft server %s (%s) %v", target.ID, target.Address, ErrLastVoter), Err: ErrLastVoter}
	}
	if nd, err := n.fsm.State().NodeByID(target.ID); err == nil && nd != nil {
		n.leader.markLeaving(nd.ID, nd.Incarnation)
	}
	if err := n.raft.RemoveServer(raft.ServerID(target.ID), 0, applyTimeout).Error(); err != nil {
		return nil, &rpc.Error{Code: wire.CodeNotLeader, Message: fmt.Sprintf("remove Raft server %s: %v", target.ID, err)}
	}
	n.logger.Info("operator removed a Raft server", "id", short(target.ID), "name", target.Name, "addr", target.Address)
	return target, nil
}

// snapshotSave takes a Raft snapshot of the FSM now (raft.Snapshot, the
// user snapshot) and returns its bytes.
func (n *Node) snapshotSave(ctx context.Context, _ *wire.Empty) (*wire.Snapshot, error) {
	f := n.raft.Snapshot()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("take a Raft snapshot: %w", err)
	}
	meta, rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("open the Raft snapshot: %w", err)
	}
	defer rc.Close()
	if meta.Size > wire.MaxSnapshotSize {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("the snapshot is %d bytes; at most %d travel in one call", meta.Size, wire.MaxSnapshotSize)}
	}
	data, err := io.ReadAll(io.LimitReader(rc, wire.MaxSnapshotSize+1))
	if err != nil {
		return nil, fmt.Errorf("read the Raft snapshot %s: %w", meta.ID, err)
	}
	if len(data) > wire.MaxSnapshotSize {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("the snapshot is over %d bytes, the most that travel in one call", wire.MaxSnapshotSize)}
	}
	return &wire.Snapshot{Index: meta.Index, Term: meta.Term, Data: data}, nil
}

// snapshotRestore verifies req.Data as the FSM's Restore would, then has
// Raft take it as the whole state (raft.Restore: the leader installs it and
// replicates it to followers as a snapshot). Nothing is replaced when the
// data is refused.
func (n *Node) snapshotRestore(ctx context.Context, req *wire.Snapshot) (*wire.Empty, error) {
	if len(req.Data) > wire.MaxSnapshotSize {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("snapshot of %d bytes; at most %d accepted", len(req.Data), wire.MaxSnapshotSize)}
	}
	if err := store.VerifySnapshot(bytes.NewReader(req.Data)); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: req.Index, Term: req.Term, Size: int64(len(req.Data))}
	if err := n.raft.Restore(meta, bytes.NewReader(req.Data), applyTimeout); err != nil {
		return nil, fmt.Errorf("restore the snapshot through Raft: %w", err)
	}
	n.logger.Warn("operator restored a snapshot: the cluster state was replaced", "bytes", len(req.Data), "snapshot_index", req.Index)
	return &wire.Empty{}, nil
}

// RaftPeersFile is the file in <data-dir>/raft that, when present at start,
// replaces the Raft configuration (quorum recovery, as Consul's
// peers.json; docs/operations.md). It is raft.ReadConfigJSON's format: a
// JSON list of {"id": node ID, "address": "host:port", "non_voter": bool}.
const RaftPeersFile = "peers.json"

// recoverPeers applies <data-dir>/raft/peers.json, if present, with
// raft.RecoverCluster before Raft starts, then deletes it so the next
// start does not recover again. A node with no Raft state refuses it:
// there is nothing to recover.
func (n *Node) recoverPeers(rc *raft.Config, snaps raft.SnapshotStore, existing bool) error {
	path := filepath.Join(n.dir.file(raftDir), RaftPeersFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if !existing {
		return fmt.Errorf("%s: this node has no Raft state to recover; remove the file, or start the node on the data dir it ran on", path)
	}
	conf, err := raft.ReadConfigJSON(path)
	if err != nil {
		return fmt.Errorf("%s: %w (want [{\"id\": \"<node id>\", \"address\": \"host:port\", \"non_voter\": false}, …])", path, err)
	}
	// RecoverCluster replays the log into the FSM it is given and leaves it
	// unusable: a scratch FSM, not n.fsm.
	if err := raft.RecoverCluster(rc, store.NewFSM(n.logger), n.raftStore, n.raftStore, snaps, n.raftTrans, conf); err != nil {
		return fmt.Errorf("recover the Raft configuration from %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("recovered from %s but cannot remove it (it would be applied again at the next start): %w", path, err)
	}
	n.logger.Warn("recovered the Raft configuration from peers.json", "file", path, "servers", len(conf.Servers))
	return nil
}
