package cluster

import (
	"errors"
	"math/rand/v2"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// This file gathers what the placement policy (sched.Decide) needs and
// carries out what it decides; the policy itself lives in sched.

// snapshotOf is view as the policy sees it, deciding on local's behalf; an
// ineligible (draining) node is not alive to it, so it gets no new work.
func snapshotOf(view []wire.NodeInfo, local string) sched.Snapshot {
	nodes := make([]sched.Node, len(view))
	for i, nd := range view {
		nodes[i] = sched.Node{ID: nd.NodeID, Name: nd.NodeName, Total: nd.Total, Available: nd.Available, Labels: nd.Labels, Alive: nd.Alive && !nd.Ineligible}
	}
	return sched.Snapshot{Nodes: nodes, Local: local}
}

// policyStrategy is st in the policy's terms.
func policyStrategy(st wire.Strategy) sched.Strategy {
	return sched.Strategy{Kind: sched.StrategyKind(st.Kind), Node: st.NodeID, Soft: st.Soft, Labels: st.Labels, SoftLabels: st.SoftLabels}
}

// newRand is a source for the policy's random choice among its top nodes.
func newRand() *rand.Rand { return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) }

// nodeInView returns the node with id in view, or nil.
func nodeInView(view []wire.NodeInfo, id string) *wire.NodeInfo {
	for i := range view {
		if view[i].NodeID == id {
			return &view[i]
		}
	}
	return nil
}

// withBundleNodes adds to view the bundle nodes it lacks (a node newer
// than the view), as alive, so that the policy can choose them and the
// caller can reach them.
func withBundleNodes(view []wire.NodeInfo, bundles []wire.PGBundle) ([]wire.NodeInfo, *sched.BundleNodes) {
	b := &sched.BundleNodes{}
	for _, nd := range bundles {
		b.Nodes = append(b.Nodes, nd.NodeID)
		if nodeInView(view, nd.NodeID) == nil && nd.NodeAddr != "" {
			view = append(view, wire.NodeInfo{NodeID: nd.NodeID, NodeName: nd.NodeName, Addr: nd.NodeAddr, Alive: true, State: "alive"})
		}
	}
	return view, b
}

// noPlaceReason is the reason a placement error of sched (Decide,
// PlaceBundles) gives; whether it is infeasible is errors.Is(err,
// sched.ErrInfeasible), never a prefix of the text.
func noPlaceReason(err error) string {
	var inf *sched.InfeasibleError
	var pend *sched.PendingError
	switch {
	case errors.As(err, &inf):
		return inf.Reason
	case errors.As(err, &pend):
		return pend.Reason
	}
	return err.Error()
}

// infeasibleIf is the wire shape of a pending actor's or group's state:
// reason when the FSM marked it infeasible, else nil.
func infeasibleIf(infeasible bool, reason string) *wire.Infeasible {
	if !infeasible {
		return nil
	}
	return &wire.Infeasible{Reason: reason}
}

// decide runs the policy for r on snap with this node's own free resources
// as they are under the lock, and grants the lease in the same critical
// section when the decision is to run here, so concurrent requests can
// neither overshoot the hybrid threshold nor take the same resources. The
// SPREAD position advances with every decision. (clusterView always lists
// this node, so a decision to run here has its entry to grant from.)
func (s *localSched) decide(snap sched.Snapshot, r sched.Request) (sched.Decision, *lease, error) {
	rng := newRand()
	s.mu.Lock()
	defer s.mu.Unlock()
	self := -1
	for i := range snap.Nodes {
		if snap.Nodes[i].ID == snap.Local {
			self = i
			// Alive stays as the view says: false while this node is
			// ineligible (drained), so the policy sends work elsewhere.
			snap.Nodes[i].Total, snap.Nodes[i].Available = s.total, s.avail
		}
	}
	snap.SpreadNext = s.spreadNext
	d, err := sched.Decide(snap, r, rng)
	if err == nil && d.Node == snap.Local && d.Outcome == sched.Run {
		if l := s.grantLocked(r.Demand); l != nil {
			s.spreadNext = d.SpreadNext
			return d, l, nil
		}
		// Free in total but not on its devices: decide again as if nothing
		// were free here.
		snap.Nodes[self].Available = nil
		d, err = sched.Decide(snap, r, rng)
	}
	if err == nil {
		s.spreadNext = d.SpreadNext
	}
	return d, nil, err
}
