package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// nodeCall makes one RPC over nd's Unix socket (the local principal holds
// every role).
func nodeCall(t *testing.T, nd *cluster.Node, method string, req, resp any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, "unix", strings.TrimPrefix(nd.SocketAddr(), rpc.UnixPrefix), []byte{wire.PreambleRPC}, wire.ProtocolVersion)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return cl.Call(ctx, method, req, resp)
}

func healthOf(t *testing.T, nd *cluster.Node) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + nd.HTTPAddr() + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Reason string `json:"reason"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Reason
}

// TestDrainMovesActorAndKeepsWorkAway (issue 19): on a 3-node cluster an
// actor with restarts left runs on n1 (soft affinity); `node drain n1`
// restarts it ALIVE on another node, n1's /v1/health turns 503 naming the
// drain, and no new task lands on n1, not even one with soft affinity to
// it. Enabling eligibility again ends the drain: health is 200 and n1 takes
// work again.
func TestDrainMovesActorAndKeepsWorkAway(t *testing.T) {
	nodes := startClusterInit(t, 3, func(i int, cfg *cluster.Config) { cfg.HTTPPort = 0 })
	ctx := ctxT(t)
	n1 := nodes[1]
	h, err := Must(logActorClass.Options(NodeAffinity(n1.ID(), true), MaxRestarts(-1))).Remote(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := entriesCall.Remote(ctx, h).Get(ctx); err != nil {
		t.Fatal(err)
	}
	if info := waitActorState(t, ctx, h.ID(), "ALIVE"); info.NodeID != n1.ID() {
		t.Fatalf("actor on %s, want n1", info.NodeName)
	}
	if code, _ := healthOf(t, n1); code != http.StatusOK {
		t.Fatalf("n1 health before the drain: %d", code)
	}

	var rec wire.Node
	if err := nodeCall(t, nodes[2], wire.MethodNodeDrain, &wire.NodeDrainRequest{Node: "n1", DeadlineNanos: int64(10 * time.Minute)}, &rec); err != nil {
		t.Fatal(err)
	}
	if !rec.Draining || !rec.Ineligible || rec.DrainDeadline == 0 {
		t.Fatalf("drained record %+v", rec)
	}
	testutil.Until(t, 30*time.Second, "the actor ALIVE on another node", func() error {
		a := actorState(t, ctx, h.ID())
		if a.State != "ALIVE" || a.NodeID == n1.ID() {
			return fmt.Errorf("actor %s on %s (restarts %d)", a.State, a.NodeName, a.Restarts)
		}
		return nil
	})
	if got, err := entriesCall.Remote(ctx, h).Get(ctx); err != nil || len(got) != 1 || got[0] != "v1" {
		t.Fatalf("the moved actor answers %v, %v; want its constructor's state", got, err)
	}
	testutil.Until(t, 10*time.Second, "n1 health 503 draining", func() error {
		if code, reason := healthOf(t, n1); code != http.StatusServiceUnavailable || !strings.Contains(reason, "draining") {
			return fmt.Errorf("health %d %q", code, reason)
		}
		return nil
	})
	// Every node learns of the drain with its next heartbeat.
	for _, nd := range nodes {
		testutil.Until(t, 10*time.Second, nd.Name()+" sees n1 ineligible", func() error {
			var v wire.ClusterView
			if err := nodeCall(t, nd, wire.MethodClusterView, &wire.Empty{}, &v); err != nil {
				return err
			}
			for _, ni := range v.Nodes {
				if ni.NodeID == n1.ID() && ni.Ineligible {
					return nil
				}
			}
			return fmt.Errorf("view %+v", v.Nodes)
		})
	}
	var refs []Ref[string]
	for i := 0; i < 12; i++ {
		refs = append(refs, Must(where.Options(Spread())).Remote(ctx), Must(where.Options(NodeAffinity(n1.ID(), true))).Remote(ctx))
	}
	for _, r := range refs {
		node, err := r.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if node == "n1" {
			t.Fatal("a new task ran on the draining node n1")
		}
	}

	if err := nodeCall(t, nodes[0], wire.MethodNodeEligibility, &wire.NodeEligibilityRequest{Node: n1.ID(), Eligible: true}, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Draining || rec.Ineligible {
		t.Fatalf("after enable: %+v", rec)
	}
	testutil.Until(t, 10*time.Second, "n1 healthy again", func() error {
		if code, reason := healthOf(t, n1); code != http.StatusOK {
			return fmt.Errorf("health %d %q", code, reason)
		}
		return nil
	})
	testutil.Until(t, 20*time.Second, "n1 takes work again", func() error {
		node, err := Must(where.Options(NodeAffinity(n1.ID(), true))).Remote(ctx).Get(ctx)
		if err != nil || node != "n1" {
			return fmt.Errorf("task ran on %q (%v)", node, err)
		}
		return nil
	})
}

// stuckOnN1 marks where it started and, on n1, runs for a minute (until a
// drain deadline stops its worker); elsewhere it returns at once.
var stuckOnN1 = Register1(func(ctx context.Context, marker string) (string, error) {
	_ = os.WriteFile(marker+"."+NodeName(), nil, 0o644)
	if NodeName() == "n1" {
		time.Sleep(time.Minute)
	}
	return NodeName(), nil
})

func pgNodes(t *testing.T, ctx context.Context, pg *PlacementGroup) (string, []string) {
	t.Helper()
	info, err := pg.get(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, b := range info.Bundles {
		nodes = append(nodes, b.NodeName)
	}
	return info.State, nodes
}

// TestDrainMovesBundlesAndEndsTheRestAtTheDeadline: with n0 and n2
// ineligible (node eligibility --disable), a new placement group can only
// land on n1; an actor with no restarts left runs there too. Once n0 and n2
// are eligible again, draining n1 with a short deadline moves the group's
// bundle off n1 at once, leaves that actor ALIVE until the deadline and
// then ends it DEAD with a cause naming the drain; a task running on n1 is
// stopped at the deadline and retried elsewhere.
func TestDrainMovesBundlesAndEndsTheRestAtTheDeadline(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	ctx := ctxT(t)
	n1 := nodes[1]
	set := func(nd *cluster.Node, eligible bool) {
		t.Helper()
		var rec wire.Node
		if err := nodeCall(t, nodes[0], wire.MethodNodeEligibility, &wire.NodeEligibilityRequest{Node: nd.Name(), Eligible: eligible}, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Ineligible == eligible {
			t.Fatalf("eligibility of %s: %+v", nd.Name(), rec)
		}
	}
	set(nodes[0], false)
	set(nodes[2], false)
	pg, err := CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 1}}, "PACK")
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if state, on := pgNodes(t, ctx, pg); state != "CREATED" || len(on) != 1 || on[0] != "n1" {
		t.Fatalf("group %s on %v, want CREATED on n1 (the only eligible node)", state, on)
	}
	once, err := Must(logActorClass.Options(NodeAffinity(n1.ID(), true), MaxRestarts(0))).Remote(ctx, "once")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := entriesCall.Remote(ctx, once).Get(ctx); err != nil {
		t.Fatal(err)
	}
	if info := waitActorState(t, ctx, once.ID(), "ALIVE"); info.NodeID != n1.ID() {
		t.Fatalf("actor on %s, want n1", info.NodeName)
	}
	marker := filepath.Join(t.TempDir(), "started")
	stuck := Must(stuckOnN1.Options(NodeAffinity(n1.ID(), true), MaxRetries(3))).Remote(ctx, marker)
	waitStarted(t, marker, "n1")
	set(nodes[0], true)
	set(nodes[2], true)

	deadline := 3 * time.Second
	var rec wire.Node
	if err := nodeCall(t, nodes[0], wire.MethodNodeDrain, &wire.NodeDrainRequest{Node: n1.ID(), DeadlineNanos: int64(deadline)}, &rec); err != nil {
		t.Fatal(err)
	}
	drained := time.Now()
	testutil.Until(t, 30*time.Second, "the bundle moved off n1", func() error {
		if state, on := pgNodes(t, ctx, pg); state != "CREATED" || len(on) != 1 || on[0] == "n1" || on[0] == "" {
			return fmt.Errorf("group %s on %v", state, on)
		}
		return nil
	})
	if a := actorState(t, ctx, once.ID()); time.Since(drained) < deadline && (a.State != "ALIVE" || a.NodeID != n1.ID()) {
		t.Fatalf("before the deadline the actor with no restarts left is %s on %s, want ALIVE on n1", a.State, a.NodeName)
	}
	dead := waitActorState(t, ctx, once.ID(), "DEAD")
	if !strings.Contains(dead.DeathCause, "drain") {
		t.Fatalf("death cause %q, want one naming the drain", dead.DeathCause)
	}
	if time.Since(drained) < deadline {
		t.Fatalf("the actor ended %s after the drain, before its %s deadline", time.Since(drained), deadline)
	}
	// The task running on n1 was stopped at the deadline and retried on
	// another node.
	if node, err := stuck.Get(ctx); err != nil || node == "n1" {
		t.Fatalf("the task running on n1 at the deadline: %q, %v; want it retried elsewhere", node, err)
	}
	if time.Since(drained) > 30*time.Second {
		t.Fatalf("the task ended %s after the drain: it ran out its minute on n1", time.Since(drained))
	}
}
