package sched

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// EntrypointNode is where a submitted job's entrypoint (its driver) runs,
// as Ray's job manager places the supervisor actor: an alive node whose
// total resources cover demand (the entrypoint resources; what is free now
// is not asked, the driver waits for nothing), the node named local when it
// is one (the job's working dir was uploaded there), else the first such
// node by Name, then ID. None is an *InfeasibleError (Bundle -1) naming the
// demand and the number of nodes. nodes is only read.
func EntrypointNode(nodes []Node, demand ResourceSet, local string) (string, error) {
	var best *Node
	for i := range nodes {
		n := &nodes[i]
		if !n.Alive || !n.Total.Covers(demand) {
			continue
		}
		if n.ID == local {
			return n.ID, nil
		}
		if best == nil || cmp.Or(cmp.Compare(n.Name, best.Name), cmp.Compare(n.ID, best.ID)) < 0 {
			best = n
		}
	}
	if best == nil {
		e := &InfeasibleError{Bundle: -1, Reason: fmt.Sprintf("no live node has the entrypoint resources %s (of %d nodes in the cluster)", demand, len(nodes))}
		// Name the short resource when one alone keeps every alive node out.
		for _, k := range slices.Sorted(maps.Keys(demand)) {
			most := Quantity(0)
			for i := range nodes {
				if nodes[i].Alive {
					most = max(most, nodes[i].Total[k])
				}
			}
			if demand[k] > 0 && most < demand[k] {
				e.Resource, e.Need, e.Most = k, demand[k], most
				break
			}
		}
		return "", e
	}
	return best.ID, nil
}
