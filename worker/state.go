package worker

import (
	"context"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// NodeInfo is one node as Nodes reports it (the fields of Ray's ray.nodes()).
type NodeInfo = wire.NodeInfo

// Nodes returns every node the cluster knows, alive or not, with total and
// available resources (as Ray's ray.nodes()).
func Nodes(ctx context.Context) ([]NodeInfo, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	var v wire.ClusterView
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodClusterView, &wire.Empty{}, &v); err != nil {
		return nil, err
	}
	return v.Nodes, nil
}

// ClusterResources sums the total resources of alive nodes, in units
// (memory in bytes), as ray.cluster_resources().
func ClusterResources(ctx context.Context) (map[string]float64, error) {
	return sumNodes(ctx, func(n NodeInfo) sched.ResourceSet { return n.Total })
}

// AvailableResources sums the free resources of alive nodes, as
// ray.available_resources(); free amounts are up to a second old.
func AvailableResources(ctx context.Context) (map[string]float64, error) {
	return sumNodes(ctx, func(n NodeInfo) sched.ResourceSet { return n.Available })
}

func sumNodes(ctx context.Context, pick func(NodeInfo) sched.ResourceSet) (map[string]float64, error) {
	nodes, err := Nodes(ctx)
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
