package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"
)

// bufferSink is a raft.SnapshotSink writing to memory.
type bufferSink struct {
	bytes.Buffer
	closed, canceled bool
	failWrites       bool
}

func (s *bufferSink) Write(p []byte) (int, error) {
	if s.failWrites {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}
func (s *bufferSink) ID() string    { return "buffer" }
func (s *bufferSink) Close() error  { s.closed = true; return nil }
func (s *bufferSink) Cancel() error { s.canceled = true; return nil }

// persist snapshots f into memory.
func persist(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &bufferSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if !sink.closed || sink.canceled {
		t.Fatalf("sink closed=%v canceled=%v", sink.closed, sink.canceled)
	}
	return sink.Bytes()
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	src := NewFSM(nil)
	populate(t, src)
	want := dumpState(t, src.State())

	// Through raft's in-memory snapshot store, as raft itself does.
	store := raft.NewInmemSnapshotStore()
	sink, err := store.Create(raft.SnapshotVersionMax, 6, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}

	dst := NewFSM(nil)
	if err := dst.Restore(rc); err != nil {
		t.Fatal(err)
	}
	got := dumpState(t, dst.State())
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restored state differs:\ngot  %+v\nwant %+v", got, want)
	}
	if got.Index != 6 || got.Meta == nil || len(got.Nodes) != 2 || len(got.KV) != 2 {
		t.Fatalf("unexpected restored state %+v", got)
	}

	// The restored FSM keeps working: CAS against a restored index.
	res := mustApply(t, dst, 7, KVSetType, KVSetRequest{Key: "a/b", CAS: true, Index: 5})
	if r := res.(*KVSetResult); !r.OK {
		t.Fatalf("CAS after restore = %+v", r)
	}
	// And snapshotting the restored state again round-trips too.
	dst2 := NewFSM(nil)
	if err := dst2.Restore(io.NopCloser(bytes.NewReader(persist(t, dst)))); err != nil {
		t.Fatal(err)
	}
	if a, b := dumpState(t, dst2.State()), dumpState(t, dst.State()); !reflect.DeepEqual(a, b) {
		t.Fatalf("second round trip differs:\ngot  %+v\nwant %+v", a, b)
	}
}

func TestSnapshotEmptyState(t *testing.T) {
	t.Parallel()
	data := persist(t, NewFSM(nil))
	f := NewFSM(nil)
	populate(t, f)
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	got := dumpState(t, f.State())
	if got.Meta != nil || len(got.Nodes) != 0 || len(got.KV) != 0 || got.Index != 0 {
		t.Fatalf("restore of empty snapshot left %+v", got)
	}
}

func TestSnapshotIsPointInTime(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	populate(t, f)
	want := dumpState(t, f.State())
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Changes after Snapshot (Persist runs concurrently with Apply) are not
	// part of it.
	mustApply(t, f, 7, KVSetType, KVSetRequest{Key: "later"})
	mustApply(t, f, 8, NodeDeregisterType, NodeDeregisterRequest{NodeID: "n1"})
	sink := &bufferSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM(nil)
	if err := g.Restore(io.NopCloser(&sink.Buffer)); err != nil {
		t.Fatal(err)
	}
	if got := dumpState(t, g.State()); !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot not point-in-time:\ngot  %+v\nwant %+v", got, want)
	}
}

func TestSnapshotPersistFailureCancels(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	populate(t, f)
	snap, _ := f.Snapshot()
	sink := &bufferSink{failWrites: true}
	if err := snap.Persist(sink); err == nil {
		t.Fatal("Persist to failing sink succeeded")
	}
	if !sink.canceled || sink.closed {
		t.Fatalf("sink closed=%v canceled=%v", sink.closed, sink.canceled)
	}
}

func TestRestoreReplacesStateAndWakesWatchers(t *testing.T) {
	t.Parallel()
	src := NewFSM(nil)
	mustApply(t, src, 1, KVSetType, KVSetRequest{Key: "only"})
	data := persist(t, src)

	f := NewFSM(nil)
	populate(t, f)
	ws := memdb.NewWatchSet()
	if _, err := f.State().PlacementGroupByIDWatch(ws, "no-such-group"); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if !fired(ws) {
		t.Fatal("restore did not wake watchers")
	}
	got := dumpState(t, f.State())
	if got.Meta != nil || len(got.Nodes) != 0 || keys(got.KV) != "only" || got.Index != 1 {
		t.Fatalf("state after restore = %+v", got)
	}
}

// encodeStream builds a snapshot stream by hand.
func encodeStream(t testing.TB, hdr snapshotHeader, records ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := enc.Encode(&hdr); err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestRestoreRejectsGarbage(t *testing.T) {
	t.Parallel()
	good := func() []byte {
		f := NewFSM(nil)
		populate(t, f)
		return persist(t, f)
	}()
	hdr := snapshotHeader{Magic: snapshotMagic, Version: snapshotVersion, Index: 3}
	end := uint8(recordEnd)
	cases := map[string][]byte{
		"empty":          {},
		"garbage":        []byte("this is not a snapshot at all"),
		"bad magic":      encodeStream(t, snapshotHeader{Magic: "raft", Version: 1}, end),
		"bad version":    encodeStream(t, snapshotHeader{Magic: snapshotMagic, Version: 2}, end),
		"no end marker":  encodeStream(t, hdr),
		"unknown record": encodeStream(t, hdr, uint8(42), "x", end),
		"bad node body":  encodeStream(t, hdr, uint8(recordNode), "not a node", end),
		"node no ID":     encodeStream(t, hdr, uint8(recordNode), &Node{Status: NodeAlive}, end),
		"node bad state": encodeStream(t, hdr, uint8(recordNode), &Node{ID: "n", Status: "zombie"}, end),
		"kv no key":      encodeStream(t, hdr, uint8(recordKV), &KVEntry{}, end),
		"meta no ID":     encodeStream(t, hdr, uint8(recordMeta), &ClusterMeta{}, end),
	}
	// Every strict prefix of a good snapshot is truncated.
	for i := 0; i < len(good); i++ {
		cases[fmt.Sprintf("truncated at %d", i)] = good[:i]
	}

	f := NewFSM(nil)
	mustApply(t, f, 1, ClusterInitType, ClusterInitRequest{Meta: ClusterMeta{ID: "keep"}})
	mustApply(t, f, 2, KVSetType, KVSetRequest{Key: "keep", Value: []byte("me")})
	before := dumpState(t, f.State())
	for name, data := range cases {
		if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err == nil {
			t.Errorf("%s: Restore succeeded", name)
		}
	}
	if after := dumpState(t, f.State()); !reflect.DeepEqual(before, after) {
		t.Fatalf("failed restores changed state:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestRestoreClosesReader(t *testing.T) {
	t.Parallel()
	rc := &closeRecorder{Reader: bytes.NewReader([]byte("junk"))}
	_ = NewFSM(nil).Restore(rc)
	if !rc.closed {
		t.Fatal("Restore did not close its reader")
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// FuzzRestore feeds arbitrary streams to Restore: it must never panic, and a
// failed restore must leave the previous state intact.
func FuzzRestore(f *testing.F) {
	src := NewFSM(nil)
	populate(f, src)
	mustApply(f, src, 7, TokenCreateType, TokenCreateRequest{Token: testToken("0000000a")})
	good := persist(f, src)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM(nil)
		mustApply(t, fsm, 1, KVSetType, KVSetRequest{Key: "keep"})
		before := dumpState(t, fsm.State())
		if err := fsm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			if after := dumpState(t, fsm.State()); !reflect.DeepEqual(before, after) {
				t.Fatalf("failed restore changed state: %v", err)
			}
		}
	})
}

func TestSnapshotRecordNumbersAreStable(t *testing.T) {
	t.Parallel()
	// These values are persisted in snapshots: they must never change.
	want := map[snapshotRecordType]uint8{recordMeta: 1, recordNode: 2, recordKV: 3, recordActor: 4,
		recordPlacementGroup: 5, recordToken: 6, recordEnd: 0xff}
	for rec, n := range want {
		if uint8(rec) != n {
			t.Errorf("record type %d, want %d", uint8(rec), n)
		}
	}
}
