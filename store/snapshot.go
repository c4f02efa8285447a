package store

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"
)

// Snapshot stream format (version 1), written by Persist and read by Restore:
//
//	header  msgpack snapshotHeader{Magic: "nodeup-snapshot", Version: 1, Index}
//	records zero or more of: record type (msgpack uint8) + msgpack body
//	          recordMeta -> ClusterMeta, recordNode -> Node, recordKV -> KVEntry,
//	          recordActor -> Actor, recordPlacementGroup -> PlacementGroup,
//	          recordToken -> TokenRecord, recordJob -> JobRecord
//	end     recordEnd (msgpack uint8), no body
//
// The end marker makes a truncated stream detectable. Record type numbers are
// append-only and never change; an incompatible change bumps snapshotVersion.
const (
	snapshotMagic   = "nodeup-snapshot"
	snapshotVersion = 1
)

// snapshotRecordType tags each record of a snapshot stream.
type snapshotRecordType uint8

const (
	recordMeta  snapshotRecordType = 1
	recordNode  snapshotRecordType = 2
	recordKV    snapshotRecordType = 3
	recordActor snapshotRecordType = 4
	// recordPlacementGroup carries a PlacementGroup; per-node reservations
	// are derived from the groups on restore, not stored.
	recordPlacementGroup snapshotRecordType = 5
	// recordToken carries a TokenRecord (the secret's hash, never the secret).
	recordToken snapshotRecordType = 6
	// recordJob carries a JobRecord (a submitted job).
	recordJob snapshotRecordType = 7
	recordEnd snapshotRecordType = 0xff
)

// snapshotHeader opens a snapshot stream.
type snapshotHeader struct {
	Magic   string
	Version uint16
	// Index is the state's latest-change index at snapshot time.
	Index uint64
}

// Snapshot returns a point-in-time snapshot of the state, as raft.FSM
// requires. It only captures an immutable memdb snapshot; the encoding
// happens in Persist, which may run concurrently with Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{db: f.state.snapshot(), logger: f.logger}, nil
}

// fsmSnapshot implements raft.FSMSnapshot over an immutable memdb snapshot.
type fsmSnapshot struct {
	db     *memdb.MemDB
	logger *slog.Logger
}

// Persist writes the snapshot stream to sink and closes it, or cancels it on
// error.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		s.logger.Error("persist snapshot failed", "error", err)
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("persist snapshot: close sink: %w", err)
	}
	return nil
}

// write encodes the whole snapshot stream to w.
func (s *fsmSnapshot) write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := msgpack.NewEncoder(bw)
	txn := s.db.Txn(false)

	hdr := snapshotHeader{Magic: snapshotMagic, Version: snapshotVersion, Index: latestIndex(txn)}
	if err := enc.Encode(&hdr); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	record := func(t snapshotRecordType, body any) error {
		if err := enc.EncodeUint8(uint8(t)); err != nil {
			return err
		}
		return enc.Encode(body)
	}

	raw, err := txn.First(tableMeta, "id", true)
	if err != nil {
		return fmt.Errorf("read cluster meta: %w", err)
	}
	if raw != nil {
		if err := record(recordMeta, raw.(*ClusterMeta)); err != nil {
			return fmt.Errorf("write cluster meta: %w", err)
		}
	}
	// The tables in record order; each table's rows in "id" order.
	for _, tb := range []struct {
		name string
		rec  snapshotRecordType
	}{{tableNodes, recordNode}, {tableKV, recordKV}, {tableActors, recordActor}, {tablePGs, recordPlacementGroup}, {tableTokens, recordToken}, {tableJobs, recordJob}} {
		it, err := txn.Get(tb.name, "id")
		if err != nil {
			return fmt.Errorf("read %s: %w", tb.name, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if err := record(tb.rec, raw); err != nil {
				return fmt.Errorf("write %s record: %w", tb.name, err)
			}
		}
	}
	if err := enc.EncodeUint8(uint8(recordEnd)); err != nil {
		return fmt.Errorf("write end marker: %w", err)
	}
	return bw.Flush()
}

// Release is a no-op: the memdb snapshot is garbage collected.
func (s *fsmSnapshot) Release() {}

// Restore replaces the whole state with the snapshot stream read from rc
// (see the format above), as raft.FSM requires, and closes rc. The new state
// is built in a fresh database and swapped in atomically only once the whole
// stream has been read and validated; on any error (bad magic, unknown
// version or record type, truncation, invalid record) the previous state is
// left intact and the error is returned.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	db, err := readSnapshot(rc)
	if err != nil {
		f.logger.Error("restore snapshot failed", "error", err)
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.state.replace(db)
	f.logger.Info("restored snapshot", "index", latestIndex(db.Txn(false)))
	return nil
}

// readSnapshot decodes a snapshot stream into a new database.
func readSnapshot(r io.Reader) (*memdb.MemDB, error) {
	dec := msgpack.NewDecoder(r)
	var hdr snapshotHeader
	if err := dec.Decode(&hdr); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	if hdr.Magic != snapshotMagic {
		return nil, fmt.Errorf("bad magic %q, not a nodeup snapshot", hdr.Magic)
	}
	if hdr.Version != snapshotVersion {
		return nil, fmt.Errorf("unsupported snapshot version %d (want %d)", hdr.Version, snapshotVersion)
	}

	db, err := newMemDB()
	if err != nil {
		return nil, err
	}
	txn := db.Txn(true)
	defer txn.Abort()
	if hdr.Index > 0 {
		if err := txn.Insert(tableIndex, &indexEntry{Key: indexLatest, Value: hdr.Index}); err != nil {
			return nil, fmt.Errorf("restore latest index: %w", err)
		}
	}
	for n := 0; ; n++ {
		t, err := dec.DecodeUint8()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("truncated snapshot after %d records: %w", n, io.ErrUnexpectedEOF)
			}
			return nil, fmt.Errorf("read record %d type: %w", n, err)
		}
		switch snapshotRecordType(t) {
		case recordEnd:
			if err := restorePlacement(txn); err != nil {
				return nil, fmt.Errorf("rebuild placement reservations: %w", err)
			}
			if err := recount(txn, tableActors, "dead", indexActorsDead, MaxDeadActors); err != nil {
				return nil, fmt.Errorf("count dead actors: %w", err)
			}
			txn.Commit()
			return db, nil
		case recordMeta:
			m := new(ClusterMeta)
			if err := dec.Decode(m); err != nil {
				return nil, fmt.Errorf("read record %d (cluster meta): %w", n, err)
			}
			if err := validID("cluster ID", m.ID); err != nil {
				return nil, fmt.Errorf("record %d: %w", n, err)
			}
			if err := txn.Insert(tableMeta, m); err != nil {
				return nil, fmt.Errorf("restore cluster meta: %w", err)
			}
		case recordNode:
			node := new(Node)
			if err := dec.Decode(node); err != nil {
				return nil, fmt.Errorf("read record %d (node): %w", n, err)
			}
			if err := validID("node ID", node.ID); err != nil {
				return nil, fmt.Errorf("record %d: %w", n, err)
			}
			if !node.Status.Valid() {
				return nil, fmt.Errorf("record %d: node %s has invalid status %q", n, node.ID, node.Status)
			}
			if err := txn.Insert(tableNodes, node); err != nil {
				return nil, fmt.Errorf("restore node %s: %w", node.ID, err)
			}
		case recordKV:
			e := new(KVEntry)
			if err := dec.Decode(e); err != nil {
				return nil, fmt.Errorf("read record %d (kv): %w", n, err)
			}
			if err := validID("key", e.Key); err != nil {
				return nil, fmt.Errorf("record %d: %w", n, err)
			}
			if err := txn.Insert(tableKV, e); err != nil {
				return nil, fmt.Errorf("restore key %q: %w", e.Key, err)
			}
		case recordActor:
			a := new(Actor)
			if err := dec.Decode(a); err != nil {
				return nil, fmt.Errorf("read record %d (actor): %w", n, err)
			}
			if err := validActor(a); err != nil {
				return nil, fmt.Errorf("record %d: %w", n, err)
			}
			a.NameKey = a.nameKey()
			if a.State != ActorDead {
				a.DeadKey = ""
			} else if a.DeadKey == "" { // a snapshot from before pruning
				a.DeadKey = pruneKey(a.ModifyIndex)
			}
			if err := txn.Insert(tableActors, a); err != nil {
				return nil, fmt.Errorf("restore actor %s: %w", a.ID, err)
			}
		case recordPlacementGroup:
			g := new(PlacementGroup)
			if err := dec.Decode(g); err != nil {
				return nil, fmt.Errorf("read record %d (placement group): %w", n, err)
			}
			if err := validPlacementGroup(g); err != nil {
				return nil, fmt.Errorf("record %d: %w", n, err)
			}
			g.NameKey = g.nameKey()
			if g.State != PGRemoved {
				g.RemovedKey = ""
			} else if g.RemovedKey == "" {
				g.RemovedKey = pruneKey(g.ModifyIndex)
			}
			if err := txn.Insert(tablePGs, g); err != nil {
				return nil, fmt.Errorf("restore placement group %s: %w", g.ID, err)
			}
		case recordToken:
			tok := new(TokenRecord)
			if err := dec.Decode(tok); err != nil {
				return nil, fmt.Errorf("read record %d (token): %w", n, err)
			}
			if err := validToken(tok); err != nil {
				return nil, fmt.Errorf("record %d: %w", n, err)
			}
			if err := txn.Insert(tableTokens, tok); err != nil {
				return nil, fmt.Errorf("restore token %s: %w", tok.ID, err)
			}
		case recordJob:
			j := new(JobRecord)
			if err := dec.Decode(j); err != nil {
				return nil, fmt.Errorf("read record %d (job): %w", n, err)
			}
			if err := validJob(j); err != nil {
				return nil, fmt.Errorf("record %d: %w", n, err)
			}
			if err := txn.Insert(tableJobs, j); err != nil {
				return nil, fmt.Errorf("restore job %s: %w", j.ID, err)
			}
		default:
			return nil, fmt.Errorf("record %d: unknown record type %d", n, t)
		}
	}
}

// VerifySnapshot reads a whole snapshot stream from r exactly as Restore
// would (magic, version, every record validated, the end marker present)
// and discards it, so an untrusted snapshot is checked before it replaces
// anything. It returns Restore's error for a stream Restore would refuse.
func VerifySnapshot(r io.Reader) error {
	if _, err := readSnapshot(r); err != nil {
		return fmt.Errorf("not a valid nodeup snapshot: %w", err)
	}
	return nil
}
