package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// lostSize is the size of the task outputs the lineage tests lose: stored,
// not inline.
const lostSize = 4 << 20

// pattern is lostSize bytes that depend on seed.
func pattern(seed byte) []byte {
	b := make([]byte, lostSize)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// noteRun records one run of a task named name in dir (a file per run).
func noteRun(dir, name string) error {
	f, err := os.CreateTemp(dir, name+".*")
	if err != nil {
		return err
	}
	return f.Close()
}

// runsOf counts the runs noteRun recorded for name.
func runsOf(t *testing.T, dir, name string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, name+".*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

var (
	// makeBig returns pattern(seed), noting its run under "make<seed>".
	makeBig = Register2(func(ctx context.Context, dir string, seed byte) ([]byte, error) {
		return pattern(seed), noteRun(dir, "make"+string('0'+seed))
	})
	// nextBig returns in with every byte plus one, noting its run under name.
	nextBig = Register3(func(ctx context.Context, dir, name string, in []byte) ([]byte, error) {
		out := make([]byte, len(in))
		for i, c := range in {
			out[i] = c + 1
		}
		return out, noteRun(dir, name)
	})
)

// TestLostTaskOutputsAreRebuilt: task outputs whose only copies were on a
// node that died are rebuilt by running their tasks again on another node
// (as Ray's lineage reconstruction), their lost or freed arguments first;
// a task submitted after the loss has its lost argument rebuilt for it;
// a task with MaxRetries(0) gives an ObjectLostError naming the object and
// the node instead.
func TestLostTaskOutputsAreRebuilt(t *testing.T) {
	nodes := startClusterInit(t, 3, func(i int, cfg *cluster.Config) {
		if i > 0 {
			cfg.Resources["rc"] = sched.QuantityOf(8) // not on the driver's node: a rerun goes to n2
		}
		if i == 1 {
			cfg.Resources[sched.CPU] = sched.QuantityOf(8) // room for every first run
		}
	})
	// n1's death is declared only by a quorum of the other two.
	clustertest.WaitVoters(t, nodes, 3)
	// Longer than ctxT's minute: under the race detector on a loaded
	// 2-core machine the first runs and the declaration of n1's death
	// took more than a minute together once (CI).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// Soft affinity puts the first runs on n1; the reruns go to n2.
	on1 := []Option{Resources(map[string]float64{"rc": 1}), NodeAffinity(nodes[1].ID(), true)}
	mk := Must(makeBig.Options(on1...))
	next := Must(nextBig.Options(on1...))
	single := mk.Remote(ctx, dir, 1)
	a1 := mk.Remote(ctx, dir, 2)
	b1 := next.RemoteArgs(ctx, Val(dir), Val("b1"), a1)
	a2 := mk.Remote(ctx, dir, 3)
	b2 := next.RemoteArgs(ctx, Val(dir), Val("b2"), a2)
	once := Must(makeBig.Options(append(on1, MaxRetries(0))...)).Remote(ctx, dir, 4)
	later := mk.Remote(ctx, dir, 6) // an argument of a task submitted once it is lost
	all := []Ref[[]byte]{single, a1, b1, a2, b2, once, later}
	if ready, _, err := Wait(ctx, all, len(all), 0); err != nil || len(ready) != len(all) {
		t.Fatalf("wait for the first runs: %d ready, %v", len(ready), err)
	}
	for _, r := range all {
		if o := globalObjects(t, r.ID()); o.loc == nil || o.loc.NodeAddr != nodes[1].RPCAddr() {
			t.Fatalf("object %s is not stored on n1 (%s): %+v", r.ID(), nodes[1].RPCAddr(), o.loc)
		}
	}
	a2.Release() // freed: b2's rebuild makes it again from the lineage b2 keeps
	nodes[1].Kill()

	start := time.Now()
	want1 := pattern(1)
	if got, err := single.Get(ctx); err != nil || !bytes.Equal(got, want1) {
		t.Fatalf("Get of a lost output: %d bytes, %v; want the %d bytes of a rerun", len(got), err, len(want1))
	}
	t.Logf("first Get after the kill returned the rebuilt value in %s (includes the node's death being declared)", time.Since(start).Round(time.Millisecond))
	if n := runsOf(t, dir, "make1"); n != 2 {
		t.Fatalf("the task of a lost output ran %d times, want 2", n)
	}

	want := pattern(2)
	for i := range want {
		want[i]++
	}
	if got, err := b1.Get(ctx); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Get of b1 = next(a1), both lost: %d bytes, %v", len(got), err)
	}
	if got, err := a1.Get(ctx); err != nil || !bytes.Equal(got, pattern(2)) {
		t.Fatalf("Get of a1 after its rebuild: %d bytes, %v", len(got), err)
	}
	if a, b := runsOf(t, dir, "make2"), runsOf(t, dir, "b1"); a != 2 || b != 2 {
		t.Fatalf("chain a1→b1 ran %d and %d times, want 2 and 2", a, b)
	}

	want = pattern(3)
	for i := range want {
		want[i]++
	}
	if got, err := b2.Get(ctx); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Get of b2 = next(a2), a2 freed and b2 lost: %d bytes, %v", len(got), err)
	}
	if a, b := runsOf(t, dir, "make3"), runsOf(t, dir, "b2"); a != 2 || b != 2 {
		t.Fatalf("chain a2→b2 ran %d and %d times, want 2 and 2", a, b)
	}

	// A task submitted after the loss reads its lost argument as a
	// borrower: the owner rebuilds it (Object.Recover).
	c := Must(nextBig.Options(Resources(map[string]float64{"rc": 1}))).RemoteArgs(ctx, Val(dir), Val("c"), later)
	want = pattern(6)
	for i := range want {
		want[i]++
	}
	if got, err := c.Get(ctx); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Get of c = next(later), later lost before c was submitted: %d bytes, %v", len(got), err)
	}
	if a, b := runsOf(t, dir, "make6"), runsOf(t, dir, "c"); a != 2 || b != 1 {
		t.Fatalf("later and c ran %d and %d times, want 2 and 1", a, b)
	}

	_, err := once.Get(ctx)
	var le *ObjectLostError
	if !errors.As(err, &le) || le.ObjectID != once.ID() || le.Node != "n1" || !strings.Contains(err.Error(), "MaxRetries 0") {
		t.Fatalf("Get of a lost output of a MaxRetries(0) task: %v; want an ObjectLostError naming %s, n1 and MaxRetries 0", err, once.ID())
	}
	if n := runsOf(t, dir, "make4"); n != 1 {
		t.Fatalf("a MaxRetries(0) task ran %d times, want 1", n)
	}
	runtime.KeepAlive(all)
}

// globalObjects returns this process's table entry of id, failing t when
// there is none.
func globalObjects(t *testing.T, id string) *object {
	t.Helper()
	cw, err := current()
	if err != nil {
		t.Fatal(err)
	}
	o := cw.objects.get(id)
	if o == nil {
		t.Fatalf("object %s is not in the owner's table", id)
	}
	return o
}

// TestPutObjectLostWithItsNode: a Put object whose only copy was on a
// node that died cannot be rebuilt (it has no lineage): Get answers at
// once with an ObjectLostError naming the object, its owner and the node.
func TestPutObjectLostWithItsNode(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	p, err := Put(ctx, pattern(5))
	if err != nil {
		t.Fatal(err)
	}
	nodes[0].Kill() // the driver's node, where Put stored it
	start := time.Now()
	_, err = p.Get(ctx)
	var le *ObjectLostError
	if !errors.As(err, &le) || !errors.Is(err, ErrObjectLost) || le.ObjectID != p.ID() || le.Owner != p.Owner() || le.Node != nodes[0].RPCAddr() {
		t.Fatalf("Get of a Put object lost with its node: %v; want an ObjectLostError naming %s, owner %s and node %s", err, p.ID(), p.Owner(), nodes[0].RPCAddr())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the loss took %s to report", d)
	}
	t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

// putter is an actor that owns objects it Puts.
type putter struct{}

func newPutter(ctx context.Context) (*putter, error) { return &putter{}, nil }

// PutTwo Puts two values and returns refs to them, nested in a slice: the
// caller borrows them.
func (p *putter) PutTwo(ctx context.Context) ([]Ref[string], error) {
	a, err := Put(ctx, "first")
	if err != nil {
		return nil, err
	}
	b, err := Put(ctx, "second")
	return []Ref[string]{a, b}, err
}

var (
	putterClass = RegisterActor0(newPutter)
	putTwoCall  = RegisterMethod0((*putter).PutTwo)
)

// TestBorrowerSeesOwnerDied: a borrowed object whose owner process died
// (an actor that Put it, then was killed) is an OwnerDiedError naming the
// owner, at once rather than after a long wait.
func TestBorrowerSeesOwnerDied(t *testing.T) {
	startCluster(t, 2, nil)
	ctx := ctxT(t)
	h, err := putterClass.Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := putTwoCall.Remote(ctx, h).Get(ctx)
	if err != nil || len(refs) != 2 {
		t.Fatalf("PutTwo: %v, %v", refs, err)
	}
	cw, _ := current()
	if refs[1].Owner() == cw.addr || refs[1].Owner() == "" {
		t.Fatalf("ref owner %q: want the actor's address", refs[1].Owner())
	}
	if v, err := refs[0].Get(ctx); err != nil || v != "first" {
		t.Fatalf("Get from the live owner: %q, %v", v, err)
	}
	if err := Kill(ctx, h, true); err != nil {
		t.Fatal(err)
	}
	waitActorState(t, ctx, h.ID(), "DEAD")
	start := time.Now()
	_, err = refs[1].Get(ctx)
	var oe *OwnerDiedError
	if !errors.As(err, &oe) || !errors.Is(err, ErrOwnerDied) || oe.Owner != refs[1].Owner() || oe.ObjectID != refs[1].ID() {
		t.Fatalf("Get of a ref whose owner died: %v; want an OwnerDiedError naming %s and owner %s", err, refs[1].ID(), refs[1].Owner())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the owner's death took %s to report", d)
	}
	t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

// TestLineageIsBounded: a chain of tasks, each taking the last one's
// result, keeps at most maxLineageDepth generations of lineage behind a
// result; an inline result keeps none.
func TestLineageIsBounded(t *testing.T) {
	tab := newObjectTable()
	const self = "127.0.0.1:1"
	prev := ""
	for i := range 200 {
		id := fmt.Sprintf("t%d-0", i)
		spec := wire.TaskSpec{Name: "step"}
		if prev != "" {
			spec.Args = []wire.Arg{{IsRef: true, RefID: prev, Owner: self}}
		}
		lin := newLineage(spec, taskOptions{maxRetries: 3}, []string{id}, nil)
		var args []string
		if prev != "" {
			args = []string{prev}
		}
		tab.pendingFor([]string{id}, nil, args, lin, self)
		tab.completeLoc(id, &wire.ObjectLoc{Key: "j/" + id, NodeAddr: "n", Size: 1 << 20})
		if prev != "" {
			tab.mu.Lock()
			delete(tab.objs, prev) // freed: only the lineage chain keeps it
			tab.mu.Unlock()
		}
		prev = id
	}
	kept := 0
	for lin := tab.get(prev).lin; lin != nil; {
		kept++
		var next *lineage
		for _, l := range lin.args {
			next = l
		}
		lin = next
	}
	if kept > maxLineageDepth || kept == 0 {
		t.Fatalf("a chain of 200 tasks keeps %d lineages behind its last result, want 1..%d", kept, maxLineageDepth)
	}
	tab.pendingFor([]string{"small-0"}, nil, nil, newLineage(wire.TaskSpec{Name: "small"}, taskOptions{}, []string{"small-0"}, nil), self)
	tab.complete("small-0", []byte{0xc0}, nil)
	if tab.get("small-0").lin != nil {
		t.Fatal("an inline result keeps its lineage")
	}
}
