package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// PlacementGroup is a handle to a placement group: a set of resource
// bundles reserved atomically across nodes (Ray's
// ray.util.placement_group). Run tasks and actors in it with the
// PlacementGroup option. A handle may be copied; it is only valid in the
// process that made or looked it up.
type PlacementGroup struct {
	id      string
	bundles int
	created chan struct{} // closed once the leader has registered the group
	err     error         // why registering failed (read after created)
	placed  bool          // the create's reply said CREATED (read after created)
	removed atomic.Bool   // Remove succeeded through this handle
}

// PGOption sets one placement-group option, as the keyword arguments of
// Ray's placement_group().
type PGOption func(*pgOptions) error

type pgOptions struct {
	name      string
	namespace string
	detached  bool
}

// PGName names the group in its namespace (the driver's, see JobNamespace,
// unless PGNamespace), so any driver finds it with GetPlacementGroup (Ray's
// name=). Creating a group under a name a group that is not removed has is
// an error.
func PGName(name string) PGOption {
	return func(o *pgOptions) error {
		if name == "" {
			return errors.New("option PGName: the name must not be empty")
		}
		o.name = name
		return nil
	}
}

// PGNamespace sets the namespace of a named group (default: the driver's).
func PGNamespace(ns string) PGOption {
	return func(o *pgOptions) error { o.namespace = ns; return nil }
}

// PGDetached makes the group outlive the job that created it (Ray's
// lifetime="detached"): it lives until Remove. By default a group is
// removed when its creating job finishes (Shutdown).
func PGDetached() PGOption {
	return func(o *pgOptions) error { o.detached = true; return nil }
}

// PlacementStrategies are the accepted strategy names, as Ray spells them:
// PACK (fewest nodes, best effort), SPREAD (distinct nodes, best effort),
// STRICT_PACK (all on one node or not at all), STRICT_SPREAD (one node per
// bundle or not at all).
var PlacementStrategies = []string{"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}

// bundleSets converts and validates bundles: resource names as
// sched.ValidateResourceName, amounts positive with at most 4 decimals.
func bundleSets(bundles []map[string]float64) ([]sched.ResourceSet, error) {
	out := make([]sched.ResourceSet, len(bundles))
	for i, b := range bundles {
		out[i] = sched.ResourceSet{}
		for name, v := range b {
			if v < 0 {
				return nil, fmt.Errorf("bundle %d: resource %q has negative amount %v; amounts must be positive", i, name, v)
			}
			q, err := sched.QuantityFromFloat(v)
			if err != nil {
				return nil, fmt.Errorf("bundle %d: resource %q: %w", i, name, err)
			}
			out[i][name] = q
		}
	}
	if err := sched.ValidateBundles(out); err != nil {
		return nil, err
	}
	return out, nil
}

// CreatePlacementGroup reserves bundles (resource maps such as
// {"CPU": 2, "TPU-v3": 1}; amounts in units, GPUs and CPUs as counts,
// "memory" in bytes) on the cluster's nodes under strategy (one of
// PlacementStrategies; letter case is not significant), all or none, as
// Ray's ray.util.placement_group.
//
// It returns at once: an unnamed group is registered in the background and
// placed by the leader as soon as there is room (Ready and Wait wait for
// that); a named one is registered before it returns, so a taken name is
// reported here. A group that cannot be placed now stays PENDING, with the
// reason in ListPlacementGroups; one that can never be placed on the alive
// nodes (STRICT_SPREAD of 4 bundles on 3 nodes) is reported infeasible.
//
// Errors: an unknown strategy, no bundles, an empty bundle, a zero,
// negative or over-precise amount, or a bad resource name (each naming the
// bad value and what is accepted); a taken name; no leader reachable.
func CreatePlacementGroup(ctx context.Context, bundles []map[string]float64, strategy string, opts ...PGOption) (*PlacementGroup, error) {
	st, err := sched.ParsePlacementStrategy(strategy)
	if err != nil {
		return nil, fmt.Errorf("create placement group: %w", err)
	}
	sets, err := bundleSets(bundles)
	if err != nil {
		return nil, fmt.Errorf("create placement group: %w", err)
	}
	var o pgOptions
	for _, fn := range opts {
		if err := fn(&o); err != nil {
			return nil, fmt.Errorf("create placement group: %w", err)
		}
	}
	cw, err := current()
	if err != nil {
		return nil, err
	}
	ns := o.namespace
	if ns == "" {
		ns = cw.namespace
	}
	req := &wire.PGCreateRequest{ID: randomHex(12), Name: o.name, Namespace: ns, JobID: cw.jobID, Detached: o.detached,
		Strategy: string(st), Bundles: sets}
	pg := &PlacementGroup{id: req.ID, bundles: len(sets), created: make(chan struct{})}
	if o.name != "" {
		defer close(pg.created)
		var info wire.PGInfo
		if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodPGCreate, req, &info); err != nil {
			return nil, fmt.Errorf("create placement group %q: %w", o.name, err)
		}
		pg.placed = info.State == string(wire.PGCreated)
		return pg, nil
	}
	// Unnamed: nothing to check against other groups, so the ID is made
	// here and registration runs in the background (a retried create of
	// the same ID is answered with the group as it is).
	go func() {
		defer close(pg.created)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		var info wire.PGInfo
		if err := cw.pool.Call(cctx, cw.nodeAddr, wire.MethodPGCreate, req, &info); err != nil {
			pg.err = fmt.Errorf("create placement group %s: %w", req.ID, err)
		}
		// The leader replies CREATED only once every bundle is committed
		// on its node, so Ready needs no further round trip.
		pg.placed = info.State == string(wire.PGCreated)
	}()
	return pg, nil
}

// ID returns the group's ID (hex).
func (pg *PlacementGroup) ID() string { return pg.id }

// BundleCount returns the number of bundles.
func (pg *PlacementGroup) BundleCount() int { return pg.bundles }

// String implements fmt.Stringer.
func (pg *PlacementGroup) String() string { return "PlacementGroup(" + pg.id + ")" }

func (pg *PlacementGroup) waitCreated(ctx context.Context) error {
	select {
	case <-pg.created:
		return pg.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// get asks the leader for the group, waiting up to wait for it to be
// CREATED or REMOVED (0: answer at once).
func (pg *PlacementGroup) get(ctx context.Context, wait time.Duration) (*wire.PGInfo, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	if err := pg.waitCreated(ctx); err != nil {
		return nil, err
	}
	var info wire.PGInfo
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodPGGet, &wire.PGGetRequest{ID: pg.id, WaitMillis: wait.Milliseconds()}, &info); err != nil {
		return nil, fmt.Errorf("placement group %s: %w", pg.id, err)
	}
	return &info, nil
}

// ErrPlacementGroupRemoved is wrapped by Ready and Wait when the group was
// removed before it was created.
var ErrPlacementGroupRemoved = errors.New("placement group removed")

// Wait waits up to timeout for the group to be created (every bundle
// reserved and usable on its node), as Ray's pg.wait(timeout_seconds). It
// returns true once created; false when the time runs out, with a nil
// error while the group could still be placed, or an *InfeasibleError
// (errors.Is(err, ErrInfeasible)) naming why no arrangement of the
// alive nodes can hold it. Removed groups give ErrPlacementGroupRemoved.
func (pg *PlacementGroup) Wait(ctx context.Context, timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := pg.Ready(ctx)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrInfeasible):
		return false, err
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return false, nil
	}
	return false, err
}

// Ready waits until the group is created (Ray's ray.get(pg.ready())), or
// ctx ends: then the error is ctx's, joined with an *InfeasibleError
// when the group cannot ever be placed. A removed group gives
// ErrPlacementGroupRemoved.
func (pg *PlacementGroup) Ready(ctx context.Context) error {
	if err := pg.waitCreated(ctx); err != nil {
		return err
	}
	if pg.placed && !pg.removed.Load() {
		return nil
	}
	for {
		wait := 10 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			// Leave the long poll time to answer before ctx ends.
			wait = min(wait, max(time.Until(dl)-20*time.Millisecond, time.Millisecond))
		}
		info, err := pg.get(ctx, wait)
		if err != nil {
			if ctx.Err() != nil {
				return pg.whyWaiting(ctx)
			}
			return err
		}
		switch info.State {
		case string(wire.PGCreated):
			return nil
		case string(wire.PGRemoved):
			return fmt.Errorf("placement group %s: %w", pg.id, ErrPlacementGroupRemoved)
		}
		if ctx.Err() != nil {
			return pg.whyWaiting(ctx)
		}
	}
}

// whyWaiting is Ready's error once ctx ended: ctx's error, joined with a
// *InfeasibleError when the group can never be placed as things are.
func (pg *PlacementGroup) whyWaiting(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if info, err := pg.get(qctx, 0); err == nil && info.Infeasible != nil {
		return errors.Join(ctx.Err(), &InfeasibleError{PlacementGroup: pg.id, Reason: info.Infeasible.Why()})
	}
	return ctx.Err()
}

// Remove removes the group (Ray's remove_placement_group). It returns nil
// once the removal is durable, every actor placed in the group is DEAD and
// its worker process has exited (a call to it fails with *ActorDiedError),
// every bundle's resources are back in its node's free pool, and no task
// can start in a bundle any more (tasks queued on its leases, and tasks
// submitted to the group later, are infeasible). Tasks still running in it
// finish. It waits at most 8 s for the actors (one whose constructor still
// runs is the usual laggard; it is ended once that returns) and 5 s per
// node for the bundles, then returns an error naming the group and each
// actor or node that did not finish; the group stays removed. Removing a
// removed group is not an error.
func (pg *PlacementGroup) Remove(ctx context.Context) error {
	cw, err := current()
	if err != nil {
		return err
	}
	if err := pg.waitCreated(ctx); err != nil {
		return err
	}
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodPGRemove, &wire.PGRemoveRequest{ID: pg.id}, nil); err != nil {
		return fmt.Errorf("remove placement group %s: %w", pg.id, err)
	}
	pg.removed.Store(true)
	return nil
}

// Info returns the group as the leader has it now.
func (pg *PlacementGroup) Info(ctx context.Context) (PlacementGroupInfo, error) {
	info, err := pg.get(ctx, 0)
	if err != nil {
		return PlacementGroupInfo{}, err
	}
	return pgInfoOf(info), nil
}

// GetPlacementGroup returns the group named name in the driver's namespace
// (Ray's ray.util.get_placement_group), or an error naming the name and
// namespace when there is none that is not removed.
func GetPlacementGroup(ctx context.Context, name string) (*PlacementGroup, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	var info wire.PGInfo
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodPGGet, &wire.PGGetRequest{Namespace: cw.namespace, Name: name}, &info); err != nil {
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == wire.CodeNotFound {
			return nil, fmt.Errorf("get placement group %q: none in namespace %q", name, cw.namespace)
		}
		return nil, fmt.Errorf("get placement group %q: %w", name, err)
	}
	pg := &PlacementGroup{id: info.ID, bundles: len(info.Bundles), created: make(chan struct{})}
	close(pg.created)
	return pg, nil
}

// BundleInfo is one bundle of a listed group: its index, resources (units,
// "memory" in bytes) and the node holding it ("" while unplaced).
type BundleInfo struct {
	Index     int
	Resources map[string]float64
	NodeID    string
	NodeName  string
}

// PlacementGroupInfo is one group as ListPlacementGroups reports it (Ray's
// state API list_placement_groups): its strategy, state (PENDING, CREATED,
// RESCHEDULING, REMOVED), why it waits, and where each bundle is.
type PlacementGroupInfo struct {
	ID            string
	Name          string
	Namespace     string
	JobID         string
	Detached      bool
	Strategy      string
	State         string
	PendingReason string
	Infeasible    bool
	Bundles       []BundleInfo
}

func pgInfoOf(g *wire.PGInfo) PlacementGroupInfo {
	out := PlacementGroupInfo{ID: g.ID, Name: g.Name, Namespace: g.Namespace, JobID: g.JobID, Detached: g.Detached,
		Strategy: g.Strategy, State: g.State, PendingReason: g.PendingReason, Infeasible: g.Infeasible != nil}
	for _, b := range g.Bundles {
		out.Bundles = append(out.Bundles, BundleInfo{Index: b.Index, Resources: b.Resources.Floats(), NodeID: b.NodeID, NodeName: b.NodeName})
	}
	sort.Slice(out.Bundles, func(i, j int) bool { return out.Bundles[i].Index < out.Bundles[j].Index })
	return out
}

// ListPlacementGroups returns every group the cluster remembers (removed
// ones too, up to the last 1,000), in creation order.
func ListPlacementGroups(ctx context.Context) ([]PlacementGroupInfo, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	var list wire.PGList
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodPGList, &wire.Empty{}, &list); err != nil {
		return nil, fmt.Errorf("list placement groups: %w", err)
	}
	out := make([]PlacementGroupInfo, len(list.Groups))
	for i := range list.Groups {
		out[i] = pgInfoOf(&list.Groups[i])
	}
	return out, nil
}

// InPlacementGroup runs a task or actor in bundle bundleIndex of pg (-1:
// any bundle), as Ray's PlacementGroupSchedulingStrategy: it lands on that
// bundle's node and uses the bundle's resources, not the node's free pool,
// so its demand (CPUs, GPUs, Resources…) must fit in the bundle. An index
// outside -1 … BundleCount()-1 is an error naming the valid range.
func InPlacementGroup(pg *PlacementGroup, bundleIndex int) Option {
	return func(o *taskOptions) error {
		if pg == nil {
			return errors.New("option InPlacementGroup: nil placement group")
		}
		if bundleIndex < -1 || bundleIndex >= pg.bundles {
			return fmt.Errorf("option InPlacementGroup: bundle index %d out of range: group %s has %d bundles, use 0 to %d or -1 for any",
				bundleIndex, pg.id, pg.bundles, pg.bundles-1)
		}
		o.pg, o.bundle = pg, bundleIndex
		return nil
	}
}
