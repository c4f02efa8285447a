package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// Placement-group tuning: how often pending groups are retried (also on
// every removal and node change), how many ops one Raft entry carries at
// most, and how long one node call of the two phases may take.
const (
	pgRetryEvery   = 250 * time.Millisecond
	pgMaxBatch     = 1024
	pgPhaseTimeout = 5 * time.Second
	pgLinger       = 500 * time.Microsecond
)

// pgRespreadGrace is how long a SPREAD group that lost bundles with their
// nodes waits for nodes to spread them over before it puts them on nodes
// holding its other bundles, counted from the loss or from this leader's
// start, whichever is later: nodes stopped or killed together (a full
// restart) come back within it, so the first node up does not get every
// bundle. The same grace as unseenGrace, for the same reason.
const pgRespreadGrace = unseenGrace

// pgManager is the leader's placement-group authority (Ray's
// GcsPlacementGroupManager and scheduler). It decides where bundles go with
// sched.PlaceBundles under one mutex, so two groups racing for the same last
// resources never both get them; holds the decision in memory (inflight)
// while each chosen node prepares its bundles; then commits the whole
// reservation in one Raft op (all bundles or none) and tells the nodes to
// commit. Ops of concurrent groups are batched into one Raft entry.
type pgManager struct {
	host pgHost

	mu       sync.Mutex
	inflight map[string]map[string]sched.ResourceSet // group → node → resources being prepared there
	used     map[string]sched.ResourceSet            // node → resources in use outside bundles (heartbeats)
	// usageTrusted: nodes whose used a refused prepare confirmed, until
	// their next heartbeat (trustUsage).
	usageTrusted map[string]bool
	committing   map[string]chan struct{} // group → closed when its node commits are done

	termMu    sync.Mutex
	term      *pgTerm       // the current leader term's queues; nil when not leading
	termBegan chan struct{} // closed (and replaced) when a term begins
	termWait  time.Duration // pgTermWait; tests shorten it
	retrier                 // wakes the leader's retry of pending groups
}

// pgTermWait bounds how long a create or remove waits for this node's
// leader term to begin: Raft may call it leader a moment before the term's
// loops start (establishLeadership).
const pgTermWait = 5 * time.Second

// pgTerm is one leader term's queues, served by that term's batch, create
// and remove loops until ctx (the term) ends. Work queued in a term that
// ended fails with not_leader; a later term never runs it.
type pgTerm struct {
	ctx     context.Context
	ops     chan *pgWrite
	creates chan *pgJob
	removes chan *pgJob
}

type pgWrite struct {
	ops  []store.PlacementGroupOp
	done chan []error
}

// pgJob is one create or remove waiting for the leader's create or remove
// loop, which handles every job queued at once as one batch.
type pgJob struct {
	g    *store.PlacementGroup
	done chan error
}

func newPGManager(host pgHost) *pgManager {
	return &pgManager{host: host, inflight: map[string]map[string]sched.ResourceSet{}, used: map[string]sched.ResourceSet{}, usageTrusted: map[string]bool{},
		committing: map[string]chan struct{}{}, termBegan: make(chan struct{}), termWait: pgTermWait, retrier: newRetrier()}
}

// lead begins a leader term: fresh queues, and the term's batch, create
// and remove loops started with start (the term's goroutine group), which
// return when ctx, the term, ends. endTerm (revoke) closes the queues to
// new work.
func (m *pgManager) lead(ctx context.Context, start func(name string, f func(ctx context.Context)) bool) {
	t := &pgTerm{ctx: ctx, ops: make(chan *pgWrite, pgMaxBatch),
		creates: make(chan *pgJob, pgMaxBatch), removes: make(chan *pgJob, pgMaxBatch)}
	m.termMu.Lock()
	m.term = t
	close(m.termBegan)
	m.termBegan = make(chan struct{})
	m.termMu.Unlock()
	start("pg-batch", func(context.Context) { m.batchLoop(t) })
	start("pg-create", func(context.Context) { m.createLoop(t) })
	start("pg-remove", func(context.Context) { m.removeLoop(t) })
}

// endTerm forgets the current term's queues: nothing more is queued in
// them.
func (m *pgManager) endTerm() {
	m.termMu.Lock()
	m.term = nil
	m.termMu.Unlock()
}

// currentTerm is the term in progress, waiting up to wait for one to
// begin; nil when none did.
func (m *pgManager) currentTerm(wait time.Duration) *pgTerm {
	m.termMu.Lock()
	t, began := m.term, m.termBegan
	m.termMu.Unlock()
	if t != nil && t.ctx.Err() == nil {
		return t
	}
	if wait <= 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-began:
		return m.currentTerm(0)
	case <-timer.C:
	case <-m.host.lifetime().Done():
	}
	return nil
}

// termEnded is the error of work a term did not finish: the node's
// shutdown, else not_leader.
func (m *pgManager) termEnded() error {
	if err := m.host.lifetime().Err(); err != nil {
		return err
	}
	return &rpc.Error{Code: wire.CodeNotLeader, Message: "this node does not lead the cluster (its leader term ended or has not begun): placement groups are created and removed by the leader"}
}

// create registers g through the create loop (placed at once when it
// fits, else PENDING) and returns once that is durable and a placed
// group's bundles are committed on their nodes.
func (m *pgManager) create(g *store.PlacementGroup) error { return m.submit(false, g) }

// submit queues a job for the current term's create loop (or remove loop)
// and waits for it; not_leader when no term is in progress or it ends
// first.
func (m *pgManager) submit(remove bool, g *store.PlacementGroup) error {
	t := m.currentTerm(m.termWait)
	if t == nil {
		return m.termEnded()
	}
	ch := t.creates
	if remove {
		ch = t.removes
	}
	j := &pgJob{g: g, done: make(chan error, 1)}
	select {
	case ch <- j:
	case <-t.ctx.Done():
		return m.termEnded()
	}
	// The loop may stop (the term ends) with the job queued, never done.
	select {
	case err := <-j.done:
		return err
	case <-t.ctx.Done():
		return m.termEnded()
	}
}

// collect waits for a job on ch and returns it with every job queued behind
// it (up to pgMaxBatch); nil when ctx (the term) ends.
func (m *pgManager) collect(ctx context.Context, ch chan *pgJob) []*pgJob {
	var jobs []*pgJob
	select {
	case j := <-ch:
		jobs = append(jobs, j)
	case <-ctx.Done():
		return nil
	}
	// Linger briefly for the rest of a burst (a driver creating groups in
	// a loop), so it shares one durable write instead of the first job
	// paying for one alone.
	linger := time.NewTimer(pgLinger)
	defer linger.Stop()
	for len(jobs) < pgMaxBatch {
		select {
		case j := <-ch:
			jobs = append(jobs, j)
		case <-linger.C:
			return jobs
		}
	}
	return jobs
}

// createLoop registers queued groups in batches: each is placed (and its
// bundles prepared) in turn, all are registered in one Raft entry, CREATED
// or PENDING with the reason, and the created ones are committed on their
// nodes before their creators hear back.
func (m *pgManager) createLoop(t *pgTerm) {
	for {
		jobs := m.collect(t.ctx, t.creates)
		if jobs == nil {
			return
		}
		ops := make([]store.PlacementGroupOp, len(jobs))
		placed := make([]bool, len(jobs))
		dones := make([]chan struct{}, len(jobs))
		for i, j := range jobs {
			g := j.g
			if nodes, reason, infeasible := m.tryPlace(g); nodes != nil {
				g.State, g.Nodes, placed[i] = store.PGCreated, nodes, true
				dones[i] = m.startCommit(g.ID)
			} else {
				g.PendingReason, g.Infeasible = reason, infeasible
			}
			ops[i] = store.PlacementGroupOp{Kind: store.PGOpCreate, Group: *g}
		}
		errs := m.writeIn(t, ops)
		var wg sync.WaitGroup
		for i, j := range jobs {
			g := j.g
			m.clearInflight(g.ID)
			switch {
			case errs[i] != nil && placed[i]:
				m.finishCommit(g.ID, dones[i])
				m.returnBundles(g.ID, g.Nodes, nil)
				j.done <- errs[i]
			case errs[i] != nil:
				j.done <- errs[i]
			case placed[i]:
				wg.Add(1)
				go func() {
					defer wg.Done()
					m.commitOnNodes(g)
					m.finishCommit(g.ID, dones[i])
					m.host.log().Debug("placement group created", "group", g.ID, "strategy", g.Strategy, "nodes", g.Nodes)
					j.done <- nil
				}()
			default:
				m.host.log().Info("placement group pending", "group", g.ID, "strategy", g.Strategy, "reason", g.PendingReason, "infeasible", g.Infeasible)
				m.wake()
				j.done <- nil
			}
		}
		wg.Wait()
	}
}

// removeLoop removes queued groups in batches: one Raft entry records them
// all REMOVED, then each group is finished (finishRemove) before its remover
// hears back.
func (m *pgManager) removeLoop(t *pgTerm) {
	for {
		jobs := m.collect(t.ctx, t.removes)
		if jobs == nil {
			return
		}
		now := time.Now().UnixNano()
		ops := make([]store.PlacementGroupOp, len(jobs))
		for i, j := range jobs {
			ops[i] = store.PlacementGroupOp{Kind: store.PGOpRemove, ID: j.g.ID, At: now}
		}
		errs := m.writeIn(t, ops)
		for i, j := range jobs {
			if errs[i] != nil {
				j.done <- errs[i]
				continue
			}
			if !m.host.goFunc("pg-remove-finish", func() { j.done <- m.finishRemove(j.g.ID) }) {
				j.done <- fmt.Errorf("placement group %s: node stopping before its removal finished", j.g.ID)
			}
		}
	}
}

// finishRemove ends the actors of removed group id (each DEAD in Raft and
// its worker process exited, at most actorStopTimeout in all), then has
// every node that held its bundles give them back (pgPhaseTimeout per
// node), so once the remover hears back no actor of the group answers a
// call and the bundles' resources are in their nodes' free pools. The
// bundles are given back even when ending an actor failed; the error
// (pgRemove adds the group) names each actor or node that failed.
func (m *pgManager) finishRemove(id string) error {
	ctx, cancel := context.WithTimeout(m.host.lifetime(), actorStopTimeout)
	killErr := m.killActorsIn(ctx, id)
	cancel()
	var retErr error
	// The record as removed: the nodes it held at the removal.
	if g, err := m.host.State().PlacementGroupByID(id); err == nil && g != nil {
		retErr = m.returnBundles(g.ID, g.Nodes, nil)
	}
	m.wake()
	if killErr != nil {
		killErr = fmt.Errorf("it is removed, but not every actor in it was ended within %s: %w", actorStopTimeout, killErr)
	}
	if retErr != nil {
		retErr = fmt.Errorf("it is removed, but not every node gave its bundles back: %w", retErr)
	}
	return errors.Join(killErr, retErr)
}

// remove removes group id (not_found when there is none) and returns once
// it is finished (finishRemove); a group removed already is finished again.
func (m *pgManager) remove(id string) error {
	g, err := m.host.State().PlacementGroupByID(id)
	if err != nil {
		return err
	}
	if g == nil {
		return &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("no placement group with ID %s", id)}
	}
	if g.State == store.PGRemoved {
		err = m.finishRemove(g.ID)
	} else {
		err = m.submit(true, g)
	}
	if err != nil {
		return fmt.Errorf("remove placement group %s: %w", g.ID, err)
	}
	return nil
}

// write commits one op through the batcher and returns its own outcome.
func (m *pgManager) write(op store.PlacementGroupOp) error {
	return m.writeMany([]store.PlacementGroupOp{op})[0]
}

// writeMany commits ops through the current term's batcher (in one Raft
// entry unless the batch is full) and returns each op's outcome;
// not_leader for each when no term is in progress.
func (m *pgManager) writeMany(ops []store.PlacementGroupOp) []error {
	return m.writeIn(m.currentTerm(0), ops)
}

// writeIn is writeMany through term t's batcher (nil: not leading).
func (m *pgManager) writeIn(t *pgTerm, ops []store.PlacementGroupOp) []error {
	stopped := func() []error {
		errs := make([]error, len(ops))
		for i := range errs {
			errs[i] = m.termEnded()
		}
		return errs
	}
	if t == nil {
		return stopped()
	}
	w := &pgWrite{ops: ops, done: make(chan []error, 1)}
	select {
	case t.ops <- w:
	case <-t.ctx.Done():
		return stopped()
	}
	// batchLoop may stop (the term ends) with the write queued, never done.
	select {
	case errs := <-w.done:
		return errs
	case <-t.ctx.Done():
		return stopped()
	}
}

// batchLoop commits queued writes: the first waiting and every write queued
// behind it (up to pgMaxBatch ops) go into one Raft entry, and while that
// entry commits the next batch gathers, so concurrent creates, removes and
// placements share durable writes.
func (m *pgManager) batchLoop(t *pgTerm) {
	for {
		var batch []*pgWrite
		size := 0
		select {
		case w := <-t.ops:
			batch, size = append(batch, w), len(w.ops)
		case <-t.ctx.Done():
			return
		}
	drain:
		for size < pgMaxBatch {
			select {
			case w := <-t.ops:
				batch, size = append(batch, w), size+len(w.ops)
			default:
				break drain
			}
		}
		req := &store.PlacementGroupWriteRequest{Ops: make([]store.PlacementGroupOp, 0, size)}
		for _, w := range batch {
			req.Ops = append(req.Ops, w.ops...)
		}
		res, err := m.host.apply(store.PlacementGroupWriteType, req)
		r, _ := res.(*store.PlacementGroupWriteResult)
		if err == nil && (r == nil || len(r.Errors) != size) {
			err = fmt.Errorf("placement group write: unexpected result %T", res)
		}
		k := 0
		for _, w := range batch {
			errs := make([]error, len(w.ops))
			for i := range errs {
				if err != nil {
					errs[i] = err
				} else {
					errs[i] = r.Errors[k]
				}
				k++
			}
			w.done <- errs
		}
	}
}

// view is the cluster as placement sees it: each node's registered total,
// and free = total − committed reservations − reservations being prepared
// − what runs outside bundles (last heartbeat; left out when withUsage is
// false, but for nodes in usageTrusted), floored at zero. Callers hold
// m.mu.
func (m *pgManager) viewLocked(withUsage bool) ([]sched.Node, error) {
	st := m.host.State()
	nodes, err := st.Nodes()
	if err != nil {
		return nil, err
	}
	reserved, err := st.PlacementReserved()
	if err != nil {
		return nil, err
	}
	out := make([]sched.Node, 0, len(nodes))
	for _, nd := range nodes {
		avail := nd.Resources.Clone()
		avail.Sub(reserved[nd.ID])
		if withUsage || m.usageTrusted[nd.ID] {
			avail.Sub(m.used[nd.ID])
		}
		for _, per := range m.inflight {
			avail.Sub(per[nd.ID])
		}
		for k, q := range avail {
			if q < 0 {
				avail[k] = 0
			}
		}
		out = append(out, sched.Node{ID: nd.ID, Total: nd.Resources, Available: avail, Labels: nd.Labels,
			Alive: nd.Status.Live() && !nd.Ineligible})
	}
	return out, nil
}

// tryPlace decides where g's unplaced bundles go and has each chosen node
// prepare them. It returns the full assignment (its new bundles prepared
// and counted in inflight until clearInflight), or the reason the group
// must wait, and whether that is because it can never fit.
//
// The usage outside bundles comes from heartbeats, up to a heartbeat
// interval old: tasks that ended a moment ago still count there, and a
// SPREAD group on a cluster that just went idle would double up on one
// node. So when leaving that usage out changes the choice, the nodes of
// that choice, which know their own usage exactly, are asked first (a
// node truly busy refuses its prepare), and the heartbeats' usage decides
// only when one of them refuses.
func (m *pgManager) tryPlace(g *store.PlacementGroup) (nodes []string, reason string, infeasible bool) {
	if got := m.chooseIgnoringUsage(g); got != nil {
		why, refused := m.prepare(g, got)
		if why == "" {
			return got, "", false
		}
		m.trustUsage(refused)
	}
	got, reason, infeasible := m.choose(g)
	if got == nil {
		return nil, reason, infeasible
	}
	if why, _ := m.prepare(g, got); why != "" {
		return nil, why, false
	}
	return got, "", false
}

// trustUsage has the view without usage keep the heartbeat's usage of
// nodes until their next heartbeat (nodeReport): they refused a prepare
// that left it out, so a pending group retried every pgRetryEvery does
// not ask them again each time.
func (m *pgManager) trustUsage(nodes []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, nd := range nodes {
		m.usageTrusted[nd] = true
	}
}

// choose places g on the view with the heartbeats' usage and counts its
// new bundles in inflight; nil, with why, when it must wait.
func (m *pgManager) choose(g *store.PlacementGroup) (nodes []string, reason string, infeasible bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	view, err := m.viewLocked(true)
	if err != nil {
		return nil, err.Error(), false
	}
	got, err := sched.PlaceBundles(view, g.Bundles, g.Strategy, g.Nodes)
	if err != nil {
		return nil, noPlaceReason(err), errors.Is(err, sched.ErrInfeasible)
	}
	if why := m.holdSpread(g, got, time.Now()); why != "" {
		return nil, why, false
	}
	m.holdInflightLocked(g, got)
	return got, "", false
}

// chooseIgnoringUsage places g on the view without the heartbeats' usage
// and, when that differs from the choice with it (or only it fits),
// counts its new bundles in inflight and returns it; nil otherwise.
func (m *pgManager) chooseIgnoringUsage(g *store.PlacementGroup) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	bare, err := m.viewLocked(false)
	if err != nil {
		return nil
	}
	got, err := sched.PlaceBundles(bare, g.Bundles, g.Strategy, g.Nodes)
	if err != nil || m.holdSpread(g, got, time.Now()) != "" {
		return nil
	}
	view, err := m.viewLocked(true)
	if err != nil {
		return nil
	}
	if with, err := sched.PlaceBundles(view, g.Bundles, g.Strategy, g.Nodes); err == nil && slices.Equal(with, got) {
		return nil
	}
	m.holdInflightLocked(g, got)
	return got
}

// holdInflightLocked counts the bundles got places anew (not on the node
// g already has them on) in inflight under g. Callers hold m.mu.
func (m *pgManager) holdInflightLocked(g *store.PlacementGroup, got []string) {
	per := map[string]sched.ResourceSet{}
	for i, nd := range got {
		if nd == g.Nodes[i] {
			continue
		}
		if per[nd] == nil {
			per[nd] = sched.ResourceSet{}
		}
		per[nd].Add(g.Bundles[i])
	}
	m.inflight[g.ID] = per
}

// prepare is phase one: every node got places new bundles of g on holds
// them, or none keeps any (and g leaves inflight). It returns "", or why
// a node could not and the nodes that could not.
func (m *pgManager) prepare(g *store.PlacementGroup, got []string) (string, []string) {
	specs := map[string][]wire.BundleSpec{}
	for i, nd := range got {
		if nd != g.Nodes[i] {
			specs[nd] = append(specs[nd], wire.BundleSpec{Index: i, Resources: g.Bundles[i]})
		}
	}
	errs := m.eachNode(specs, wire.MethodPGPrepare, g.ID)
	var failed, refused []string
	for nd, e := range errs {
		if e != nil {
			failed = append(failed, e.Error())
			refused = append(refused, nd)
			delete(specs, nd)
		}
	}
	if len(failed) == 0 {
		return "", nil
	}
	for nd, bs := range specs {
		idx := make([]int, len(bs))
		for i, b := range bs {
			idx[i] = b.Index
		}
		m.callNode(nd, wire.MethodPGReturn, &wire.BundlesRequest{Group: g.ID, Indexes: idx})
	}
	m.clearInflight(g.ID)
	slices.Sort(failed)
	return "a chosen node could not hold its bundles: " + strings.Join(failed, "; "), refused
}

// holdSpread returns why RESCHEDULING SPREAD group g waits instead of
// taking assignment got ("" when it need not): got puts a bundle it moves
// on a node holding another of g's bundles, and at time now g is within
// pgRespreadGrace of its loss and of this leader's start.
func (m *pgManager) holdSpread(g *store.PlacementGroup, got []string, now time.Time) string {
	if g.Strategy != sched.Spread || g.State != store.PGRescheduling || !colocatesMoved(got, g.Nodes) {
		return ""
	}
	since := time.Unix(0, g.StateChangedAt)
	if l := m.host.leaderSince(); l.After(since) {
		since = l
	}
	if now.Sub(since) >= pgRespreadGrace {
		return ""
	}
	return fmt.Sprintf("SPREAD: waiting up to %s for nodes to spread its lost bundles over (the nodes up hold its other bundles)", pgRespreadGrace)
}

// colocatesMoved reports whether assignment got puts a bundle whose node
// differs from was on the node of another bundle.
func colocatesMoved(got, was []string) bool {
	for i, nd := range got {
		if nd == was[i] {
			continue
		}
		for j, other := range got {
			if j != i && other == nd {
				return true
			}
		}
	}
	return false
}

func (m *pgManager) clearInflight(id string) {
	m.mu.Lock()
	delete(m.inflight, id)
	m.mu.Unlock()
}

func (m *pgManager) isInflight(group, node string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.inflight[group][node]
	return ok
}

// eachNode calls method with each node's bundles, concurrently when there
// are several nodes, and returns each node's error (nil: OK).
func (m *pgManager) eachNode(specs map[string][]wire.BundleSpec, method, group string) map[string]error {
	out := make(map[string]error, len(specs))
	if len(specs) == 1 {
		for nd, bs := range specs {
			out[nd] = m.callNode(nd, method, &wire.BundlesRequest{Group: group, Bundles: bs})
		}
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for nd, bs := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.callNode(nd, method, &wire.BundlesRequest{Group: group, Bundles: bs})
			mu.Lock()
			out[nd] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// callNode runs one bundle request on a node: directly on this node,
// through RPC elsewhere. A refusal (not enough free) is an error too.
func (m *pgManager) callNode(nodeID, method string, req *wire.BundlesRequest) error {
	var rep *wire.BundlesReply
	if nodeID == m.host.selfID() {
		var err error
		if rep, err = m.host.bundlesHere(method, req); err != nil {
			return err
		}
	} else {
		nd, err := m.host.State().NodeByID(nodeID)
		if err != nil || nd == nil {
			return fmt.Errorf("node %s is not registered", nodeID)
		}
		ctx, cancel := context.WithTimeout(m.host.lifetime(), pgPhaseTimeout)
		defer cancel()
		rep = &wire.BundlesReply{}
		if err := m.host.callNode(ctx, nd.Address, method, req, rep); err != nil {
			return fmt.Errorf("node %s: %s: %w", nd.Name, method, err)
		}
	}
	if !rep.OK && method != wire.MethodPGReturn {
		return errors.New(rep.Reason)
	}
	return nil
}

// startCommit marks g as having node commits under way; Get waits for it.
func (m *pgManager) startCommit(id string) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan struct{})
	m.committing[id] = ch
	return ch
}

func (m *pgManager) finishCommit(id string, ch chan struct{}) {
	m.mu.Lock()
	if m.committing[id] == ch {
		delete(m.committing, id)
	}
	m.mu.Unlock()
	close(ch)
}

func (m *pgManager) committingCh(id string) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.committing[id]
}

// commitOnNodes is phase two: every node holding bundles of the (committed)
// group g offers them. A node that cannot (it restarted and its free pool
// is taken meanwhile) loses those bundles, which are placed again.
func (m *pgManager) commitOnNodes(g *store.PlacementGroup) {
	specs := map[string][]wire.BundleSpec{}
	for i, nd := range g.Nodes {
		if nd != "" {
			specs[nd] = append(specs[nd], wire.BundleSpec{Index: i, Resources: g.Bundles[i]})
		}
	}
	var lost []string
	for nd, err := range m.eachNode(specs, wire.MethodPGCommit, g.ID) {
		if err == nil {
			continue
		}
		var re *rpc.Error
		if errors.As(err, &re) || rpc.IsTransport(err) {
			// The node is unreachable or failing: gossip decides whether it
			// is dead; the next heartbeat retries the commit otherwise.
			m.host.log().Warn("commit placement group bundles", "group", g.ID, "node", nd, "err", err)
			continue
		}
		m.host.log().Warn("node could not hold committed bundles; placing them again", "group", g.ID, "node", nd, "err", err)
		lost = append(lost, nd)
	}
	if len(lost) > 0 {
		if err := m.write(store.PlacementGroupOp{Kind: store.PGOpLose, ID: g.ID, Nodes: lost, At: time.Now().UnixNano()}); err != nil {
			m.host.log().Warn("record lost bundles", "group", g.ID, "err", err)
		}
		m.wake()
	}
}

// returnBundles has each distinct node in nodes give back the group's
// bundles (indexes nil: all of them). The error joins each node's failure
// (also logged); a node that failed releases them itself once its
// heartbeat shows bundles no committed group owns (nodeReport).
func (m *pgManager) returnBundles(group string, nodes []string, indexes []int) error {
	specs := map[string][]wire.BundleSpec{}
	for _, nd := range nodes {
		if nd != "" {
			specs[nd] = nil
		}
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for nd := range specs {
		if nd == m.host.selfID() {
			m.host.returnBundlesHere(group, indexes)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.callNode(nd, wire.MethodPGReturn, &wire.BundlesRequest{Group: group, Indexes: indexes}); err != nil {
				m.host.log().Warn("return placement group bundles", "group", group, "node", nd, "err", err)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
