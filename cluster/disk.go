package cluster

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// diskProbeFile is written, synced and removed by each probe of the data dir.
const diskProbeFile = ".write-probe"

// keyDiskProbe is the stable-store key each probe of raft.db writes; Raft
// ignores keys it does not know.
var keyDiskProbe = []byte("nodeup.write-probe")

// What a node writes to its data dir, tracked apart: bbolt may still commit
// a small stable-store write into free pages of raft.db while appending to
// the log fails.
const (
	writeRaftLog    = "the Raft log"          // StoreLogs, DeleteRange on raft.db
	writeRaftStable = "the Raft stable store" // term, vote and the probe key in raft.db
	writeDataDir    = "the data dir"          // the probe file
)

// DiskWriteError is a write to the node's data dir that failed (a full or
// read-only disk). While one lasts the node reports itself unhealthy
// (/v1/health), a leader hands leadership to another voter and the leader
// demotes the node to a non-voter; a later successful write of the same
// kind ends it.
type DiskWriteError struct {
	What  string    // what was written: "the Raft log", "the Raft stable store", "the data dir"
	Path  string    // the file written
	Since time.Time // the first failure of this run of failures
	Err   error     // the latest failure, e.g. ENOSPC
}

// Error names what was written, the file, since when, and the cause.
func (e *DiskWriteError) Error() string {
	return fmt.Sprintf("cannot write %s (%s) since %s: %v", e.What, e.Path, e.Since.Format(time.RFC3339), e.Err)
}

// Unwrap returns the latest failure.
func (e *DiskWriteError) Unwrap() error { return e.Err }

// diskHealth tracks, per kind of write, whether the node's latest write
// failed.
type diskHealth struct {
	mu     sync.Mutex
	failed map[string]DiskWriteError // by What
	faults map[string]error          // injected by tests: writes of this kind fail
	wake   chan struct{}             // signalled when a write starts failing
}

func newDiskHealth() *diskHealth {
	return &diskHealth{failed: map[string]DiskWriteError{}, faults: map[string]error{}, wake: make(chan struct{}, 1)}
}

// write runs fn, a write of kind what to path (unless a fault is injected),
// and records its outcome.
func (h *diskHealth) write(what, path string, fn func() error) error {
	h.mu.Lock()
	err := h.faults[what]
	h.mu.Unlock()
	if err == nil {
		err = fn()
	}
	h.record(what, path, err)
	return err
}

func (h *diskHealth) record(what, path string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur, failing := h.failed[what]
	switch {
	case err == nil:
		delete(h.failed, what)
		return
	case failing:
		cur.Err = err
		h.failed[what] = cur
		return
	}
	h.failed[what] = DiskWriteError{What: what, Path: path, Since: time.Now(), Err: err}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// err returns the longest-lasting failure, or nil.
func (h *diskHealth) err() *DiskWriteError {
	h.mu.Lock()
	defer h.mu.Unlock()
	var first *DiskWriteError
	for _, e := range h.failed {
		if first == nil || e.Since.Before(first.Since) {
			first = &e
		}
	}
	return first
}

// inject makes later writes of kind what fail with err (nil: stop); for
// tests.
func (h *diskHealth) inject(what string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.faults, what)
	} else {
		h.faults[what] = err
	}
}

// trackedStore is raft.db, Raft's log and stable store, with the outcome of
// every write recorded in the node's disk health.
type trackedStore struct {
	*raftboltdb.BoltStore
	path   string
	health *diskHealth
}

// StoreLog implements raft.LogStore.
func (s *trackedStore) StoreLog(l *raft.Log) error {
	return s.health.write(writeRaftLog, s.path, func() error { return s.BoltStore.StoreLog(l) })
}

// StoreLogs implements raft.LogStore.
func (s *trackedStore) StoreLogs(logs []*raft.Log) error {
	return s.health.write(writeRaftLog, s.path, func() error { return s.BoltStore.StoreLogs(logs) })
}

// DeleteRange implements raft.LogStore.
func (s *trackedStore) DeleteRange(min, max uint64) error {
	return s.health.write(writeRaftLog, s.path, func() error { return s.BoltStore.DeleteRange(min, max) })
}

// Set implements raft.StableStore.
func (s *trackedStore) Set(k, v []byte) error {
	return s.health.write(writeRaftStable, s.path, func() error { return s.BoltStore.Set(k, v) })
}

// SetUint64 implements raft.StableStore.
func (s *trackedStore) SetUint64(k []byte, v uint64) error {
	return s.health.write(writeRaftStable, s.path, func() error { return s.BoltStore.SetUint64(k, v) })
}

// Health returns nil while the node can write its data dir and raft.db, and
// otherwise the *DiskWriteError of the first file it cannot write.
func (n *Node) Health() error {
	if err := n.disk.err(); err != nil {
		return err
	}
	return nil
}

// watchDisk probes the data dir (and raft.db on a server) every
// DiskProbeInterval and logs when writes start or stop failing. While they
// fail, a leader hands leadership to another voter: Raft itself steps down
// only when a log write fails, and then without choosing a successor.
func (n *Node) watchDisk() {
	tick := time.NewTicker(n.cfg.DiskProbeInterval)
	defer tick.Stop()
	var was *DiskWriteError
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
			n.probeDisk()
		case <-n.disk.wake:
		}
		err := n.disk.err()
		switch {
		case err != nil && was == nil:
			n.logger.Error("cannot write to the data dir: reporting unhealthy and giving up leadership and vote", "err", err)
		case err == nil && was != nil:
			n.logger.Info("data dir writable again", "was", was)
		}
		was = err
		if err != nil {
			n.handOverLeadership(err)
		}
	}
}

// probeDisk writes, syncs and removes a small file in the data dir, and
// writes a key to raft.db, recording the outcomes.
func (n *Node) probeDisk() {
	p := n.dir.file(diskProbeFile)
	_ = n.disk.write(writeDataDir, p, func() error { return writeSynced(p, []byte(time.Now().UTC().Format(time.RFC3339Nano))) })
	if n.raftStore != nil {
		_ = n.raftStore.SetUint64(keyDiskProbe, uint64(time.Now().UnixNano()))
	}
}

// writeSynced writes b to path, syncs it and removes it again.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// handOverLeadership transfers leadership to another voter when this node
// leads but cannot write (cause).
func (n *Node) handOverLeadership(cause error) {
	if !n.IsLeader() || n.otherVoters() == 0 {
		return
	}
	n.logger.Warn("handing leadership to another voter: this node cannot write", "err", cause)
	if err := n.raft.LeadershipTransfer().Error(); err != nil {
		n.logger.Warn("leadership transfer failed", "err", err)
	}
}

// demoteUnwritableVoters makes voters that report disk write failures
// non-voters (the leader runs it in reconcile): they cannot persist a log
// entry or a vote, so as voters they only weaken the quorum. Autopilot
// promotes them again once their writes succeed (pilot.go reports them
// unhealthy until then).
func (n *Node) demoteUnwritableVoters() {
	failing := n.pilotDelegate.unwritable()
	if len(failing) == 0 {
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		reason, ok := failing[s.ID]
		if !ok || s.Suffrage != raft.Voter || string(s.ID) == n.id.NodeID {
			continue
		}
		n.logger.Warn("demoting a voter that cannot write to its disk", "id", short(string(s.ID)), "reason", reason)
		if err := n.raft.DemoteVoter(s.ID, 0, applyTimeout).Error(); err != nil {
			n.logger.Warn("demote voter", "id", s.ID, "err", err)
		}
	}
}
