package cluster

import (
	"sync"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// SpreadThreshold is the DEFAULT strategy's utilization threshold, as Ray's
// scheduler_spread_threshold (0.5): a node whose busiest resource (CPU,
// GPU or memory) is used below it takes work itself; at or above it, work
// goes to a node still below the threshold when one has room, and only when
// every node is at or above it does a node pack up to 100%.
const SpreadThreshold = 0.5

// loadKinds are the resources whose use makes a node "utilized" for the
// hybrid policy. Ray's critical resource utilization counts CPU, memory
// and object store memory; this lease path counts GPU in place of object
// store memory.
var loadKinds = []string{sched.CPU, sched.GPU, sched.Memory}

// criticalLoad is the highest share of CPU, GPU or memory in use, from
// total and free amounts (0 when the node has none of them).
func criticalLoad(total, avail sched.ResourceSet) float64 {
	load := 0.0
	for _, k := range loadKinds {
		t := total[k]
		if t <= 0 {
			continue
		}
		load = max(load, 1-float64(avail[k])/float64(t))
	}
	return load
}

// tryGrantBelow reserves res now if it fits and this node's critical load
// is below threshold before the grant.
func (s *localSched) tryGrantBelow(res sched.ResourceSet, threshold float64) *lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if criticalLoad(s.total, s.avail) >= threshold {
		return nil
	}
	return s.grantLocked(res)
}

// hybridTarget is the DEFAULT strategy's choice when this node is at or
// above SpreadThreshold: the least-loaded other node below the threshold
// whose free resources hold demand and whose labels match sel, or nil
// (keep the work here when it fits, else the usual spillback).
func hybridTarget(view []wire.NodeInfo, demand sched.ResourceSet, self string, sel sched.LabelSelector) *wire.NodeInfo {
	var best *wire.NodeInfo
	bestLoad := SpreadThreshold
	for i := range view {
		nd := &view[i]
		if !nd.Alive || nd.NodeID == self || !nd.Available.Covers(demand) || !labelsMatch(sel, nd) {
			continue
		}
		if l := criticalLoad(nd.Total, nd.Available); l < bestLoad {
			best, bestLoad = nd, l
		}
	}
	return best
}

// othersInView reports whether the leader's last view names any node
// besides this one, so a lone node's busy leases skip copying the view.
func (n *Node) othersInView() bool {
	v, _ := n.view.Load().([]wire.NodeInfo)
	return len(v) > 1
}

// spillLedger remembers what this node sent to other nodes since the last
// view from the leader, so that a burst of spillbacks does not pile onto one
// node whose reported free resources are up to a heartbeat old (Ray's
// raylet subtracts spilled demand from its view of the target the same way).
type spillLedger struct {
	mu   sync.Mutex
	sent map[string]sched.ResourceSet // by node ID
}

// add records demand sent to node.
func (l *spillLedger) add(node string, demand sched.ResourceSet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sent == nil {
		l.sent = map[string]sched.ResourceSet{}
	}
	s := l.sent[node]
	if s == nil {
		s = sched.ResourceSet{}
		l.sent[node] = s
	}
	s.Add(demand)
}

// reset forgets everything: a fresh view already counts it.
func (l *spillLedger) reset() {
	l.mu.Lock()
	l.sent = nil
	l.mu.Unlock()
}

// deduct lowers each node's Available in view by what was sent to it (never
// below zero); view's maps are replaced, not written.
func (l *spillLedger) deduct(view []wire.NodeInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range view {
		s := l.sent[view[i].NodeID]
		if len(s) == 0 {
			continue
		}
		a := view[i].Available.Clone()
		for k, q := range s {
			a[k] = max(a[k]-q, 0)
		}
		view[i].Available = a
	}
}
