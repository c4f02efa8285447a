package cluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// prepareTimeout is how long a node holds a prepared bundle that no commit
// followed (the leader died between the phases, or its Raft write failed
// and the release was lost) before giving it back itself.
const prepareTimeout = 30 * time.Second

// heldBundle is one placement-group bundle on this node: its resources,
// taken out of the free pool at prepare, with the devices for its GPU and
// gpu_memory; once committed, offered again under the bundle's renamed
// resources (sched.BundleResources).
type heldBundle struct {
	group     string
	index     int
	res       sched.ResourceSet
	committed bool
	at        time.Time
	gpus      *bundleGPUs // nil for a bundle without GPU demand (bundlegpus.go)
}

func bundleKey(group string, index int) string { return group + "/" + strconv.Itoa(index) }

// prepareBundles holds every bundle of bs not held yet, all or none (Ray's
// PrepareBundleResources). It returns "" on success or why not.
func (s *localSched) prepareBundles(group string, bs []wire.BundleSpec) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prepareLocked(group, bs)
}

func (s *localSched) prepareLocked(group string, bs []wire.BundleSpec) string {
	need := sched.ResourceSet{}
	var fresh []wire.BundleSpec
	for _, b := range bs {
		if s.bundles[bundleKey(group, b.Index)] != nil {
			continue
		}
		need.Add(b.Resources)
		fresh = append(fresh, b)
	}
	if !s.avail.Covers(need) {
		k, have, want, _ := s.avail.Missing(need)
		return fmt.Sprintf("needs %s=%s but %s is free", k, want, have)
	}
	gpus, why := s.reserveBundleGPUs(fresh)
	if why != "" {
		return why
	}
	s.avail.Sub(need)
	now := time.Now()
	for i, b := range fresh {
		s.bundles[bundleKey(group, b.Index)] = &heldBundle{group: group, index: b.Index, res: b.Resources.Clone(), at: now, gpus: gpus[i]}
	}
	return ""
}

// commitBundles offers the bundles of bs as renamed resources (Ray's
// CommitBundleResources), preparing first any not held (a new leader
// re-committing after this node restarted). Idempotent. It returns "" on
// success or why the bundles could not be held.
func (s *localSched) commitBundles(group string, bs []wire.BundleSpec) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if why := s.prepareLocked(group, bs); why != "" {
		return why
	}
	for _, b := range bs {
		h := s.bundles[bundleKey(group, b.Index)]
		if h.committed {
			continue
		}
		h.committed = true
		r := sched.BundleResources(group, b.Index, h.res)
		s.total.Add(r)
		s.avail.Add(r)
	}
	s.dispatchLocked()
	return ""
}

// returnBundles gives a group's bundles (indexes nil: all) back to the free
// pool, withdrawing their renamed resources. Work still running in them
// keeps its lease; what it holds of the renamed resources is simply gone
// when it ends. Requests queued for them are refused (the group is gone),
// and the leases holding resources the node no longer has are marked
// revoked. It returns how many bundles it gave back, and those leases, for
// their workers to refuse further tasks under them (Node.returnBundles).
func (s *localSched) returnBundles(group string, indexes []int) (int, []revokedLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := 0
	for key, h := range s.bundles {
		if h.group != group || (indexes != nil && !slices.Contains(indexes, h.index)) {
			continue
		}
		delete(s.bundles, key)
		k++
		s.avail.Add(h.res)
		s.returnBundleGPUs(h.gpus)
		if !h.committed {
			continue
		}
		r := sched.BundleResources(group, h.index, h.res)
		for name, q := range r {
			s.total[name] -= q
			s.avail[name] -= q
			if s.total[name] <= 0 {
				delete(s.total, name)
				delete(s.avail, name)
			}
		}
	}
	var revoked []revokedLease
	if k > 0 {
		revoked = s.revokeUnfitLocked()
		s.failUnfitLocked()
		s.dispatchLocked()
	}
	return k, revoked
}

// revokeUnfitLocked marks revoked, and returns, the leases holding
// resources the node no longer has (their bundle was returned).
func (s *localSched) revokeUnfitLocked() []revokedLease {
	var out []revokedLease
	for _, l := range s.leases {
		if !l.revoked && !s.total.Covers(l.res) {
			l.revoked = true
			out = append(out, revokedLease{id: l.id, workerID: l.workerID})
		}
	}
	return out
}

// failUnfitLocked refuses queued requests the node can no longer ever
// grant (their placement group's bundles were returned).
func (s *localSched) failUnfitLocked() {
	s.queue = slices.DeleteFunc(s.queue, func(w *leaseWaiter) bool {
		unfit := !s.total.Covers(w.res)
		if unfit {
			close(w.grant)
		}
		return unfit
	})
}

// expirePrepared returns bundles prepared longer than d ago and never
// committed.
func (s *localSched) expirePrepared(d time.Duration) []string {
	s.mu.Lock()
	var stale []*heldBundle
	for _, h := range s.bundles {
		if !h.committed && time.Since(h.at) > d {
			stale = append(stale, h)
		}
	}
	s.mu.Unlock()
	var out []string
	for _, h := range stale {
		s.returnBundles(h.group, []int{h.index}) // prepared only: no lease in it
		out = append(out, bundleKey(h.group, h.index))
	}
	return out
}

// heldBundles lists the bundles this node holds, for the heartbeat.
func (s *localSched) heldBundles() []wire.BundleHeld {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]wire.BundleHeld, 0, len(s.bundles))
	for _, h := range s.bundles {
		out = append(out, wire.BundleHeld{Group: h.group, Index: h.index, Resources: h.res.Clone(), Committed: h.committed})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Group < out[j].Group || out[i].Group == out[j].Group && out[i].Index < out[j].Index
	})
	return out
}

// bundleEndpoints registers the node side of the two-phase reservation.
func (n *Node) bundleEndpoints() {
	for _, method := range []string{wire.MethodPGPrepare, wire.MethodPGCommit, wire.MethodPGReturn} {
		rpc.Handle(n.rpcServer, method, func(ctx context.Context, r *wire.BundlesRequest) (*wire.BundlesReply, error) {
			return n.bundleCall(method, r)
		})
	}
}

// bundleCall serves one bundle request on this node; the leader calls it
// directly for its own node and through RPC for the others.
func (n *Node) bundleCall(method string, r *wire.BundlesRequest) (*wire.BundlesReply, error) {
	if !wire.IsHexID(r.Group) {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("placement group ID %q: use 8 to 64 hex digits", r.Group)}
	}
	for _, b := range r.Bundles {
		if b.Index < 0 || len(b.Resources) == 0 {
			return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("placement group %s: bundle %d: needs an index ≥ 0 and resources", r.Group, b.Index)}
		}
		if err := checkNonNegative(b.Resources); err != nil {
			return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("placement group %s: bundle %d: %v", r.Group, b.Index, err)}
		}
	}
	why := ""
	switch method {
	case wire.MethodPGPrepare:
		why = n.local.prepareBundles(r.Group, r.Bundles)
	case wire.MethodPGCommit:
		why = n.local.commitBundles(r.Group, r.Bundles)
	case wire.MethodPGReturn:
		n.returnBundles(r.Group, r.Indexes)
	}
	if why != "" {
		return &wire.BundlesReply{Reason: fmt.Sprintf("node %s: %s", n.cfg.NodeName, why)}, nil
	}
	return &wire.BundlesReply{OK: true}, nil
}

// returnBundles gives back this node's bundles of group (indexes nil: all)
// and returns once the task workers holding leases in them refuse further
// tasks under those leases (tasks already running go on; their task worker
// process is shared with the job's other tasks, so it is not killed as
// Ray's raylet kills a bundle's workers).
func (n *Node) returnBundles(group string, indexes []int) {
	k, revoked := n.local.returnBundles(group, indexes)
	if k == 0 {
		return
	}
	n.logger.Debug("placement group bundles returned", "group", group, "bundles", k, "leases_revoked", len(revoked))
	if len(revoked) > 0 {
		n.workers.revokeLeases(revoked, fmt.Sprintf("its placement group %s's bundle on node %s was returned", group, n.cfg.NodeName))
	}
}
