package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// raftDBFile is the Raft log and stable store (raft-boltdb) in the raft dir.
const raftDBFile = "raft.db"

// raftCheckTimeout bounds the start-up check of raft.db; a check that hangs
// (a file on a stuck disk) refuses the start like a corrupt file does.
const raftCheckTimeout = time.Minute

// Buckets and stable-store keys raft-boltdb and hashicorp/raft write.
var (
	boltLogsBucket  = []byte("logs")
	boltConfBucket  = []byte("conf")
	keyCurrentTerm  = []byte("CurrentTerm")
	keyLastVoteTerm = []byte("LastVoteTerm")
)

// RaftDataError reports Raft data in a node's data dir that the node cannot
// safely start from: a truncated, corrupt or inconsistent raft.db, or none
// where the node held Raft state before. The node refuses to start rather
// than panic, or rejoin as a voter that has forgotten its log and its votes.
type RaftDataError struct {
	Path    string // the file at fault: <data dir>/raft/raft.db
	DataDir string // the node's data dir
	Problem string // what is wrong with Path, e.g. "is truncated: ..."
	Err     error  // the underlying error, if any
}

// Error is one line: the file, what is wrong and what the operator does.
func (e *RaftDataError) Error() string {
	msg := "Raft data " + e.Path + " " + e.Problem
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + "; restore " + filepath.Dir(e.Path) + " from a backup of this node, or move the data dir " +
		e.DataDir + " away and start the node again to join as a new node (the cluster drops the old one)"
}

// Unwrap returns the underlying error.
func (e *RaftDataError) Unwrap() error { return e.Err }

// raftDBSummary is what the start-up check read from raft.db.
type raftDBSummary struct {
	firstIndex, lastIndex uint64 // 0, 0: no log entries
	lastLogTerm           uint64
	currentTerm           uint64
	hasCurrentTerm        bool
	lastVoteTerm          uint64
}

// hasState reports whether raft.db holds a term or log entries.
func (s raftDBSummary) hasState() bool { return s.hasCurrentTerm || s.lastIndex > 0 }

// checkRaftData returns a *RaftDataError when the Raft data in dataDir cannot
// be trusted: raft.db truncated or corrupt (bbolt's panics are caught
// and its consistency check run), log entries missing or out of order, terms
// that contradict each other, a gap between the latest snapshot and the log,
// or (hadState: node.json records that this node held Raft state) a raft.db
// that is missing, empty or holds no state. Errors name the file and the
// remedy. A missing raft.db of a node that never held state is fine.
// It writes nothing but the snapshot store's empty snapshots dir.
func checkRaftData(dataDir string, hadState bool) error {
	dir := filepath.Join(dataDir, raftDir)
	path := filepath.Join(dir, raftDBFile)
	fail := func(err error, format string, args ...any) error {
		return &RaftDataError{Path: path, DataDir: dataDir, Problem: fmt.Sprintf(format, args...), Err: err}
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && hadState:
		return fail(nil, "is missing, but %s records that this node held Raft state", filepath.Join(dataDir, identityFile))
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fail(err, "cannot be read")
	case fi.Size() == 0:
		return fail(nil, "is empty (0 bytes)")
	}
	sum, err := inspectRaftDB(path, fi.Size(), raftCheckTimeout)
	var te *truncatedError
	switch {
	case errors.As(err, &te):
		return fail(nil, "is truncated: the file has %d bytes, its header says %d", te.size, te.want)
	case err != nil:
		return fail(err, "is corrupt")
	}
	metas, err := listSnapshots(dir)
	if err != nil {
		return fail(err, "cannot be checked against the snapshots in %s", dir)
	}
	snapIndex := uint64(0)
	if len(metas) > 0 {
		snapIndex = metas[0].Index
	}
	switch {
	case sum.lastIndex > 0 && !sum.hasCurrentTerm:
		return fail(nil, "holds log entries %d..%d but no current term", sum.firstIndex, sum.lastIndex)
	case sum.lastLogTerm > sum.currentTerm:
		return fail(nil, "holds a log entry of term %d, beyond its current term %d", sum.lastLogTerm, sum.currentTerm)
	case sum.lastVoteTerm > sum.currentTerm:
		return fail(nil, "records a vote in term %d, beyond its current term %d", sum.lastVoteTerm, sum.currentTerm)
	case sum.firstIndex > snapIndex+1:
		return fail(nil, "is missing log entries %d..%d (the latest snapshot ends at index %d)", snapIndex+1, sum.firstIndex-1, snapIndex)
	case hadState && !sum.hasState() && len(metas) == 0:
		return fail(nil, "holds no Raft state, but %s records that this node held some", filepath.Join(dataDir, identityFile))
	}
	return nil
}

// listSnapshots returns the snapshots Raft would restore from, newest first.
func listSnapshots(dir string) ([]*raft.SnapshotMeta, error) {
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		return nil, err
	}
	return snaps.List()
}

// inspectRaftDB reads raft.db (size bytes) in a goroutine that turns bbolt's
// panics and memory faults on a corrupt file into errors, and gives up after
// timeout.
func inspectRaftDB(path string, size int64, timeout time.Duration) (raftDBSummary, error) {
	type result struct {
		sum raftDBSummary
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("bbolt: %v", p)
			}
			done <- r
		}()
		debug.SetPanicOnFault(true) // a page beyond a truncated file's end faults
		r.sum, r.err = readRaftDB(path, size)
	}()
	select {
	case r := <-done:
		return r.sum, r.err
	case <-time.After(timeout):
		return raftDBSummary{}, fmt.Errorf("the check did not finish within %s", timeout)
	}
}

// readRaftDB checks raft.db's length against its header (opened read-only,
// which writes nothing and loads no free list), then opens it as raft-boltdb
// will, which loads the free list, and reads and checks every log entry and
// the stable store, then runs bbolt's consistency check. It may panic on a
// corrupt file; inspectRaftDB recovers.
func readRaftDB(path string, size int64) (raftDBSummary, error) {
	if err := checkRaftDBSize(path, size); err != nil {
		return raftDBSummary{}, err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		return raftDBSummary{}, err
	}
	defer db.Close()
	var sum raftDBSummary
	err = db.View(func(tx *bbolt.Tx) error {
		logs, conf := tx.Bucket(boltLogsBucket), tx.Bucket(boltConfBucket)
		if logs == nil || conf == nil {
			return errors.New(`the "logs" or "conf" bucket is missing`)
		}
		if err := readRaftLogs(logs, &sum); err != nil {
			return err
		}
		if err := readStableStore(conf, &sum); err != nil {
			return err
		}
		for err := range tx.Check() {
			return fmt.Errorf("bbolt consistency check: %w", err)
		}
		return nil
	})
	return sum, err
}

// checkRaftDBSize compares the file's length with the size its meta page
// records, so a truncated file is named as such.
func checkRaftDBSize(path string, size int64) error {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		if want := tx.Size(); want > size {
			return &truncatedError{size: size, want: want}
		}
		return nil
	})
}

// truncatedError is a raft.db shorter than its header says.
type truncatedError struct{ size, want int64 }

func (e *truncatedError) Error() string {
	return fmt.Sprintf("truncated: the file has %d bytes, its header says %d", e.size, e.want)
}

// readRaftLogs checks that log entries are contiguous, decode, carry the
// index they are stored under, and have non-decreasing terms.
func readRaftLogs(b *bbolt.Bucket, sum *raftDBSummary) error {
	var prev raft.Log
	return b.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("log key %x is not an 8-byte index", k)
		}
		idx := binary.BigEndian.Uint64(k)
		if sum.lastIndex > 0 && idx != sum.lastIndex+1 {
			return fmt.Errorf("log entries %d..%d are missing", sum.lastIndex+1, idx-1)
		}
		var l raft.Log
		if err := codec.NewDecoder(bytes.NewReader(v), &codec.MsgpackHandle{}).Decode(&l); err != nil {
			return fmt.Errorf("log entry %d does not decode: %w", idx, err)
		}
		switch {
		case l.Index != idx:
			return fmt.Errorf("log entry stored at index %d says index %d", idx, l.Index)
		case l.Term < prev.Term:
			return fmt.Errorf("log entry %d has term %d, below term %d of entry %d", idx, l.Term, prev.Term, prev.Index)
		}
		if sum.firstIndex == 0 {
			sum.firstIndex = idx
		}
		sum.lastIndex, sum.lastLogTerm, prev = idx, l.Term, l
		return nil
	})
}

// readStableStore reads the current term and the term of the last vote.
func readStableStore(b *bbolt.Bucket, sum *raftDBSummary) error {
	read := func(key []byte) (uint64, bool, error) {
		v := b.Get(key)
		switch {
		case v == nil:
			return 0, false, nil
		case len(v) != 8:
			return 0, false, fmt.Errorf("stable-store key %s holds %d bytes, not 8", key, len(v))
		}
		return binary.BigEndian.Uint64(v), true, nil
	}
	var err error
	if sum.currentTerm, sum.hasCurrentTerm, err = read(keyCurrentTerm); err != nil {
		return err
	}
	sum.lastVoteTerm, _, err = read(keyLastVoteTerm)
	return err
}
