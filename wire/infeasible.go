package wire

// Infeasible says no alive node can ever satisfy a demand as the nodes are
// now (Ray's "infeasible"): not the same as busy, which passes once work
// ends. It is the one shape every message uses for it (LeaseReply,
// ActorStartReply, ActorInfo, PGInfo): a nil pointer means not known to be
// infeasible. Reason names what is missing (a resource, a label, a node,
// a device layout); it is text for people, never parsed.
type Infeasible struct {
	Reason string
}

// InfeasibleBecause is an *Infeasible with reason, or nil when reason is
// empty, so a field set from it is nil exactly when there is no reason.
func InfeasibleBecause(reason string) *Infeasible {
	if reason == "" {
		return nil
	}
	return &Infeasible{Reason: reason}
}

// Why is the reason, "" for nil.
func (i *Infeasible) Why() string {
	if i == nil {
		return ""
	}
	return i.Reason
}
