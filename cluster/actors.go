package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// Actor placement tuning: how long one start attempt on a node may take
// (process start + constructor), how often a pending actor is retried, and
// how long ending an actor (its DEAD record and its worker's exit) may take.
const (
	actorStartTimeout = 2 * time.Minute
	actorRetryEvery   = 500 * time.Millisecond
	actorStopTimeout  = 8 * time.Second
)

// actorManager is the leader's actor authority (Ray's GcsActorManager): it
// registers actors in Raft, places them on nodes, and turns worker and node
// deaths into restarts or DEAD records. One lock per actor orders the
// transitions of that actor; different actors proceed in parallel, so their
// Raft writes batch.
type actorManager struct {
	host       actorHost
	mu         sync.Mutex
	locks      map[string]*actorLock // per-actor lock, while anyone holds or waits for it
	scheduling map[string]bool       // actors with a placement goroutine running
	// starts are the start calls in flight, by node ID and actor ID: a node
	// declared dead meanwhile ends them (abandonLostStarts).
	starts map[string]map[string]context.CancelCauseFunc
	// spreadNext is SPREAD's round-robin position for actors (held by mu).
	spreadNext int
	retry      retrier // wakes the leader's retry of pending actors
}

func newActorManager(host actorHost) *actorManager {
	return &actorManager{host: host, locks: map[string]*actorLock{}, scheduling: map[string]bool{},
		starts: map[string]map[string]context.CancelCauseFunc{}, retry: newRetrier()}
}

// nodeLostError ends a start call whose node the cluster declared dead
// (or left) while the call was in flight.
type nodeLostError struct {
	node   string
	status store.NodeStatus
}

func (e *nodeLostError) Error() string {
	return fmt.Sprintf("its node %s was declared %s while the actor started there", e.node, e.status)
}

// trackStart returns ctx for a start call of actor id on node nd, ended
// with a nodeLostError once the leader records nd not live (at once when it
// is not live now), and the function that stops tracking it.
func (m *actorManager) trackStart(ctx context.Context, nd wire.NodeInfo, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	m.mu.Lock()
	if m.starts[nd.NodeID] == nil {
		m.starts[nd.NodeID] = map[string]context.CancelCauseFunc{}
	}
	m.starts[nd.NodeID][id] = cancel
	m.mu.Unlock()
	if cur, err := m.host.State().NodeByID(nd.NodeID); err == nil && cur != nil && !cur.Status.Live() {
		cancel(&nodeLostError{node: nd.NodeName, status: cur.Status})
	}
	return ctx, func() {
		m.mu.Lock()
		delete(m.starts[nd.NodeID], id)
		if len(m.starts[nd.NodeID]) == 0 {
			delete(m.starts, nd.NodeID)
		}
		m.mu.Unlock()
		cancel(nil)
	}
}

// abandonLostStarts ends the start calls in flight on nodes the table no
// longer lists as live, so their actors are placed elsewhere without
// waiting for a node that stopped answering.
func (m *actorManager) abandonLostStarts(st *store.StateStore) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for nodeID, calls := range m.starts {
		nd, err := st.NodeByID(nodeID)
		if err != nil || nd == nil || nd.Status.Live() {
			continue
		}
		for id, cancel := range calls {
			m.host.log().Warn("abandoning actor start on a lost node", "actor", id, "node", nd.Name, "status", nd.Status)
			cancel(&nodeLostError{node: nd.Name, status: nd.Status})
		}
	}
}

// lock takes actor id's lock and returns its unlock.
func (m *actorManager) lock(id string) func() {
	unlock, _ := m.lockCtx(context.Background(), id)
	return unlock
}

// actorLock is one actor's lock: held while tok holds a token; users
// counts its holder and waiters, and the last one out deletes it, so the
// map holds only actors being worked on.
type actorLock struct {
	tok   chan struct{}
	users int // guarded by actorManager.mu
}

// lockCtx takes actor id's lock, or gives up when ctx ends (a placement
// holds the lock while the actor's constructor runs) with ctx's error.
func (m *actorManager) lockCtx(ctx context.Context, id string) (func(), error) {
	m.mu.Lock()
	l := m.locks[id]
	if l == nil {
		l = &actorLock{tok: make(chan struct{}, 1)}
		m.locks[id] = l
	}
	l.users++
	m.mu.Unlock()
	leave := func() {
		m.mu.Lock()
		if l.users--; l.users == 0 {
			delete(m.locks, id)
		}
		m.mu.Unlock()
	}
	select {
	case l.tok <- struct{}{}:
		return func() {
			<-l.tok
			leave()
		}, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

func actorInfo(a *store.Actor) wire.ActorInfo {
	return wire.ActorInfo{ActorID: a.ID, JobID: a.JobID, Class: a.Class, Name: a.Name, Namespace: a.Namespace, State: string(a.State),
		DeathCause: a.DeathCause, PendingReason: a.PendingReason, Infeasible: infeasibleIf(a.Infeasible, a.PendingReason), Detached: a.Detached, Incarnation: a.Restarts,
		MaxRestarts: a.MaxRestarts, MaxTaskRetries: a.MaxTaskRetries, MaxConcurrency: a.MaxConcurrency, Resources: a.Resources,
		NodeID: a.NodeID, NodeName: a.NodeName, NodeAddr: a.NodeAddr, WorkerAddr: a.WorkerAddr, PID: a.PID}
}

func (n *Node) actorEndpoints() {
	handleLeader(n, wire.MethodActorCreate, n.actorCreate)
	handleLeader(n, wire.MethodActorGet, n.actorGet)
	handleLeader(n, wire.MethodActorList, func(ctx context.Context, _ *wire.Empty) (*wire.ActorList, error) {
		all, err := n.fsm.State().Actors()
		if err != nil {
			return nil, err
		}
		out := &wire.ActorList{Actors: make([]wire.ActorInfo, 0, len(all))}
		for _, a := range all {
			out.Actors = append(out.Actors, actorInfo(a))
		}
		return out, nil
	})
	handleLeader(n, wire.MethodActorKill, n.actorKill)
	handleLeader(n, wire.MethodActorDied, func(ctx context.Context, r *wire.ActorDiedRequest) (*wire.Empty, error) {
		n.actors.died(r.ActorID, r.Incarnation, r.Cause)
		return &wire.Empty{}, nil
	})
	handleLeader(n, wire.MethodActorJobDone, func(ctx context.Context, r *wire.JobFinishRequest) (*wire.Empty, error) {
		n.actors.jobDone(r.JobID)
		n.pgs.jobDone(r.JobID)
		// Here, not on the driver's node: that one may hold no Raft
		// state to find the token and the job's detached actors in.
		n.revokeJobToken(r.JobID)
		return &wire.Empty{}, nil
	})
	n.actorNodeEndpoints()
}

// actorCreate validates and registers an actor; placement follows in the
// background, so creation returns after one Raft write (as Ray returns the
// handle before the actor is alive).
func (n *Node) actorCreate(ctx context.Context, req *wire.ActorCreateRequest) (*wire.ActorCreateReply, error) {
	bad := func(format string, a ...any) (*wire.ActorCreateReply, error) {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf(format, a...)}
	}
	switch {
	case req.Constructor == "":
		return bad("actor creation needs a constructor")
	case wire.CheckLanguage(req.Language, req.BinaryHash) != nil:
		return bad("actor creation: %v", wire.CheckLanguage(req.Language, req.BinaryHash))
	case req.MaxRestarts < -1:
		return bad("actor %s: MaxRestarts %d: use -1 (forever) or more", req.Class, req.MaxRestarts)
	case req.MaxTaskRetries < -1:
		return bad("actor %s: MaxTaskRetries %d: use -1 (forever) or more", req.Class, req.MaxTaskRetries)
	case req.MaxConcurrency < 1:
		return bad("actor %s: MaxConcurrency %d: must be at least 1", req.Class, req.MaxConcurrency)
	}
	if err := checkNonNegative(req.Resources); err != nil {
		return bad("actor %s: %v", req.Class, err)
	}
	if err := wire.ValidateEnvVars(req.EnvVars); err != nil {
		return bad("actor %s: runtime env: %v", req.Class, err)
	}
	if err := policyStrategy(req.Strategy).Validate(); err != nil {
		return bad("actor %s: %v", req.Class, err)
	}
	id := newID()[:24]
	if req.ActorID != "" {
		if !wire.IsHexID(req.ActorID) {
			return bad("actor ID %q: use 8 to 64 hex digits", req.ActorID)
		}
		id = req.ActorID
	}
	args, err := msgpack.Marshal(req.Args)
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixNano()
	a := store.Actor{ID: id, JobID: req.JobID, Class: req.Class, Name: req.Name, Namespace: req.Namespace,
		State: store.ActorPending, Detached: req.Detached, MaxRestarts: req.MaxRestarts, MaxTaskRetries: req.MaxTaskRetries,
		MaxConcurrency: req.MaxConcurrency, Resources: req.Resources, StrategyKind: req.Strategy.Kind, StrategyNode: req.Strategy.NodeID,
		StrategySoft: req.Strategy.Soft, Labels: req.Strategy.Labels, SoftLabels: req.Strategy.SoftLabels, Constructor: req.Constructor, Args: args, BinaryHash: req.BinaryHash, BinaryNode: req.BinaryNode,
		OwnerAddr: req.OwnerAddr, EnvVars: req.EnvVars, JobNamespace: req.JobNamespace, Language: req.Language, Code: req.Code,
		CreatedAt: now, StateChangedAt: now}
	res, err := n.apply(store.ActorRegisterType, &store.ActorRegisterRequest{Actor: a, GetIfExists: req.GetIfExists})
	if err != nil {
		if errors.Is(err, store.ErrActorNameTaken) {
			return nil, &rpc.Error{Code: wire.CodeAlreadyExists, Err: err,
				Message: fmt.Sprintf("actor name %q is taken in namespace %q (use GetIfExists to get that actor)", req.Name, req.Namespace)}
		}
		return nil, err
	}
	r := res.(*store.ActorRegisterResult)
	if !r.Existing {
		n.logger.Debug("actor registered", "actor", r.ID, "class", req.Class, "name", req.Name)
		n.actors.schedule(r.ID)
	}
	return &wire.ActorCreateReply{ActorID: r.ID, Existing: r.Existing}, nil
}

// actorGet answers a lookup, waiting (see wire.ActorGetRequest) on the
// watch set of the actor's record, never polling. An unknown ID is waited
// for too: unnamed actors register in the background.
func (n *Node) actorGet(ctx context.Context, req *wire.ActorGetRequest) (*wire.ActorInfo, error) {
	var info wire.ActorInfo
	if err := n.longPoll(ctx, req.WaitMillis, n.actorLook(req, &info)); err != nil {
		return nil, err
	}
	return &info, nil
}

// actorLook is actorGet's lookup: it fills info, watching the actor's
// record in ws, and says whether the wait is over.
func (n *Node) actorLook(req *wire.ActorGetRequest, info *wire.ActorInfo) func(ws memdb.WatchSet) (bool, error) {
	st := n.fsm.State()
	return func(ws memdb.WatchSet) (bool, error) {
		var a *store.Actor
		var err error
		if req.ActorID != "" {
			a, err = st.ActorByIDWatch(ws, req.ActorID)
		} else {
			a, err = st.ActorByNameWatch(ws, req.Namespace, req.Name)
		}
		switch {
		case err != nil:
			return false, err
		case a == nil && req.ActorID != "":
			return false, errNotYet{&rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("no actor with ID %s", req.ActorID)}}
		case a == nil:
			return false, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("no live actor named %q in namespace %q", req.Name, req.Namespace)}
		}
		*info = actorInfo(a)
		return a.State == store.ActorDead || (a.State == store.ActorAlive && a.Restarts != req.NotIncarnation), nil
	}
}

func (n *Node) actorKill(ctx context.Context, req *wire.ActorKillRequest) (*wire.Empty, error) {
	m := n.actors
	unlock := m.lock(req.ActorID)
	a, err := n.fsm.State().ActorByID(req.ActorID)
	if err != nil {
		unlock()
		return nil, err
	}
	if a == nil {
		unlock()
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("no actor with ID %s", req.ActorID)}
	}
	if a.State == store.ActorDead {
		unlock()
		return &wire.Empty{}, nil
	}
	if req.NoRestart || a.State != store.ActorAlive {
		m.setDead(a, "killed by Kill (no restart)")
	}
	unlock()
	// The worker's exit is reported back as a death: the actor restarts
	// unless it is DEAD already.
	if a.NodeAddr != "" {
		if err := n.pool.Call(ctx, a.NodeAddr, wire.MethodActorStop, &wire.ActorStopRequest{ActorID: a.ID}, nil); err != nil {
			n.logger.Warn("stop killed actor's worker", "actor", a.ID, "node", a.NodeName, "err", err)
		}
	}
	return &wire.Empty{}, nil
}

// setDead records a DEAD with cause; the caller holds the actor's lock. The
// error (logged too) says the Raft write failed; DEAD already is no error.
func (m *actorManager) setDead(a *store.Actor, cause string) error {
	d := a.Copy()
	d.State, d.DeathCause, d.StateChangedAt = store.ActorDead, cause, time.Now().UnixNano()
	if _, err := m.host.apply(store.ActorUpdateType, &store.ActorUpdateRequest{Actor: *d}); err != nil && !errors.Is(err, store.ErrActorDead) {
		m.host.log().Warn("record actor death", "actor", a.ID, "err", err)
		return fmt.Errorf("record actor %s dead: %w", a.ID, err)
	}
	m.host.log().Info("actor dead", "actor", a.ID, "class", a.Class, "name", a.Name, "cause", cause)
	return nil
}

// died turns the loss of incarnation inc of an actor into a restart (with
// restarts left, as Ray's max_restarts) or a DEAD record.
func (m *actorManager) died(id string, inc int, cause string) {
	_ = m.diedCtx(context.Background(), id, inc, cause)
}

// diedCtx is died giving up when ctx ends before it has the actor's lock
// (a placement holds it while the constructor runs); the error names the
// actor and says which step failed. A failed Raft write is logged and not
// returned: the next check of the actor retries it.
func (m *actorManager) diedCtx(ctx context.Context, id string, inc int, cause string) error {
	unlock, err := m.lockCtx(ctx, id)
	if err != nil {
		return fmt.Errorf("actor %s: record its loss (%s): %w", id, cause, err)
	}
	defer unlock()
	a, err := m.host.State().ActorByID(id)
	if err != nil || a == nil || a.State == store.ActorDead || a.Restarts != inc {
		return err // unknown, final, or a report about an older incarnation
	}
	if m.restartLocked(a, cause) {
		m.schedule(id)
	}
	return nil
}

// restartLocked records the loss of actor a's current incarnation with
// cause, as one restart: RESTARTING in the next incarnation (true: it needs
// placing) or, with no restarts left, DEAD. The caller holds a's lock. A
// failed Raft write is logged (false).
func (m *actorManager) restartLocked(a *store.Actor, cause string) bool {
	if a.MaxRestarts >= 0 && a.Restarts >= a.MaxRestarts {
		m.setDead(a, fmt.Sprintf("%s; no restarts left (max restarts %d)", cause, a.MaxRestarts))
		return false
	}
	r := a.Copy()
	r.State, r.Restarts, r.DeathCause, r.StateChangedAt = store.ActorRestarting, a.Restarts+1, cause, time.Now().UnixNano()
	r.NodeID, r.NodeName, r.NodeAddr, r.WorkerAddr, r.WorkerID, r.PID, r.NodeIncarnation = "", "", "", "", "", 0, 0
	if _, err := m.host.apply(store.ActorUpdateType, &store.ActorUpdateRequest{Actor: *r}); err != nil {
		m.host.log().Warn("record actor restart", "actor", a.ID, "err", err)
		return false
	}
	m.host.log().Info("actor restarting", "actor", a.ID, "class", a.Class, "restart", r.Restarts, "cause", cause)
	return true
}

// jobDone ends the actors a finished job owned, except detached ones (Ray's
// owner-based actor lifetime).
func (m *actorManager) jobDone(job string) {
	all, err := m.host.State().LiveActors()
	if err != nil {
		return
	}
	for _, a := range all {
		if a.JobID == job && !a.Detached {
			ctx, cancel := context.WithTimeout(m.host.lifetime(), actorStopTimeout)
			if err := m.end(ctx, a.ID, fmt.Sprintf("its owner, job %s, finished (create it detached to outlive its job)", job)); err != nil {
				m.host.log().Warn("end a finished job's actor", "actor", a.ID, "job", job, "err", err)
			}
			cancel()
		}
	}
}

// end records actor id DEAD with cause, as it is when its lock is taken
// (unless it is DEAD already), and stops its worker process if it has one
// (also when DEAD already: whoever recorded that may not have stopped it
// yet), returning once the process has exited and its lease is released.
// The error names the actor and what did not happen before ctx ended (its
// lock was held, as by a placement running its constructor; the DEAD
// record; its node's stop).
func (m *actorManager) end(ctx context.Context, id, cause string) error {
	unlock, err := m.lockCtx(ctx, id)
	if err != nil {
		return fmt.Errorf("actor %s: still being placed (its constructor is running): %w", id, err)
	}
	a, err := m.host.State().ActorByID(id)
	if err != nil || a == nil {
		unlock()
		return err
	}
	if a.State != store.ActorDead {
		err = m.setDead(a, cause)
	}
	unlock()
	if err != nil {
		return err
	}
	if a.NodeAddr == "" {
		return nil
	}
	if err := m.host.callNode(ctx, a.NodeAddr, wire.MethodActorStop, &wire.ActorStopRequest{ActorID: a.ID}, nil); err != nil {
		return fmt.Errorf("actor %s: stop its worker (pid %d) on node %s: %w", a.ID, a.PID, a.NodeName, err)
	}
	return nil
}

// run retries pending actors while this node leads (ctx is the term): it
// first restarts the actors on nodes that died while no leader looked, then
// places every PENDING and RESTARTING actor with no placement running, at
// once, every actorRetryEvery and on wake.
func (m *actorManager) run(ctx context.Context) {
	m.checkNodes()
	m.retry.run(ctx, actorRetryEvery, m.placePending)
}

// placePending starts a placement round for every PENDING and RESTARTING
// actor that has none running.
func (m *actorManager) placePending(ctx context.Context) {
	waiting, err := m.host.State().WaitingActors()
	if err != nil {
		m.host.log().Warn("actor retry: read waiting actors", "err", err)
		return
	}
	for _, a := range waiting {
		if ctx.Err() != nil {
			return
		}
		m.schedule(a.ID)
	}
}

// checkNodes restarts (or ends) ALIVE actors whose node is dead or left,
// or registered again in a later incarnation (lostWith), and abandons the
// starts in flight on nodes that are no longer live.
func (m *actorManager) checkNodes() {
	st := m.host.State()
	m.abandonLostStarts(st)
	all, err := st.LiveActors()
	if err != nil {
		return
	}
	for _, a := range all {
		if a.State != store.ActorAlive {
			continue
		}
		// A node not in the table yet (it registers after it starts serving)
		// is not a dead one.
		nd, err := st.NodeByID(a.NodeID)
		if err != nil || nd == nil {
			continue
		}
		if cause := lostWith(a, nd.Status, nd.Incarnation); cause != "" {
			m.host.leaderGo("actor-died", func(context.Context) { m.died(a.ID, a.Restarts, cause) })
		}
	}
}

// nodeRestarted restarts (or ends) the ALIVE actors that node id ran in an
// incarnation before inc, before the leader records that registration, so
// no reader sees the new incarnation with such an actor still ALIVE in its
// gone process. The error names the actors it could not handle before ctx
// ended (checkNodes handles them later).
func (m *actorManager) nodeRestarted(ctx context.Context, id string, inc uint64) error {
	all, err := m.host.State().LiveActors()
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range all {
		if a.State != store.ActorAlive || a.NodeID != id {
			continue
		}
		if cause := lostWith(a, store.NodeAlive, inc); cause != "" {
			errs = append(errs, m.diedCtx(ctx, a.ID, a.Restarts, cause))
		}
	}
	return errors.Join(errs...)
}

// lostWith returns why ALIVE actor a is lost when its node has status and
// incarnation inc ("" when it is not): the node is dead or left, or it
// restarted since it started a (a record without the node's incarnation is
// judged by status alone).
func lostWith(a *store.Actor, status store.NodeStatus, inc uint64) string {
	switch {
	case !status.Live():
		return fmt.Sprintf("its node %s is %s", a.NodeName, status)
	case a.NodeIncarnation != 0 && inc > a.NodeIncarnation:
		return fmt.Sprintf("its node %s restarted (incarnation %d; the actor ran in incarnation %d, worker pid %d)",
			a.NodeName, inc, a.NodeIncarnation, a.PID)
	}
	return ""
}

// stale returns the actors node nodeID reports running that the table has
// moved past: ended (DEAD), restarted as a newer incarnation, or alive in
// the same incarnation on another node. This is how a node cut off long
// enough for its actors to be restarted elsewhere learns, once it is back,
// to stop the old processes. An incarnation the table has not recorded yet
// (placement in flight) or does not know is left alone.
func (m *actorManager) stale(nodeID string, held []wire.ActorHeld) []wire.StaleActor {
	var out []wire.StaleActor
	st := m.host.State()
	for _, h := range held {
		a, err := st.ActorByID(h.ID)
		if err != nil || a == nil {
			continue
		}
		s := wire.StaleActor{ActorHeld: h}
		switch {
		case a.Restarts > h.Incarnation:
			s.Reason = fmt.Sprintf("incarnation %d replaced it (%s)", a.Restarts, a.DeathCause)
		case a.Restarts < h.Incarnation:
			continue
		case a.State == store.ActorDead:
			s.Reason = "the actor is DEAD: " + a.DeathCause
		case a.State == store.ActorAlive && a.NodeID != nodeID:
			s.Reason, s.JobLives = fmt.Sprintf("this incarnation is alive on node %s", a.NodeName), true
		default:
			continue
		}
		out = append(out, s)
	}
	return out
}

// schedule starts a placement round of a pending actor in the leader's
// term unless one runs; the retry loop (run) starts the next rounds.
func (m *actorManager) schedule(id string) {
	m.mu.Lock()
	if m.scheduling[id] {
		m.mu.Unlock()
		return
	}
	m.scheduling[id] = true
	m.mu.Unlock()
	unmark := func() {
		m.mu.Lock()
		delete(m.scheduling, id)
		m.mu.Unlock()
	}
	if !m.host.leaderGo("actor-place", func(ctx context.Context) {
		defer unmark()
		m.place(ctx, id)
	}) {
		unmark()
	}
}

// place runs one placement round for the actor, unless the term (ctx)
// ended or the actor is no longer waiting: one node runs it, or the reason
// it waits is recorded.
func (m *actorManager) place(ctx context.Context, id string) {
	if ctx.Err() != nil {
		return
	}
	a, err := m.host.State().ActorByID(id)
	if err != nil || a == nil || (a.State != store.ActorPending && a.State != store.ActorRestarting) {
		return
	}
	if why, done := m.placeRound(a); !done {
		m.setPending(id, why)
	}
}

// pending is why an actor waits for a node: the reason, and whether no
// node can ever hold it.
type pending struct {
	reason     string
	infeasible bool
}

// placeRound asks the placement policy for a node and tries it, then the
// policy's next choice without it, until a node runs the actor or placement
// is over (done), or no node is left to try; why then says why the actor
// waits.
func (m *actorManager) placeRound(a *store.Actor) (why pending, done bool) {
	view, r, reason, gone := m.placement(a)
	if gone {
		m.endUnplaceable(a.ID, reason)
		return pending{}, true
	}
	snap := snapshotOf(view, ownerNode(view, a.BinaryNode))
	var ruledOut []string
	tried := 0
	for ; ; tried++ {
		d, err := m.decide(snap, r)
		if err != nil && tried == 0 {
			return pending{reason: noPlaceReason(err), infeasible: errors.Is(err, sched.ErrInfeasible)}, false
		}
		if err != nil {
			break
		}
		nd := nodeInView(view, d.Node)
		ok, stop, infeasible := m.tryNode(a, *nd)
		if ok || stop {
			return pending{}, true
		}
		if infeasible != "" {
			ruledOut = append(ruledOut, nd.NodeName+": "+infeasible)
		}
		for i := range snap.Nodes {
			if snap.Nodes[i].ID == d.Node {
				snap.Nodes[i].Alive = false // tried this round
			}
		}
	}
	if len(ruledOut) == tried {
		// Every node the policy chose says its device layout never can
		// hold it: infeasible, as a task would be told.
		return pending{reason: strings.Join(ruledOut, "; "), infeasible: true}, false
	}
	return pending{reason: fmt.Sprintf("waiting for a node with %s free", a.Resources)}, false
}

// decide runs the placement policy once, advancing the leader's SPREAD
// position for actors.
func (m *actorManager) decide(snap sched.Snapshot, r sched.Request) (sched.Decision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	snap.SpreadNext = m.spreadNext
	d, err := sched.Decide(snap, r, newRand())
	if err == nil {
		m.spreadNext = d.SpreadNext
	}
	return d, err
}

// endUnplaceable records actor id DEAD because it can never be placed
// (its placement group is removed or unknown), unless it is ALIVE or DEAD
// already.
func (m *actorManager) endUnplaceable(id, reason string) {
	unlock := m.lock(id)
	defer unlock()
	if cur, err := m.host.State().ActorByID(id); err == nil && cur != nil && cur.State != store.ActorDead && cur.State != store.ActorAlive {
		m.setDead(cur, "it cannot be placed: "+reason)
	}
}

// ownerNode is the ID of the node at address addr in view (the actor's
// owner's node, which the hybrid policy prefers), or "".
func ownerNode(view []wire.NodeInfo, addr string) string {
	for _, nd := range view {
		if nd.Addr == addr {
			return nd.NodeID
		}
	}
	return ""
}

// setPending records why a PENDING or RESTARTING actor waits.
func (m *actorManager) setPending(id string, why pending) {
	unlock := m.lock(id)
	defer unlock()
	a, err := m.host.State().ActorByID(id)
	if err != nil || a == nil || a.State == store.ActorDead || a.State == store.ActorAlive ||
		(a.PendingReason == why.reason && a.Infeasible == why.infeasible) {
		return
	}
	a.PendingReason, a.Infeasible = why.reason, why.infeasible
	_, _ = m.host.apply(store.ActorUpdateType, &store.ActorUpdateRequest{Actor: *a})
	if why.reason != "" {
		m.host.log().Info("actor pending", "actor", id, "class", a.Class, "reason", why.reason, "infeasible", why.infeasible)
	}
}

// tryNode asks one node to run the actor. ok: it runs there now (recorded
// ALIVE); infeasible: the node says it can never hold it, and why; stop:
// placement is over for another reason (constructor failed,
// actor killed meanwhile).
func (m *actorManager) tryNode(a *store.Actor, nd wire.NodeInfo) (ok, stop bool, infeasible string) {
	unlock := m.lock(a.ID)
	defer unlock()
	cur, err := m.host.State().ActorByID(a.ID)
	if err != nil || cur == nil || cur.State == store.ActorDead || cur.State == store.ActorAlive {
		return false, true, ""
	}
	var args []wire.Arg
	_ = msgpack.Unmarshal(cur.Args, &args)
	ctx, cancel := context.WithTimeout(m.host.lifetime(), actorStartTimeout)
	defer cancel()
	ctx, untrack := m.trackStart(ctx, nd, cur.ID)
	defer untrack()
	var rep wire.ActorStartReply
	err = m.host.callNode(ctx, nd.Addr, wire.MethodActorStart, &wire.ActorStartRequest{ActorID: cur.ID, Incarnation: cur.Restarts,
		JobID: cur.JobID, Class: cur.Class, Resources: cur.Resources, Constructor: cur.Constructor, Args: args,
		MaxConcurrency: cur.MaxConcurrency, BinaryHash: cur.BinaryHash, BinaryNode: cur.BinaryNode, EnvVars: cur.EnvVars, JobNamespace: cur.JobNamespace,
		Language: cur.Language, Code: cur.Code}, &rep)
	var lost *nodeLostError
	switch {
	case errors.As(context.Cause(ctx), &lost):
		// Declared dead mid-start: whatever it started there is stale from
		// now on (the next incarnation replaces it, and its heartbeat, if it
		// comes back, stops it), and the actor goes elsewhere.
		m.host.log().Warn("start actor on node abandoned", "actor", cur.ID, "node", nd.NodeName, "incarnation", cur.Restarts, "cause", lost)
		m.restartLocked(cur, lost.Error())
		return false, false, ""
	case isCode(err, wire.CodeRuntimeEnvSetupFailed):
		// Its working dir is refused or lost: no node can start it.
		m.setDead(cur, fmt.Sprintf("its runtime env could not be set up on node %s: %v", nd.NodeName, err))
		return false, true, ""
	case err != nil:
		m.host.log().Warn("start actor on node failed", "actor", cur.ID, "node", nd.NodeName, "err", err)
		return false, false, ""
	case rep.Infeasible != nil:
		return false, false, rep.Infeasible.Why()
	case rep.Busy:
		return false, false, ""
	case rep.Error != nil:
		msg := rep.Error.Message
		if rep.Error.Panic {
			msg = "panic: " + msg
		}
		m.setDead(cur, fmt.Sprintf("its constructor failed on node %s: %s", nd.NodeName, msg))
		return false, true, ""
	}
	if cause := m.groupRemoved(cur); cause != "" {
		// Its group was removed while it started, and the removal could not
		// wait for this start to end it: end it here.
		_ = m.host.callNode(ctx, nd.Addr, wire.MethodActorStop, &wire.ActorStopRequest{ActorID: cur.ID}, nil)
		_ = m.setDead(cur, cause)
		return false, true, ""
	}
	r := cur.Copy()
	r.State, r.PendingReason, r.Infeasible, r.StateChangedAt = store.ActorAlive, "", false, time.Now().UnixNano()
	r.NodeID, r.NodeName, r.NodeAddr, r.WorkerAddr, r.WorkerID, r.PID = rep.NodeID, rep.NodeName, rep.NodeAddr, rep.WorkerAddr, rep.WorkerID, rep.PID
	r.NodeIncarnation = rep.NodeIncarnation
	if _, err := m.host.apply(store.ActorUpdateType, &store.ActorUpdateRequest{Actor: *r}); err != nil {
		m.host.log().Warn("record actor alive", "actor", cur.ID, "err", err)
		_ = m.host.callNode(ctx, nd.Addr, wire.MethodActorStop, &wire.ActorStopRequest{ActorID: cur.ID}, nil)
		return false, true, ""
	}
	m.host.log().Debug("actor alive", "actor", cur.ID, "class", cur.Class, "node", rep.NodeName, "pid", rep.PID)
	return true, false, ""
}

// groupRemoved returns the death cause of an actor whose placement group is
// removed, as the removal records it; "" when it is in no group or in one
// that is not removed.
func (m *actorManager) groupRemoved(a *store.Actor) string {
	pg, _, ok := sched.PlacementGroupOf(a.Resources)
	if !ok {
		return ""
	}
	if g, err := m.host.State().PlacementGroupByID(pg); err != nil || g == nil || g.State != store.PGRemoved {
		return ""
	}
	return pgRemovedCause(pg)
}

// placement gathers what the policy needs to place a: the leader's view
// and a's request, with the nodes holding its bundle when it is in a
// placement group (gone: the group is removed or unknown, or the bundle
// index does not exist; reason says which).
func (m *actorManager) placement(a *store.Actor) (view []wire.NodeInfo, r sched.Request, reason string, gone bool) {
	view = m.host.actorPlacementView()
	r = sched.Request{Demand: a.Resources, Strategy: sched.Strategy{Kind: sched.StrategyKind(a.StrategyKind),
		Node: a.StrategyNode, Soft: a.StrategySoft, Labels: a.Labels, SoftLabels: a.SoftLabels}}
	pg, idx, ok := sched.PlacementGroupOf(a.Resources)
	if !ok {
		return view, r, "", false
	}
	ctx, cancel := context.WithTimeout(m.host.lifetime(), pgPhaseTimeout)
	defer cancel()
	bundles, reason, gone := m.host.bundleNodes(ctx, pg, idx)
	view, r.Bundle = withBundleNodes(view, bundles)
	r.Bundle.Group, r.Bundle.Reason = pg, reason
	return view, r, reason, gone
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
