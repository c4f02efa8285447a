package objects

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// fakeChunkPeer serves Obj.Read chunks of the objects it holds, counting calls;
// gate, when set, holds every call until closed; fail makes calls fail.
type fakeChunkPeer struct {
	objects map[string][]byte
	gate    chan struct{}
	fail    error
	calls   atomic.Int64
}

func (p *fakeChunkPeer) CallInto(ctx context.Context, addr, method string, req any, dst []byte) (int, error) {
	p.calls.Add(1)
	if p.gate != nil {
		<-p.gate
	}
	if p.fail != nil {
		return 0, p.fail
	}
	r := req.(*wire.ObjectReadRequest)
	data, ok := p.objects[r.Key]
	if method != wire.MethodObjectRead || !ok {
		return 0, errors.New("no such object at the fake peer")
	}
	return copy(dst, data[r.Offset:min(r.Offset+r.Length, int64(len(data)))]), nil
}

func newFakeObjectService(t *testing.T, peer *fakeChunkPeer) *Service {
	t.Helper()
	s, err := objstore.Open(t.TempDir(), "test.arena", 64<<20, testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &Service{store: s, peers: peer, host: &fakeHost{}, log: testutil.Logger(), selfAddr: "self:1", nodeID: "id1", nodeName: "n1"}
}

// Locate pulls another node's object in PullChunk pieces into the local
// store once, however many callers ask at the same time, and answers
// later calls from the local copy without another read.
func TestObjectServicePullsOnceFromAFakePeer(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), (2*PullChunk+1000)/16)
	peer := &fakeChunkPeer{objects: map[string][]byte{"job1/o1": data}, gate: make(chan struct{})}
	o := newFakeObjectService(t, peer)
	req := &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: "job1/o1", NodeAddr: "peer:1", Size: int64(len(data))}}
	chunks := int64((len(data) + PullChunk - 1) / PullChunk)

	const callers = 6
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = o.Locate(context.Background(), req)
		}()
	}
	testutil.Until(t, 5*time.Second, "the pull's reads in flight", func() error {
		if peer.calls.Load() < min(chunks, pullPerConn) {
			return errors.New("not yet")
		}
		return nil
	})
	close(peer.gate)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := peer.calls.Load(); got != chunks {
		t.Fatalf("%d concurrent locates made %d chunk reads, want one pull of %d", callers, got, chunks)
	}
	if _, got, ok := o.store.Get("job1/o1"); !ok || !bytes.Equal(got, data) {
		t.Fatalf("the pulled copy: present %v, equal %v", ok, bytes.Equal(got, data))
	}
	if _, err := o.Locate(context.Background(), req); err != nil || peer.calls.Load() != chunks {
		t.Fatalf("a locate of the local copy: %v, %d reads (want no new one)", err, peer.calls.Load())
	}
}

// A pull that fails leaves nothing behind, and the error names the object
// and the peer.
func TestObjectServiceFailedPullLeavesNothing(t *testing.T) {
	peer := &fakeChunkPeer{fail: errors.New("connection reset")}
	o := newFakeObjectService(t, peer)
	req := &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: "job1/o2", NodeAddr: "peer:1", Size: 1000}}
	_, err := o.Locate(context.Background(), req)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("job1/o2")) || !bytes.Contains([]byte(err.Error()), []byte("peer:1")) {
		t.Fatalf("a failed pull: %v, want an error naming the object and the peer", err)
	}
	if o.store.Contains("job1/o2") {
		t.Fatal("a failed pull left its copy in the store")
	}
}

// An object no node holds is object_lost (the SDK's ErrObjectLost): this
// node is named its holder but lacks it, or the holder answers not_found.
func TestObjectServiceLostObjects(t *testing.T) {
	peer := &fakeChunkPeer{fail: &rpc.Error{Code: wire.CodeNotFound, Message: "node n2: no object job1/o3"}}
	o := newFakeObjectService(t, peer)
	for _, loc := range []wire.ObjectLoc{
		{Key: "job1/o3", NodeAddr: "self:1", Size: 10},
		{Key: "job1/o3", NodeAddr: "peer:1", Size: 10},
	} {
		_, err := o.Locate(context.Background(), &wire.ObjectLocateRequest{Loc: loc})
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != wire.CodeObjectLost || !strings.Contains(re.Message, "job1/o3") {
			t.Errorf("locate of a lost object held at %s: %v, want object_lost naming it", loc.NodeAddr, err)
		}
	}
	// Other failures keep their own code: not every failed pull is a loss.
	peer.fail = &rpc.Error{Code: wire.CodeOverloaded, Message: "busy"}
	_, err := o.Locate(context.Background(), &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: "job1/o4", NodeAddr: "peer:1", Size: 10}})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeOverloaded {
		t.Errorf("a pull from an overloaded peer: %v, want its overloaded code kept", err)
	}
}

// A pull through a NewChunkSpread of two peers (two connections) reads half
// the chunks through each, and the copy is whole.
func TestPullSpreadsChunksOverConnections(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), (8*PullChunk)/16)
	objs := map[string][]byte{"job1/o1": data}
	a, b := &fakeChunkPeer{objects: objs}, &fakeChunkPeer{objects: objs}
	o := newFakeObjectService(t, nil)
	o.peers = NewChunkSpread(a, b)
	if err := o.pull(context.Background(), wire.ObjectLoc{Key: "job1/o1", NodeAddr: "peer:1", Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	if a.calls.Load() != 4 || b.calls.Load() != 4 {
		t.Fatalf("8 chunks went %d and %d over the two connections, want 4 and 4", a.calls.Load(), b.calls.Load())
	}
	if _, got, ok := o.store.Get("job1/o1"); !ok || !bytes.Equal(got, data) {
		t.Fatalf("the pulled copy: %d bytes (sealed %v); want the %d bytes sent", len(got), ok, len(data))
	}
}

// A pull spreads over half the CPUs' worth of connections, at least two
// (sealing and opening on two cores even on a small machine) and at most
// eight.
func TestPullConnectionsScaleWithCPUs(t *testing.T) {
	for _, c := range []struct{ procs, want int }{{1, 2}, {2, 2}, {4, 2}, {6, 3}, {16, 8}, {17, 8}, {64, 8}} {
		if got := PullConnections(c.procs); got != c.want {
			t.Errorf("PullConnections(%d) = %d, want %d", c.procs, got, c.want)
		}
	}
}

// With eight connections a pull keeps two chunk reads in flight on each:
// all of a 16-chunk object is asked for before the first answer comes.
func TestPullKeepsTwoChunksInFlightPerConnection(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), (16*PullChunk)/16)
	objs := map[string][]byte{"job1/o1": data}
	gate := make(chan struct{})
	var readers []ChunkReader
	var peers []*fakeChunkPeer
	for range 8 {
		p := &fakeChunkPeer{objects: objs, gate: gate}
		peers = append(peers, p)
		readers = append(readers, p)
	}
	o := newFakeObjectService(t, nil)
	o.peers = NewChunkSpread(readers...)
	done := make(chan error, 1)
	go func() {
		done <- o.pull(context.Background(), wire.ObjectLoc{Key: "job1/o1", NodeAddr: "peer:1", Size: int64(len(data))})
	}()
	testutil.Until(t, 5*time.Second, "16 chunk reads in flight at once", func() error {
		var n int64
		for _, p := range peers {
			n += p.calls.Load()
		}
		if n < 16 {
			return fmt.Errorf("%d in flight", n)
		}
		return nil
	})
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, got, ok := o.store.Get("job1/o1"); !ok || !bytes.Equal(got, data) {
		t.Fatalf("the pulled copy: %d bytes (sealed %v); want the %d bytes sent", len(got), ok, len(data))
	}
}
