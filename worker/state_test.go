package worker

import "testing"

// TestNodesReportWholeUnits: Nodes reports resources in whole units
// (memory in bytes), as ClusterResources does, with no scheduler types.
func TestNodesReportWholeUnits(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	nodes, err := Nodes(ctx)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("Nodes = %+v, %v", nodes, err)
	}
	n := nodes[0]
	if n.NodeID != NodeID() || n.NodeName != "n0" || !n.Alive || n.State != "alive" {
		t.Fatalf("node %+v; want n0 (%s), alive", n, NodeID())
	}
	if n.Total["CPU"] != 2 || n.Total["memory"] != 1<<30 || n.Total["node0"] != 2 || n.Available["node0"] != 2 {
		t.Fatalf("node resources total %v, available %v; want CPU 2, memory 1 GiB, node0 2", n.Total, n.Available)
	}
	total, err := ClusterResources(ctx)
	if err != nil || total["CPU"] != n.Total["CPU"] || total["memory"] != n.Total["memory"] {
		t.Fatalf("ClusterResources = %v, %v; want the one node's totals %v", total, err, n.Total)
	}
}
