package cluster

import (
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// localSched is the node's local scheduler (Ray's raylet ClusterTaskManager,
// reduced): it owns this node's resource pool, grants worker leases against
// it, queues what fits later, and lends a blocked task's CPU back. Every
// grant and release happens under one mutex, so custom resources are exact
// under any concurrency.
type localSched struct {
	mu      sync.Mutex
	total   sched.ResourceSet
	avail   sched.ResourceSet
	leases  map[uint64]*lease
	queue   []*leaseWaiter
	nextID  uint64
	pending map[string]*pendingEntry // demands no node can satisfy, by description
	gpus    *gpu.Allocator           // this node's devices; nil without any (gpus.go)
	bundles map[string]*heldBundle   // placement-group bundles held here, by group/index
	// spreadNext is SPREAD's round-robin position (sched.Snapshot.SpreadNext).
	spreadNext int
}

type lease struct {
	id       uint64
	workerID string
	res      sched.ResourceSet
	lentCPU  sched.Quantity  // CPU given back while the task is blocked in Get
	gpus     *gpu.Assignment // devices for GPU demand; nil without (gpus.go)
	bundle   *bundleGPUs     // the placement-group bundle gpus came from; nil: the node's devices
	revoked  bool            // its placement-group bundle was returned: no further task may start under it
}

// revokedLease is a lease a bundle return revoked, and the worker serving
// it ("" while none is set: setWorker then refuses it).
type revokedLease struct {
	id       uint64
	workerID string
}

type leaseWaiter struct {
	res   sched.ResourceSet
	grant chan *lease // receives the lease once granted; closed when it never can be
}

// errUnfit is wait's error for a request the node can no longer ever grant
// (the placement-group bundle it waited for was returned).
var errUnfit = errors.New("the resources it waits for are gone from this node (its placement group was removed)")

type pendingEntry struct {
	d    wire.PendingDemand
	seen time.Time
}

func newLocalSched(total sched.ResourceSet) *localSched {
	return &localSched{total: total.Clone(), avail: total.Clone(), leases: map[uint64]*lease{}, pending: map[string]*pendingEntry{},
		bundles: map[string]*heldBundle{}}
}

// tryGrant reserves res now if it fits.
func (s *localSched) tryGrant(res sched.ResourceSet) *lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grantLocked(res)
}

func (s *localSched) grantLocked(res sched.ResourceSet) *lease {
	if !s.avail.Covers(res) {
		return nil
	}
	as, from, ok := s.assignGPUs(res)
	if !ok {
		return nil
	}
	s.avail.Sub(res)
	s.nextID++
	l := &lease{id: s.nextID, res: res.Clone(), gpus: as, bundle: from}
	s.leases[l.id] = l
	return l
}

// enqueue grants res now (a lease), or queues a waiter whose grant channel
// receives the lease later (nil if it never can be).
func (s *localSched) enqueue(res sched.ResourceSet) (*lease, *leaseWaiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.grantLocked(res); l != nil {
		return l, nil
	}
	w := &leaseWaiter{res: res, grant: make(chan *lease, 1)}
	s.queue = append(s.queue, w)
	return nil, w
}

// withdraw takes w out of the queue. A lease granted to it before that is
// returned: the caller uses or releases it.
func (s *localSched) withdraw(w *leaseWaiter) *lease {
	s.mu.Lock()
	if i := slices.Index(s.queue, w); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
	}
	s.mu.Unlock()
	select {
	case l := <-w.grant:
		return l
	default:
		return nil
	}
}

// dispatchLocked grants queued requests that fit now, in arrival order,
// letting smaller later ones pass a large head (no head-of-line blocking).
func (s *localSched) dispatchLocked() {
	s.queue = slices.DeleteFunc(s.queue, func(w *leaseWaiter) bool {
		l := s.grantLocked(w.res)
		if l != nil {
			w.grant <- l
		}
		return l != nil
	})
}

// release returns a lease's resources (minus any CPU still lent out).
func (s *localSched) release(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return false
	}
	delete(s.leases, id)
	s.releaseGPUs(l)
	back := l.res.Clone()
	back[sched.CPU] -= l.lentCPU
	for name := range back {
		// A placement-group bundle returned while the lease ran: its
		// renamed resources are gone, so they do not come back.
		if _, ok := s.total[name]; !ok {
			delete(back, name)
		}
	}
	s.avail.Add(back)
	s.dispatchLocked()
	return true
}

// releaseWorker returns every lease held by a worker that died.
func (s *localSched) releaseWorker(workerID string) int {
	s.mu.Lock()
	var ids []uint64
	for id, l := range s.leases {
		if l.workerID == workerID {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.release(id)
	}
	return len(ids)
}

// workerLeases counts the leases a worker holds.
func (s *localSched) workerLeases(workerID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := 0
	for _, l := range s.leases {
		if l.workerID == workerID {
			k++
		}
	}
	return k
}

// setWorker records which worker serves a lease. It returns false when the
// lease was revoked meanwhile (its placement-group bundle was returned), so
// it must not be handed out.
func (s *localSched) setWorker(id uint64, workerID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if ok {
		l.workerID = workerID
	}
	return ok && !l.revoked
}

// block lends a lease's CPU back to the pool while its task waits in Get, so
// nested tasks cannot deadlock the node (Ray's NotifyDirectCallTaskBlocked).
func (s *localSched) block(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok || l.lentCPU > 0 || l.res[sched.CPU] == 0 {
		return
	}
	l.lentCPU = l.res[sched.CPU]
	s.avail[sched.CPU] += l.lentCPU
	s.dispatchLocked()
}

// unblock takes the lent CPU back, even if that over-commits the node for a
// while (as Ray does): the task must resume.
func (s *localSched) unblock(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok || l.lentCPU == 0 {
		return
	}
	s.avail[sched.CPU] -= l.lentCPU
	l.lentCPU = 0
}

// covers reports whether the node's total (its bundles' renamed resources
// included) could ever hold res.
func (s *localSched) covers(res sched.ResourceSet) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total.Covers(res)
}

// totals returns a copy of the node's total, committed bundles included.
func (s *localSched) totals() sched.ResourceSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total.Clone()
}

// available returns a copy of the free pool.
func (s *localSched) available() sched.ResourceSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.avail.Clone()
}

// queued reports the waiting demand, for status.
func (s *localSched) queued() []wire.PendingDemand {
	s.mu.Lock()
	defer s.mu.Unlock()
	byKey := map[string]*wire.PendingDemand{}
	var out []wire.PendingDemand
	for _, w := range s.queue {
		k := w.res.String()
		if d, ok := byKey[k]; ok {
			d.Count++
			continue
		}
		byKey[k] = &wire.PendingDemand{Resources: w.res.Clone(), Count: 1, Reason: "waiting for resources"}
	}
	now := time.Now()
	for k, p := range s.pending {
		if now.Sub(p.seen) > 15*time.Second {
			delete(s.pending, k)
			continue
		}
		out = append(out, p.d)
	}
	for _, d := range byKey {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resources.String() < out[j].Resources.String() })
	return out
}

// noteInfeasible records a demand no node can satisfy, for status.
func (s *localSched) noteInfeasible(task string, res sched.ResourceSet, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := res.String() + "|" + reason
	p, ok := s.pending[k]
	if !ok {
		p = &pendingEntry{d: wire.PendingDemand{Resources: res.Clone(), Reason: reason, TaskName: task}}
		s.pending[k] = p
	}
	p.d.Count = 1
	p.seen = time.Now()
}
