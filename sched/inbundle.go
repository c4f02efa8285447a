package sched

// inBundle is the bundle policy for a task or actor in a placement group
// whose bundle resources the snapshot's totals do not list: the first of
// b.Nodes that is alive, skipping Local when it vetoes the demand (its
// bundle is too small). nil when none is.
func (v *judged) inBundle(b *BundleNodes) *cand {
	for _, id := range b.Nodes {
		c := v.byID(id)
		if c == nil || (c == v.local && v.req.Veto != "") {
			continue
		}
		return c
	}
	return nil
}

// bundleReason says why no bundle node can take the demand: Local's veto
// when Local holds the bundle (*InfeasibleError); else b.Reason, or that
// the bundle's nodes are not alive (*PendingError: the group is being
// placed or placed again).
func (v *judged) bundleReason(b *BundleNodes) error {
	for _, id := range b.Nodes {
		if v.local != nil && id == v.local.node.ID && v.req.Veto != "" {
			return &InfeasibleError{Bundle: -1, Reason: v.req.Veto}
		}
	}
	reason := b.Reason
	if reason == "" {
		reason = "placement group " + b.Group + ": the nodes holding its bundle are not alive"
	}
	return &PendingError{Bundle: -1, Reason: reason}
}
