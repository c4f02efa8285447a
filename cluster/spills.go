package cluster

import (
	"sync"
	"sync/atomic"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// spillLedger remembers what this node sent to other nodes since the last
// view from the leader, so that a burst of spillbacks does not pile onto one
// node whose reported free resources are up to a heartbeat old (Ray's
// raylet subtracts spilled demand from its view of the target the same way).
type spillLedger struct {
	mu   sync.Mutex
	sent map[string]sched.ResourceSet // by node ID
	// total counts spillbacks since start, for /metrics.
	total atomic.Uint64
}

// add records demand sent to node.
func (l *spillLedger) add(node string, demand sched.ResourceSet) {
	l.total.Add(1)
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
