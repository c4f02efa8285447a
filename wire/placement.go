package wire

import "github.com/nodeup/nodeup/sched"

// Placement-group methods. Create, Get, List and Remove are leader-only (any
// node forwards them); Prepare, Commit and Return are served by the nodes the
// leader reserves bundles on (Ray's two-phase PrepareBundleResources /
// CommitBundleResources / CancelResourceReserve).
const (
	// MethodPGCreate: driver → any node → leader. PGCreateRequest → PGInfo
	// (after the group is durably registered: CREATED, or PENDING with the
	// reason).
	MethodPGCreate = "PG.Create"
	// MethodPGGet: any → leader, by ID or by namespace and name, optionally
	// waiting until the group is CREATED or REMOVED. PGGetRequest → PGInfo.
	MethodPGGet = "PG.Get"
	// MethodPGList: any → leader. Empty → PGList.
	MethodPGList = "PG.List"
	// MethodPGRemove: any → leader; returns once the removal is durable and
	// every bundle's resources are back on its node. PGRemoveRequest → Empty.
	MethodPGRemove = "PG.Remove"
	// MethodPGPrepare: leader → node: hold the bundles' resources (taken
	// out of the free pool, not yet usable). BundlesRequest → BundlesReply.
	MethodPGPrepare = "PG.Prepare"
	// MethodPGCommit: leader → node: offer held bundles as renamed
	// resources (preparing first any not held). BundlesRequest → BundlesReply.
	MethodPGCommit = "PG.Commit"
	// MethodPGReturn: leader → node: give a group's bundles back to the
	// free pool (Indexes nil: all of them). BundlesRequest → Empty.
	MethodPGReturn = "PG.Return"
)

// PGCreateRequest registers a placement group (Ray's
// ray.util.placement_group). ID is chosen by the creator (hex, 8–64
// characters) so that a retried create is idempotent; Strategy is one of
// PACK, SPREAD, STRICT_PACK, STRICT_SPREAD.
type PGCreateRequest struct {
	ID        string
	Name      string
	Namespace string
	JobID     string
	Detached  bool
	Strategy  string
	Bundles   []sched.ResourceSet
}

// PGGetRequest looks a group up by ID, or by Namespace and Name when ID is
// empty. With WaitMillis > 0 the leader answers once the group is CREATED
// (and its bundles are committed on their nodes) or REMOVED, or when
// WaitMillis pass, with the record as it is then. An ID not yet
// registered is waited for too (its creator registers it in the
// background); it is a not_found error only once WaitMillis pass.
type PGGetRequest struct {
	ID         string
	Namespace  string
	Name       string
	WaitMillis int64
}

// PGBundle is one bundle as listings show it: its resources and the node
// holding it (empty while unplaced).
type PGBundle struct {
	Index     int
	Resources sched.ResourceSet
	NodeID    string
	NodeName  string
	NodeAddr  string
}

// PGInfo is one placement group. State is PENDING, CREATED, RESCHEDULING
// or REMOVED; PendingReason says why it waits, Infeasible that it can
// never be placed on the alive nodes as they are.
type PGInfo struct {
	ID            string
	Name          string
	Namespace     string
	JobID         string
	Detached      bool
	Strategy      string
	State         string
	PendingReason string
	Infeasible    *Infeasible `msgpack:",omitempty"` // Reason is PendingReason
	Bundles       []PGBundle
	CreatedAt     int64
}

// PGList is every group the leader remembers, in creation order.
type PGList struct {
	Groups []PGInfo
}

// PGRemoveRequest removes the group with ID.
type PGRemoveRequest struct {
	ID string
}

// BundleSpec is one bundle of a group: its index and resources.
type BundleSpec struct {
	Index     int
	Resources sched.ResourceSet
}

// BundlesRequest names bundles of Group on the receiving node.
type BundlesRequest struct {
	Group   string
	Bundles []BundleSpec
	Indexes []int // PG.Return only: which bundles (nil: all)
}

// BundlesReply says whether all the bundles are held (OK) or, if not, why
// (Reason, naming the short resource); on failure nothing was taken.
type BundlesReply struct {
	OK     bool
	Reason string
}

// BundleHeld is a bundle a node holds, reported with its heartbeat so the
// leader can release what no committed group owns and re-commit what a
// node lost (Committed: offered as renamed resources; else prepared only).
type BundleHeld struct {
	Group     string
	Index     int
	Resources sched.ResourceSet
	Committed bool
}

// PlacementGroupState is a placement group's lifecycle state, as Ray's GCS
// placement-group table (PENDING, CREATED, REMOVED, RESCHEDULING; Ray's
// PREPARED is the leader's in-memory phase here, never stored).
type PlacementGroupState string

const (
	// PGPending: registered, not placed yet (no room now, or infeasible:
	// see PlacementGroup.Infeasible and PendingReason).
	PGPending PlacementGroupState = "PENDING"
	// PGCreated: every bundle is reserved on its node.
	PGCreated PlacementGroupState = "CREATED"
	// PGRescheduling: it was created, then a node holding some of its
	// bundles died; those bundles are being placed again (the others stay
	// reserved).
	PGRescheduling PlacementGroupState = "RESCHEDULING"
	// PGRemoved is final: its reservations are released.
	PGRemoved PlacementGroupState = "REMOVED"
)

// Valid reports whether s is one of the four states.
func (s PlacementGroupState) Valid() bool {
	switch s {
	case PGPending, PGCreated, PGRescheduling, PGRemoved:
		return true
	}
	return false
}
