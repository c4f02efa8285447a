package cluster

// The node side of placement groups: the PG.* endpoints (answered by the
// leader's pgManager) and the lookups other parts of the node make.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

func (n *Node) placementEndpoints() {
	handleLeader(n, wire.MethodPGCreate, n.pgCreate)
	handleLeader(n, wire.MethodPGGet, n.pgGet)
	handleLeader(n, wire.MethodPGList, func(ctx context.Context, _ *wire.Empty) (*wire.PGList, error) {
		all, err := n.fsm.State().PlacementGroups()
		if err != nil {
			return nil, err
		}
		out := &wire.PGList{Groups: make([]wire.PGInfo, 0, len(all))}
		names := n.nodeNames()
		for _, g := range all {
			out.Groups = append(out.Groups, pgInfo(g, names))
		}
		return out, nil
	})
	handleLeader(n, wire.MethodPGRemove, n.pgRemove)
	n.bundleEndpoints()
}

type nodeRef struct{ name, addr string }

func (n *Node) nodeNames() map[string]nodeRef {
	out := map[string]nodeRef{}
	if nodes, err := n.fsm.State().Nodes(); err == nil {
		for _, nd := range nodes {
			out[nd.ID] = nodeRef{nd.Name, nd.Address}
		}
	}
	return out
}

func pgInfo(g *store.PlacementGroup, names map[string]nodeRef) wire.PGInfo {
	info := wire.PGInfo{ID: g.ID, Name: g.Name, Namespace: g.Namespace, JobID: g.JobID, Detached: g.Detached,
		Strategy: string(g.Strategy), State: string(g.State), PendingReason: g.PendingReason, Infeasible: infeasibleIf(g.Infeasible, g.PendingReason),
		CreatedAt: g.CreatedAt, Bundles: make([]wire.PGBundle, len(g.Bundles))}
	for i, b := range g.Bundles {
		nd := g.Nodes[i]
		info.Bundles[i] = wire.PGBundle{Index: i, Resources: b, NodeID: nd, NodeName: names[nd].name, NodeAddr: names[nd].addr}
	}
	return info
}

func badInput(format string, a ...any) error {
	return &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf(format, a...)}
}

// pgCreate validates and registers a group, placing it at once when it
// fits: the reply comes after one durable write (batched with concurrent
// creates), with the group CREATED or PENDING and the reason.
func (n *Node) pgCreate(ctx context.Context, req *wire.PGCreateRequest) (*wire.PGInfo, error) {
	if !wire.IsHexID(req.ID) {
		return nil, badInput("placement group ID %q: use 8 to 64 hex digits", req.ID)
	}
	strategy, err := sched.ParsePlacementStrategy(req.Strategy)
	if err != nil {
		return nil, badInput("placement group: %v", err)
	}
	if err := sched.ValidateBundles(req.Bundles); err != nil {
		return nil, badInput("placement group: %v", err)
	}
	if strings.IndexByte(req.Name, 0) >= 0 || strings.IndexByte(req.Namespace, 0) >= 0 {
		return nil, badInput("placement group name %q: must not contain a NUL byte", req.Name)
	}
	st := n.fsm.State()
	m := n.pgs
	if g, err := st.PlacementGroupByID(req.ID); err != nil {
		return nil, err
	} else if g != nil {
		// A retried create: answer with the group as it is.
		info := pgInfo(g, n.nodeNames())
		return &info, nil
	}
	if req.Name != "" {
		if g, err := st.PlacementGroupByName(req.Namespace, req.Name); err != nil {
			return nil, err
		} else if g != nil {
			return nil, &rpc.Error{Code: wire.CodeAlreadyExists, Message: fmt.Sprintf("placement group name %q is taken in namespace %q (by group %s)", req.Name, req.Namespace, g.ID)}
		}
	}
	now := time.Now().UnixNano()
	g := &store.PlacementGroup{ID: req.ID, Name: req.Name, Namespace: req.Namespace, JobID: req.JobID, Detached: req.Detached,
		Strategy: strategy, Bundles: req.Bundles, Nodes: make([]string, len(req.Bundles)), State: store.PGPending,
		CreatedAt: now, StateChangedAt: now}
	if err := m.create(g); err != nil {
		if errors.Is(err, store.ErrPlacementGroupNameTaken) {
			return nil, &rpc.Error{Code: wire.CodeAlreadyExists, Err: err,
				Message: fmt.Sprintf("placement group name %q is taken in namespace %q", req.Name, req.Namespace)}
		}
		return nil, fmt.Errorf("register placement group %s: %w", g.ID, err)
	}
	info := pgInfo(g, n.nodeNames())
	return &info, nil
}

// pgGet answers a lookup, waiting (see wire.PGGetRequest) on the watch set
// of the group's record and on the group's node commits, never polling.
func (n *Node) pgGet(ctx context.Context, req *wire.PGGetRequest) (*wire.PGInfo, error) {
	st := n.fsm.State()
	var info wire.PGInfo
	err := n.longPoll(ctx, req.WaitMillis, func(ws memdb.WatchSet) (bool, error) {
		var g *store.PlacementGroup
		var err error
		if req.ID != "" {
			g, err = st.PlacementGroupByIDWatch(ws, req.ID)
		} else {
			g, err = st.PlacementGroupByNameWatch(ws, req.Namespace, req.Name)
		}
		switch {
		case err != nil:
			return false, err
		case g == nil && req.ID != "":
			// Groups are registered in the background under IDs their
			// creators chose, as unnamed actors are.
			return false, errNotYet{&rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("no placement group with ID %s", req.ID)}}
		case g == nil:
			return false, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("no placement group named %q in namespace %q", req.Name, req.Namespace)}
		}
		info = pgInfo(g, n.nodeNames())
		commit := n.pgs.committingCh(g.ID)
		if commit != nil {
			ws.Add(commit)
		}
		return g.State == store.PGRemoved || (g.State == store.PGCreated && commit == nil), nil
	})
	if err != nil {
		return nil, err
	}
	return &info, nil
}

// pgRemove records the group REMOVED (one durable write, batched with
// concurrent removals), then ends its actors and has every node give its
// bundles back before it replies (finishRemove), as Ray's
// remove_placement_group kills the group's actors. A group removed already
// is finished again (a no-op unless an earlier removal, or one still under
// way, has not ended every actor yet), so no remover hears back before that.
func (n *Node) pgRemove(ctx context.Context, req *wire.PGRemoveRequest) (*wire.Empty, error) {
	if err := n.pgs.remove(req.ID); err != nil {
		return nil, err
	}
	return &wire.Empty{}, nil
}

// bundleNodes returns the nodes holding the bundles a placement-group
// demand may use (index -1: any bundle), for actor placement and lease
// routing; gone is set when the group is removed or unknown, and reason
// says why there are none otherwise.
func (n *Node) bundleNodes(ctx context.Context, pg string, index int) (nodes []wire.PGBundle, reason string, gone bool) {
	var info wire.PGInfo
	err := n.forward(ctx, wire.MethodPGGet, &wire.PGGetRequest{ID: pg}, &info)
	var re *rpc.Error
	switch {
	case errors.As(err, &re) && re.Code == wire.CodeNotFound:
		return nil, fmt.Sprintf("no placement group with ID %s", pg), true
	case err != nil:
		return nil, fmt.Sprintf("look up placement group %s: %v", pg, err), false
	case info.State == string(store.PGRemoved):
		return nil, fmt.Sprintf("placement group %s was removed", pg), true
	case index >= len(info.Bundles):
		return nil, fmt.Sprintf("placement group %s has %d bundles; bundle index %d does not exist", pg, len(info.Bundles), index), true
	}
	for _, b := range info.Bundles {
		if b.NodeID != "" && (index < 0 || b.Index == index) {
			nodes = append(nodes, b)
		}
	}
	if len(nodes) == 0 {
		return nil, fmt.Sprintf("placement group %s is %s: %s", pg, info.State, info.PendingReason), false
	}
	return nodes, "", false
}
