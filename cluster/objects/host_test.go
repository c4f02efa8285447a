package objects

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// fakeHost is a node of fixed peers: Go runs f at once in a goroutine
// (counted by wg), Call records the frees passed on and delivers them to
// the service registered under the address, if any.
type fakeHost struct {
	peers []string
	wg    sync.WaitGroup

	mu       sync.Mutex
	services map[string]*Service
	calls    []string // "addr method keys"
}

func (h *fakeHost) PeerAddrs() []string { return h.peers }

func (h *fakeHost) Go(name string, f func(ctx context.Context)) bool {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f(context.Background())
	}()
	return true
}

func (h *fakeHost) Call(ctx context.Context, addr, method string, req, resp any) error {
	r := req.(*wire.ObjectFreeRequest)
	h.mu.Lock()
	h.calls = append(h.calls, fmt.Sprintf("%s %s %v from_node=%v", addr, method, r.Keys, r.FromNode))
	to := h.services[addr]
	h.mu.Unlock()
	if to == nil {
		return errors.New("no such node")
	}
	_, err := to.Free(ctx, r)
	return err
}

// serviceReader reads chunks from the service at each address through
// its Read method (a bulk answer copied into dst), as a peer's pool
// would; before, when set, runs ahead of each read.
type serviceReader struct {
	services map[string]*Service
	before   func()
}

func (p *serviceReader) CallInto(ctx context.Context, addr, method string, req any, dst []byte) (int, error) {
	if p.before != nil {
		p.before()
	}
	to := p.services[addr]
	if to == nil || method != wire.MethodObjectRead {
		return 0, fmt.Errorf("no node at %s", addr)
	}
	b, err := to.Read(ctx, req.(*wire.ObjectReadRequest))
	if err != nil {
		return 0, err
	}
	defer b.Release()
	return copy(dst, b.Data), nil
}

// newService opens a service over a 64 MiB store under a temp dir, named
// addr, its host and reader given.
func newService(t *testing.T, addr string, host Host, reader ChunkReader, spill bool) *Service {
	t.Helper()
	o, err := Open(Config{Dir: t.TempDir(), NodeID: "id-" + addr, NodeName: "n-" + addr, SelfAddr: addr,
		Capacity: 64 << 20, SpillThreshold: 0.5, NoSpilling: !spill, Readers: []ChunkReader{reader}, Logger: testutil.Logger()}, host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// An owner's free at the node of the primary copy deletes it there and is
// passed on, once and marked from_node, to the node that pulled a copy,
// which deletes its copy and passes nothing on; a node that pulled but
// left the view is not called.
func TestFreeIsPassedOnToTheNodesThatPulled(t *testing.T) {
	host := &fakeHost{peers: []string{"a:1", "b:1"}, services: map[string]*Service{}}
	reader := &serviceReader{services: map[string]*Service{}}
	a := newService(t, "a:1", host, reader, false)
	b := newService(t, "b:1", host, reader, false)
	c := newService(t, "c:1", host, reader, false) // pulls, then leaves the view
	for _, o := range []*Service{a, b, c} {
		host.services[o.selfAddr], reader.services[o.selfAddr] = o, o
	}
	const key = "j1/shared"
	want := bytes.Repeat([]byte{7}, PullChunk+100)
	if err := a.store.Put(key, want); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*Service{b, c} {
		loc, err := o.Locate(context.Background(), &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: key, NodeAddr: "a:1", Size: int64(len(want))}})
		if err != nil || loc.Size != int64(len(want)) {
			t.Fatalf("locate at %s: %+v, %v", o.selfAddr, loc, err)
		}
		_, _ = o.Release(context.Background(), &wire.ObjectFreeRequest{Keys: []string{key}})
	}
	for range 2 { // a second free is a no-op
		if _, err := a.Free(context.Background(), &wire.ObjectFreeRequest{Keys: []string{key, "j1/absent"}}); err != nil {
			t.Fatal(err)
		}
		host.wg.Wait()
	}
	if a.store.Contains(key) || b.store.Contains(key) {
		t.Fatalf("after the free: at the owner's node %v, at the puller's %v; want neither", a.store.Contains(key), b.store.Contains(key))
	}
	if !c.store.Contains(key) {
		t.Fatal("a node outside the view was called")
	}
	wantCalls := []string{"b:1 " + wire.MethodObjectFree + " [j1/shared] from_node=true"}
	if !slices.Equal(host.calls, wantCalls) {
		t.Fatalf("calls %q, want %q", host.calls, wantCalls)
	}
	keys := make([]string, wire.MaxFreeKeys+1)
	_, err := a.Free(context.Background(), &wire.ObjectFreeRequest{Keys: keys})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeBadInput || !strings.Contains(err.Error(), fmt.Sprint(wire.MaxFreeKeys)) {
		t.Fatalf("free of %d keys: %v, want bad_input naming %d", len(keys), err, wire.MaxFreeKeys)
	}
}

// A free that arrives while the object is being pulled does not delete
// the space under the chunks still arriving; the pull drops the copy when
// it ends and fails saying why.
func TestFreeDuringAPullDropsTheCopyWhenItEnds(t *testing.T) {
	host := &fakeHost{}
	reader := &serviceReader{services: map[string]*Service{}}
	a := newService(t, "a:1", host, reader, false)
	b := newService(t, "b:1", host, reader, false)
	reader.services["a:1"] = a
	const key = "j1/racing"
	if err := a.store.Put(key, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	var during error
	reader.before = func() {
		if _, err := b.Free(context.Background(), &wire.ObjectFreeRequest{Keys: []string{key}, FromNode: true}); err != nil {
			during = err
		} else if b.store.Used() == 0 {
			during = errors.New("the free deleted the copy under the pull")
		}
	}
	_, err := b.Locate(context.Background(), &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: key, NodeAddr: "a:1", Size: 1000}})
	if during != nil {
		t.Fatal(during)
	}
	if err == nil || !strings.Contains(err.Error(), "freed it meanwhile") {
		t.Fatalf("a pull of an object freed meanwhile: %v", err)
	}
	if b.store.Contains(key) || b.store.Used() != 0 {
		t.Fatalf("the freed pull left its copy: Used %d", b.store.Used())
	}
}

// Obj.List gives the store's entries and the spilled ones, largest first,
// within the limit, with the node's names and the totals.
func TestListIncludesSpilledObjectsLargestFirst(t *testing.T) {
	o := newService(t, "a:1", &fakeHost{}, &serviceReader{}, true)
	for i, size := range []int{1 << 20, 3 << 20, 2 << 20} {
		if err := o.store.Put(fmt.Sprintf("j1/o%d", i), make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	// Above half of the 64 MiB store: the next Create spills.
	if _, err := o.Create(context.Background(), &wire.ObjectCreateRequest{Key: "j1/big", Size: 30 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Seal(context.Background(), &wire.ObjectKey{Key: "j1/big"}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Create(context.Background(), &wire.ObjectCreateRequest{Key: "j1/next", Size: 10 << 20}); err != nil {
		t.Fatal(err)
	}
	spilledObjs, spilledBytes := o.SpillStats()
	if spilledObjs == 0 || spilledBytes == 0 {
		t.Fatal("nothing spilled above the threshold")
	}
	l, err := o.List(context.Background(), &wire.ObjectListRequest{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if l.NodeName != "n-a:1" || l.NodeID != "id-a:1" || l.Addr != "a:1" || l.Objects != 5 || l.LeftOut != 2 || len(l.Entries) != 3 {
		t.Fatalf("list: %+v", l)
	}
	if l.Entries[0].Key != "j1/big" || !l.Entries[0].Spilled || l.SpilledObjects != spilledObjs || l.SpilledTotal < spilledBytes {
		t.Fatalf("list entries %+v (spilled %d objects, %d total bytes), want j1/big spilled first", l.Entries, l.SpilledObjects, l.SpilledTotal)
	}
	for i := 1; i < len(l.Entries); i++ {
		if l.Entries[i].Size > l.Entries[i-1].Size {
			t.Fatalf("entries not largest first: %+v", l.Entries)
		}
	}
	// A job's end drops its objects, spilled ones included.
	if n := o.DropPrefix("j1/"); n == 0 || o.store.Len() != 0 {
		t.Fatalf("DropPrefix freed %d in memory, %d left", n, o.store.Len())
	}
	if k, _ := o.SpillStats(); k != 0 {
		t.Fatalf("%d spilled objects left after the job's end", k)
	}
}
