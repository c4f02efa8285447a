package cluster

// The placement-group manager's leader-term work: placing pending groups,
// picking up what the last leader left, following the nodes' heartbeats,
// and removing a finished job's groups with their actors.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// placePending tries every PENDING and RESCHEDULING group in creation
// order (Ray's pending queue is FIFO too).
func (m *pgManager) placePending(ctx context.Context) {
	all, err := m.host.State().LivePlacementGroups()
	if err != nil {
		return
	}
	for _, g := range all {
		if ctx.Err() != nil {
			return
		}
		if g.State != store.PGPending && g.State != store.PGRescheduling {
			continue
		}
		nodes, reason, infeasible := m.tryPlace(g)
		if nodes == nil {
			if reason != g.PendingReason || infeasible != g.Infeasible {
				_ = m.write(store.PlacementGroupOp{Kind: store.PGOpPending, ID: g.ID, Reason: reason, Infeasible: infeasible})
			}
			continue
		}
		done := m.startCommit(g.ID)
		err := m.write(store.PlacementGroupOp{Kind: store.PGOpReserve, ID: g.ID, Nodes: nodes, At: time.Now().UnixNano()})
		m.clearInflight(g.ID)
		if err != nil {
			m.finishCommit(g.ID, done)
			var moved []int
			var where []string
			for i, nd := range nodes {
				if nd != g.Nodes[i] {
					moved = append(moved, i)
					where = append(where, nd)
				}
			}
			m.returnBundles(g.ID, where, moved)
			m.host.log().Warn("reserve placement group", "group", g.ID, "err", err)
			continue
		}
		was := g.State
		g.Nodes, g.State = nodes, store.PGCreated
		m.commitOnNodes(g)
		m.finishCommit(g.ID, done)
		m.host.log().Info("placement group created", "group", g.ID, "was", was, "nodes", nodes)
	}
}

// run places pending and rescheduling groups while this node leads (ctx
// is the term). It first picks up what the last leader left: every
// committed bundle is committed again on its node (idempotent; finishes a
// reservation the old leader committed to Raft but not to every node) and
// bundles on dead nodes are rescheduled; prepared bundles that no
// committed group owns are released through the heartbeat check
// (nodeReport) or, at the latest, by the node's prepare timeout. Then it
// retries pending groups at once, every pgRetryEvery, and on wake (a
// removal, a node change).
func (m *pgManager) run(ctx context.Context) {
	all, err := m.host.State().LivePlacementGroups()
	if err == nil {
		for _, g := range all {
			if g.State == store.PGCreated || g.State == store.PGRescheduling {
				m.recommit(g)
			}
		}
	}
	m.checkNodes()
	m.retrier.run(ctx, pgRetryEvery, m.placePending)
}

// recommit commits group g's bundles on their nodes again in the leader's
// term, marked as committing (Get waits for it) until done.
func (m *pgManager) recommit(g *store.PlacementGroup) {
	done := m.startCommit(g.ID)
	if !m.host.leaderGo("pg-commit", func(context.Context) {
		defer m.finishCommit(g.ID, done)
		m.commitOnNodes(g)
	}) {
		m.finishCommit(g.ID, done)
	}
}

// prune forgets the reported usage of nodes live does not call live.
func (m *pgManager) prune(live map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	maps.DeleteFunc(m.used, func(id string, _ sched.ResourceSet) bool { return !live[id] })
	maps.DeleteFunc(m.usageTrusted, func(id string, _ bool) bool { return !live[id] })
}

// revoke drops the usage heartbeats reported to this node as leader.
func (m *pgManager) revoke() {
	m.mu.Lock()
	m.used = map[string]sched.ResourceSet{}
	m.usageTrusted = map[string]bool{}
	m.mu.Unlock()
}

// checkNodes unplaces the bundles held on nodes that are dead, left or
// gone from the table; their groups go RESCHEDULING and are placed again.
func (m *pgManager) checkNodes() {
	st := m.host.State()
	all, err := st.LivePlacementGroups()
	if err != nil {
		return
	}
	status := map[string]store.NodeStatus{}
	if nodes, err := st.Nodes(); err == nil {
		for _, nd := range nodes {
			status[nd.ID] = nd.Status
		}
	}
	now := time.Now().UnixNano()
	lostAny := false
	for _, g := range all {
		if g.State != store.PGCreated && g.State != store.PGRescheduling {
			continue
		}
		var lost []string
		for _, nd := range g.Nodes {
			if s, ok := status[nd]; nd != "" && (!ok || !s.Live()) {
				lost = append(lost, nd)
			}
		}
		if len(lost) == 0 {
			continue
		}
		m.host.log().Info("placement group lost bundles with their node; rescheduling", "group", g.ID, "nodes", lost)
		if err := m.write(store.PlacementGroupOp{Kind: store.PGOpLose, ID: g.ID, Nodes: lost, At: now}); err != nil {
			m.host.log().Warn("record lost bundles", "group", g.ID, "err", err)
			continue
		}
		lostAny = true
	}
	if lostAny {
		m.wake()
	}
}

// nodeReport takes a node's heartbeat: its usage outside bundles, for
// placement, and the bundles it holds, which are reconciled with Raft state:
// held bundles no committed or in-flight group owns are released, and
// committed bundles the node lacks (it restarted) are committed again.
func (m *pgManager) nodeReport(nd *store.Node, avail sched.ResourceSet, held []wire.BundleHeld) {
	used := sched.ResourceSet{}
	heldSum := sched.ResourceSet{}
	for _, h := range held {
		heldSum.Add(h.Resources)
	}
	for k, t := range nd.Resources {
		if u := t - avail[k] - heldSum[k]; u > 0 {
			used[k] = u
		}
	}
	m.mu.Lock()
	m.used[nd.ID] = used
	delete(m.usageTrusted, nd.ID)
	m.mu.Unlock()

	st := m.host.State()
	stray := map[string][]int{}
	has := map[string]bool{}
	for _, h := range held {
		has[bundleKey(h.Group, h.Index)] = true
		if m.isInflight(h.Group, nd.ID) || m.committingCh(h.Group) != nil {
			continue
		}
		g, err := st.PlacementGroupByID(h.Group)
		if err != nil {
			continue
		}
		owned := g != nil && (g.State == store.PGCreated || g.State == store.PGRescheduling) &&
			h.Index < len(g.Nodes) && g.Nodes[h.Index] == nd.ID
		if !owned {
			stray[h.Group] = append(stray[h.Group], h.Index)
		}
	}
	for group, idx := range stray {
		m.host.log().Info("releasing bundles no committed placement group owns", "group", group, "node", nd.Name, "bundles", idx)
		m.host.leaderGo("pg-return", func(context.Context) { m.returnBundles(group, []string{nd.ID}, idx) })
	}
	all, err := st.LivePlacementGroups()
	if err != nil {
		return
	}
	for _, g := range all {
		if g.State != store.PGCreated && g.State != store.PGRescheduling {
			continue
		}
		for i, on := range g.Nodes {
			if on != nd.ID || has[bundleKey(g.ID, i)] || m.committingCh(g.ID) != nil || m.isInflight(g.ID, nd.ID) {
				continue
			}
			m.host.log().Info("node lacks committed bundles; committing again", "group", g.ID, "node", nd.Name)
			m.recommit(g)
			break
		}
	}
}

// jobDone removes the groups a finished job created, except detached ones
// (Ray's owner-based placement-group lifetime).
func (m *pgManager) jobDone(job string) {
	all, err := m.host.State().LivePlacementGroups()
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for _, g := range all {
		if g.JobID != job || g.Detached {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.remove(g.ID); err != nil {
				m.host.log().Warn("remove a finished job's placement group", "group", g.ID, "job", job, "err", err)
			}
		}()
	}
	wg.Wait()
}

// killActorsIn ends the actors placed in removed group group (Ray kills
// them), all at once, and returns when each is DEAD and its worker process
// has exited, or ctx ended; the error joins each actor's failure.
func (m *pgManager) killActorsIn(ctx context.Context, group string) error {
	all, err := m.host.State().LiveActors()
	if err != nil {
		return fmt.Errorf("list its actors: %w", err)
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, a := range all {
		if pg, _, ok := sched.PlacementGroupOf(a.Resources); !ok || pg != group {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.host.endActor(ctx, a.ID, pgRemovedCause(group)); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pgRemovedCause is the death cause of an actor whose group was removed.
func pgRemovedCause(group string) string {
	return fmt.Sprintf("its placement group %s was removed", group)
}
