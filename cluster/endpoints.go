package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nodeup/nodeup/cluster/observe"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// applyTimeout bounds one Raft apply (enqueue and commit).
const applyTimeout = 10 * time.Second

func (n *Node) registerEndpoints() {
	rpc.Handle(n.rpcServer, wire.MethodHello, n.hello)
	rpc.Handle(n.rpcServer, wire.MethodRaftStats, n.raftStats)
	handleLeader(n, wire.MethodRaftLeave, n.raftLeave)
	handleLeader(n, wire.MethodNodeRegister, n.nodeRegister)
	handleLeader(n, wire.MethodNodeHeartbeat, n.nodeHeartbeat)
	handleLeader(n, wire.MethodStatus, n.status)
	handleLeader(n, wire.MethodKVGet, n.kvGet)
	handleLeader(n, wire.MethodKVList, n.kvList)
	handleLeader(n, wire.MethodKVSet, n.kvSet)
	handleLeader(n, wire.MethodKVDelete, n.kvDelete)
	n.taskEndpoints()
	n.objects.Register(n.rpcServer)
	n.actorEndpoints()
	n.placementEndpoints()
	n.tokenEndpoints()
	n.workerCertEndpoints()
	n.keyringEndpoints()
	n.jobEndpoints()
	n.operatorEndpoints()
	n.drainEndpoints()
	n.logEndpoints()
	n.taskEvents = observe.NewTaskEvents(observeHost{n})
	n.taskEvents.Register(n.rpcServer)
	rpc.Handle(n.rpcServer, wire.MethodWorkerList, n.workerList)
}

// apply commits one command to the Raft log and returns the FSM's result.
func (n *Node) apply(t store.MessageType, req any) (any, error) {
	if n.raft == nil {
		return nil, &rpc.Error{Code: wire.CodeNotLeader, Message: "this node is not a Raft server"}
	}
	b, err := store.Encode(t, req)
	if err != nil {
		return nil, err
	}
	f := n.raft.Apply(b, applyTimeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return nil, &rpc.Error{Code: wire.CodeNotLeader, Message: err.Error()}
		}
		return nil, err
	}
	if err, ok := f.Response().(error); ok {
		return nil, &rpc.Error{Code: fsmCode(err), Message: err.Error(), Err: err}
	}
	return f.Response(), nil
}

// fsmCode is the wire code of an FSM failure. The store's distinct errors
// stay distinct: the code for a caller elsewhere, and the error itself
// (rpc.Error.Err) for errors.Is on this node.
func fsmCode(err error) string {
	switch {
	case errors.Is(err, store.ErrActorNameTaken), errors.Is(err, store.ErrPlacementGroupNameTaken):
		return wire.CodeAlreadyExists
	case errors.Is(err, store.ErrActorDead):
		return wire.CodeActorDied
	case errors.Is(err, store.ErrActorStaleIncarnation), errors.Is(err, store.ErrStaleIncarnation):
		return wire.CodeStaleIncarnation
	case errors.Is(err, store.ErrNodeNotFound), errors.Is(err, store.ErrActorNotFound),
		errors.Is(err, store.ErrPlacementGroupNotFound), errors.Is(err, store.ErrPlacementGroupRemoved),
		errors.Is(err, store.ErrTokenNotFound):
		return wire.CodeNotFound
	}
	return wire.CodeBadInput // malformed or invalid request, another cluster's ID, a reservation committed state refuses
}

func (n *Node) hello(ctx context.Context, _ *wire.Empty) (*wire.HelloResponse, error) {
	return &wire.HelloResponse{
		ClusterID: n.id.ClusterID, ClusterName: n.id.ClusterName, NodeID: n.id.NodeID,
		Version: n.cfg.Version, LeaderAddr: n.leaderAddr(), GossipAddrs: n.members.gossipAddrs(),
	}, nil
}

func (n *Node) raftStats(ctx context.Context, _ *wire.Empty) (*wire.RaftStats, error) {
	if n.raft == nil {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: "not a Raft server"}
	}
	s := &wire.RaftStats{LastIndex: n.raft.LastIndex()}
	if n.IsLeader() {
		s.LastContactNanos = 0
	} else if lc := n.raft.LastContact(); !lc.IsZero() {
		s.LastContactNanos = int64(time.Since(lc))
	} else {
		s.LastContactNanos = -1
	}
	fmt.Sscan(n.raft.Stats()["last_log_term"], &s.LastTerm)
	if err := n.Health(); err != nil {
		s.DiskError = err.Error()
	}
	return s, nil
}

func (n *Node) nodeRegister(ctx context.Context, req *wire.NodeRegisterRequest) (*wire.Empty, error) {
	nd := req.Node
	if nd.ID == "" || nd.Address == "" {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: "node registration needs an ID and an address"}
	}
	for name := range nd.Resources {
		if err := sched.ValidateResourceName(name); err != nil {
			return nil, &rpc.Error{Code: wire.CodeBadInput, Message: err.Error()}
		}
	}
	// A new incarnation means the node's processes of the last one are
	// gone: their actors restart first, so none is seen ALIVE in them.
	if err := n.actors.nodeRestarted(ctx, nd.ID, nd.Incarnation); err != nil {
		n.logger.Warn("restart the actors of a restarted node", "node", nd.Name, "incarnation", nd.Incarnation, "err", err)
	}
	nd.Status = store.NodeAlive
	nd.RegisteredAt = time.Now().UnixNano()
	nd.StatusChangedAt = nd.RegisteredAt
	if _, err := n.apply(store.NodeRegisterType, &store.NodeRegisterRequest{Node: nd}); err != nil {
		return nil, err
	}
	n.leader.setSoft(nd.ID, softState{incarnation: nd.Incarnation})
	return &wire.Empty{}, nil
}

func (n *Node) nodeHeartbeat(ctx context.Context, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error) {
	nd, err := n.fsm.State().NodeByID(req.NodeID)
	if err != nil {
		return nil, err
	}
	known := nd != nil && nd.Incarnation == req.Incarnation && nd.Status.Live()
	if known {
		n.leader.setSoft(req.NodeID, softState{incarnation: req.Incarnation, available: req.Available, pending: req.Pending, gpus: req.GPUs})
		n.pgs.nodeReport(nd, req.Available, req.Bundles)
	}
	resp := &wire.HeartbeatResponse{Known: known, LeaderAddr: n.rpcAddr}
	if known {
		resp.StaleActors = n.actors.stale(nd.ID, req.Actors)
	}
	if view, err := n.tableView(); err == nil {
		resp.View = view
	}
	return resp, nil
}

// tableView is the leader's view of the cluster as it is now: every node of
// the Raft table with its current status and last reported free resources.
func (n *Node) tableView() ([]wire.NodeInfo, error) {
	nodes, err := n.fsm.State().Nodes()
	if err != nil {
		return nil, err
	}
	view := make([]wire.NodeInfo, 0, len(nodes))
	for _, nd := range nodes {
		avail, _ := n.leader.available(nd)
		view = append(view, wire.NodeInfo{NodeID: nd.ID, NodeName: nd.Name, Addr: nd.Address,
			Alive: nd.Status.Live(), State: string(nd.Status),
			Total: nd.Resources, Available: avail, Labels: nd.Labels, Ineligible: nd.Ineligible, Draining: nd.Draining})
	}
	return view, nil
}

func (n *Node) status(ctx context.Context, _ *wire.Empty) (*wire.StatusResponse, error) {
	st := n.fsm.State()
	nodes, err := st.Nodes()
	if err != nil {
		return nil, err
	}
	resp := &wire.StatusResponse{ClusterID: n.id.ClusterID, ClusterName: n.id.ClusterName,
		LeaderID: n.id.NodeID, LeaderName: n.cfg.NodeName, LeaderAddr: n.rpcAddr,
		Total: sched.ResourceSet{}, Available: sched.ResourceSet{}, Insecure: n.sec.insecure}
	if n.sec.ca != nil {
		resp.CAHash = n.sec.ca.Hash()
	}
	if meta, _ := st.ClusterMeta(); meta != nil {
		resp.ClusterID, resp.ClusterName = meta.ID, meta.Name
	}
	suffrage := map[string]string{}
	names := map[string]string{}
	for _, nd := range nodes {
		names[nd.ID] = nd.Name
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			rs := wire.RaftServer{ID: string(s.ID), Name: names[string(s.ID)], Address: string(s.Address),
				Suffrage: strings.ToLower(s.Suffrage.String()), Leader: string(s.ID) == n.id.NodeID}
			resp.Servers = append(resp.Servers, rs)
			suffrage[rs.ID] = rs.Suffrage
		}
	}
	for _, nd := range nodes {
		v := wire.NodeView{Node: *nd, RaftSuffrage: suffrage[nd.ID]}
		v.Available, v.LastHeartbeat = n.leader.available(nd)
		v.GPUs = n.leader.gpusOf(nd.ID)
		if nd.Status.Live() {
			resp.Total.Add(nd.Resources)
			resp.Available.Add(v.Available)
			resp.Pending = append(resp.Pending, n.leader.pendingOf(nd.ID)...)
		}
		resp.Nodes = append(resp.Nodes, v)
	}
	sort.Slice(resp.Nodes, func(i, j int) bool { return resp.Nodes[i].Name+resp.Nodes[i].ID < resp.Nodes[j].Name+resp.Nodes[j].ID })
	return resp, nil
}

func (n *Node) kvGet(ctx context.Context, req *wire.KVRequest) (*wire.KVResponse, error) {
	e, err := n.fsm.State().KVGet(req.Key)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("key %q not found", req.Key)}
	}
	return &wire.KVResponse{Entries: []store.KVEntry{*e}, OK: true, Index: e.ModifyIndex}, nil
}

func (n *Node) kvList(ctx context.Context, req *wire.KVRequest) (*wire.KVResponse, error) {
	es, err := n.fsm.State().KVList(req.Prefix)
	if err != nil {
		return nil, err
	}
	resp := &wire.KVResponse{OK: true}
	for _, e := range es {
		resp.Entries = append(resp.Entries, *e)
	}
	return resp, nil
}

func (n *Node) kvSet(ctx context.Context, req *wire.KVRequest) (*wire.KVResponse, error) {
	if req.Key == "" {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: "empty KV key"}
	}
	out, err := n.apply(store.KVSetType, &store.KVSetRequest{Key: req.Key, Value: req.Value, CAS: req.CAS, Index: req.Index})
	if err != nil {
		return nil, err
	}
	resp := &wire.KVResponse{OK: true}
	if r, ok := out.(*store.KVSetResult); ok {
		resp.OK, resp.Index = r.OK, r.Index
	}
	return resp, nil
}

func (n *Node) kvDelete(ctx context.Context, req *wire.KVRequest) (*wire.KVResponse, error) {
	if _, err := n.apply(store.KVDeleteType, &store.KVDeleteRequest{Key: req.Key}); err != nil {
		return nil, err
	}
	return &wire.KVResponse{OK: true}, nil
}
