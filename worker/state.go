package worker

import (
	"context"
	"fmt"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// NodeInfo is one node as Nodes reports it (the fields of Ray's
// ray.nodes()).
type NodeInfo struct {
	NodeID   string // stable node ID (hex), as NodeAffinity takes it
	NodeName string // human name (nodeup start --node-name)
	Addr     string // the node's RPC host:port
	Alive    bool   // its state is alive or suspect
	State    string // alive, suspect, dead or left
	// Total and Available are the node's resources and the free part of
	// them, in whole units ("memory" and "object_store_memory" in bytes),
	// as ClusterResources; Available may be up to a second old for nodes
	// other than this process's own.
	Total     map[string]float64
	Available map[string]float64
	Labels    map[string]string // node labels (nodeup start --labels)
}

// Nodes returns every node the cluster knows, alive or not, with total and
// available resources (as Ray's ray.nodes()). Errors: ErrNotInitialized;
// the local node not answering.
func Nodes(ctx context.Context) ([]NodeInfo, error) {
	view, err := clusterView(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]NodeInfo, len(view))
	for i, n := range view {
		out[i] = NodeInfo{NodeID: n.NodeID, NodeName: n.NodeName, Addr: n.Addr, Alive: n.Alive, State: n.State,
			Total: n.Total.Floats(), Available: n.Available.Floats(), Labels: n.Labels}
	}
	return out, nil
}

// clusterView asks the local node for the node table, resources in
// fixed point.
func clusterView(ctx context.Context) ([]wire.NodeInfo, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	var v wire.ClusterView
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodClusterView, &wire.Empty{}, &v); err != nil {
		return nil, fmt.Errorf("nodes: ask node %s: %w", cw.nodeAddr, err)
	}
	return v.Nodes, nil
}

// ClusterResources sums the total resources of alive nodes, in units
// (memory in bytes), as ray.cluster_resources().
func ClusterResources(ctx context.Context) (map[string]float64, error) {
	return sumNodes(ctx, func(n wire.NodeInfo) sched.ResourceSet { return n.Total })
}

// AvailableResources sums the free resources of alive nodes, as
// ray.available_resources(); free amounts are up to a second old.
func AvailableResources(ctx context.Context) (map[string]float64, error) {
	return sumNodes(ctx, func(n wire.NodeInfo) sched.ResourceSet { return n.Available })
}

// sumNodes adds up pick of every alive node, exactly (in fixed point).
func sumNodes(ctx context.Context, pick func(wire.NodeInfo) sched.ResourceSet) (map[string]float64, error) {
	nodes, err := clusterView(ctx)
	if err != nil {
		return nil, err
	}
	sum := sched.ResourceSet{}
	for _, n := range nodes {
		if n.Alive {
			sum.Add(pick(n))
		}
	}
	return sum.Floats(), nil
}

// NodeID returns the ID of the node this process runs on ("" before Init).
func NodeID() string {
	cw, err := current()
	if err != nil {
		return ""
	}
	return cw.nodeID
}

// NodeName returns the name of the node this process runs on.
func NodeName() string {
	cw, err := current()
	if err != nil {
		return ""
	}
	return cw.nodeName
}
