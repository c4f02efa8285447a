package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

func pgCall(nd *Node, method string, req, resp any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return nd.pool.Call(ctx, nd.RPCAddr(), method, req, resp)
}

func res(kv ...any) sched.ResourceSet {
	r := sched.ResourceSet{}
	for i := 0; i < len(kv); i += 2 {
		r[kv[i].(string)] = sched.QuantityOf(int64(kv[i+1].(int)))
	}
	return r
}

func createPG(t *testing.T, nd *Node, strategy string, bundles ...sched.ResourceSet) *wire.PGInfo {
	t.Helper()
	var info wire.PGInfo
	if err := pgCall(nd, wire.MethodPGCreate, &wire.PGCreateRequest{ID: newID()[:24], Strategy: strategy, Bundles: bundles}, &info); err != nil {
		t.Fatalf("create %s group: %v", strategy, err)
	}
	return &info
}

func getPG(nd *Node, id string) (*wire.PGInfo, error) {
	var info wire.PGInfo
	err := pgCall(nd, wire.MethodPGGet, &wire.PGGetRequest{ID: id}, &info)
	return &info, err
}

func waitPG(t *testing.T, nd *Node, id string, timeout time.Duration, cond func(*wire.PGInfo) error) *wire.PGInfo {
	t.Helper()
	var info *wire.PGInfo
	testutil.Until(t, timeout, "placement group "+id, func() error {
		var err error
		if info, err = getPG(nd, id); err != nil {
			return err
		}
		return cond(info)
	})
	return info
}

func isState(s store.PlacementGroupState) func(*wire.PGInfo) error {
	return func(g *wire.PGInfo) error {
		if g.State != string(s) {
			return fmt.Errorf("state %s (%s), want %s", g.State, g.PendingReason, s)
		}
		return nil
	}
}

// reservedCPU sums the CPU that placement groups hold per the leader's state.
func reservedCPU(t *testing.T, nd *Node) sched.Quantity {
	t.Helper()
	r, err := nd.State().PlacementReserved()
	if err != nil {
		t.Fatal(err)
	}
	var sum sched.Quantity
	for _, rs := range r {
		sum += rs[sched.CPU]
	}
	return sum
}

// checkNodePools checks every node's local pool: free CPU = total − the
// bundles it holds, and exactly the committed bundles' renamed resources.
func checkNodePools(nodes []*Node, groups ...*wire.PGInfo) error {
	for _, nd := range nodes {
		want := sched.QuantityOf(2)
		renamed := sched.ResourceSet{}
		for _, g := range groups {
			for _, b := range g.Bundles {
				if b.NodeID == nd.ID() {
					want -= b.Resources[sched.CPU]
					renamed.Add(sched.BundleResources(g.ID, b.Index, b.Resources))
				}
			}
		}
		if got := nd.local.available()[sched.CPU]; got != want {
			return fmt.Errorf("node %s: free CPU %s, want %s", nd.Name(), got, want)
		}
		tot := nd.local.totals()
		for k := range tot {
			if strings.Contains(k, "_group_") && renamed[k] == 0 {
				return fmt.Errorf("node %s still offers %s", nd.Name(), k)
			}
		}
		for k, q := range renamed {
			if tot[k] != q {
				return fmt.Errorf("node %s offers %s=%s, want %s", nd.Name(), k, tot[k], q)
			}
		}
	}
	return nil
}

func TestPlacementRaceForLastResources(t *testing.T) {
	nodes := testCluster(t, 3, nil) // 2 CPUs each
	waitFormed(t, nodes, 3, 3)
	a := createPG(t, nodes[1], "STRICT_SPREAD", res("CPU", 2), res("CPU", 2))
	if a.State != "CREATED" || a.Bundles[0].NodeID == a.Bundles[1].NodeID {
		t.Fatalf("STRICT_SPREAD group: %+v", a)
	}
	testutil.Until(t, 5*time.Second, "bundles committed on nodes", func() error { return checkNodePools(nodes, a) })

	// Two groups race for the one node still free: exactly one gets it,
	// all of it; the other holds nothing and waits.
	var wg sync.WaitGroup
	race := make([]*wire.PGInfo, 2)
	for i := range race {
		wg.Add(1)
		go func() {
			defer wg.Done()
			race[i] = createPG(t, nodes[i], "STRICT_PACK", res("CPU", 1), res("CPU", 1))
		}()
	}
	wg.Wait()
	if (race[0].State == "CREATED") == (race[1].State == "CREATED") {
		t.Fatalf("race: states %s and %s, want exactly one CREATED", race[0].State, race[1].State)
	}
	win, lose := race[0], race[1]
	if lose.State == "CREATED" {
		win, lose = lose, win
	}
	if lose.State != "PENDING" || lose.PendingReason == "" || lose.Infeasible != nil {
		t.Fatalf("loser: %+v", lose)
	}
	if got := reservedCPU(t, nodes[0]); got != sched.QuantityOf(6) {
		t.Fatalf("reserved CPU %s, want 6", got)
	}
	testutil.Until(t, 5*time.Second, "pools after the race", func() error { return checkNodePools(nodes, a, win) })

	// Removing the winner lets the loser in.
	if err := pgCall(nodes[2], wire.MethodPGRemove, &wire.PGRemoveRequest{ID: win.ID}, nil); err != nil {
		t.Fatal(err)
	}
	lose = waitPG(t, nodes[0], lose.ID, 10*time.Second, isState(store.PGCreated))
	testutil.Until(t, 5*time.Second, "pools after the loser got in", func() error { return checkNodePools(nodes, a, lose) })
	for _, g := range []*wire.PGInfo{a, lose} {
		if err := pgCall(nodes[0], wire.MethodPGRemove, &wire.PGRemoveRequest{ID: g.ID}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := reservedCPU(t, nodes[0]); got != 0 {
		t.Fatalf("reserved CPU after removing all: %s", got)
	}
	if err := checkNodePools(nodes); err != nil {
		t.Fatalf("pools after removing all: %v", err)
	}
}

func TestPlacementInfeasibleAndBadInput(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	g := createPG(t, nodes[0], "STRICT_SPREAD", res("CPU", 1), res("CPU", 1), res("CPU", 1), res("CPU", 1))
	if g.State != "PENDING" || g.Infeasible == nil || g.Infeasible.Reason != g.PendingReason || !strings.Contains(g.PendingReason, "STRICT_SPREAD") {
		t.Fatalf("STRICT_SPREAD of 4 on 3 nodes: %+v", g)
	}
	var list wire.PGList
	if err := pgCall(nodes[1], wire.MethodPGList, &wire.Empty{}, &list); err != nil || len(list.Groups) != 1 || list.Groups[0].Infeasible == nil {
		t.Fatalf("list: %+v, %v", list, err)
	}
	for _, tc := range []struct {
		req  wire.PGCreateRequest
		want string
	}{
		{wire.PGCreateRequest{ID: newID(), Strategy: "DIAGONAL", Bundles: []sched.ResourceSet{res("CPU", 1)}}, "accepted are PACK, SPREAD, STRICT_PACK, STRICT_SPREAD"},
		{wire.PGCreateRequest{ID: newID(), Strategy: "PACK", Bundles: []sched.ResourceSet{{}}}, "bundle 0 is empty"},
		{wire.PGCreateRequest{ID: newID(), Strategy: "PACK", Bundles: []sched.ResourceSet{{"CPU": -1}}}, "negative"},
		{wire.PGCreateRequest{ID: "xyz", Strategy: "PACK", Bundles: []sched.ResourceSet{res("CPU", 1)}}, "hex"},
	} {
		err := pgCall(nodes[0], wire.MethodPGCreate, &tc.req, &wire.PGInfo{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create %+v: %v, want an error containing %q", tc.req, err, tc.want)
		}
	}
}

func TestPlacementRescheduleOnNodeDeath(t *testing.T) {
	nodes := testCluster(t, 3, func(i int, c *Config) {
		if i > 0 {
			c.Resources["foo"] = sched.QuantityOf(1)
		}
	})
	waitFormed(t, nodes, 3, 3)
	g := createPG(t, nodes[0], "PACK", res("foo", 1))
	if g.State != "CREATED" {
		t.Fatalf("group: %+v", g)
	}
	var victim, other *Node
	for _, nd := range nodes[1:] {
		if nd.ID() == g.Bundles[0].NodeID {
			victim = nd
		} else {
			other = nd
		}
	}
	victim.Kill()
	watch := nodes[0]
	if watch == victim {
		watch = other
	}
	g = waitPG(t, watch, g.ID, 30*time.Second, func(g *wire.PGInfo) error {
		if g.State != "CREATED" || g.Bundles[0].NodeID != other.ID() {
			return fmt.Errorf("state %s on %s (%s)", g.State, g.Bundles[0].NodeName, g.PendingReason)
		}
		return nil
	})
	testutil.Until(t, 5*time.Second, "bundle committed on the new node", func() error {
		if other.local.totals()["foo_group_0_"+g.ID] != sched.QuantityOf(1) {
			return fmt.Errorf("node %s does not offer the bundle", other.Name())
		}
		return nil
	})
}

func TestPlacementSurvivesLeaderFailover(t *testing.T) {
	nodes := testCluster(t, 3, func(i int, c *Config) {
		if i > 0 {
			c.Resources["foo"] = sched.QuantityOf(1)
		}
	})
	waitFormed(t, nodes, 3, 3)
	g := createPG(t, nodes[1], "STRICT_SPREAD", res("foo", 1), res("foo", 1))
	if g.State != "CREATED" {
		t.Fatalf("group: %+v", g)
	}
	// A half-made reservation: a bundle prepared on a node, no group owns it.
	if why := nodes[2].local.prepareBundles("deadbeef", []wire.BundleSpec{{Index: 0, Resources: res("CPU", 1)}}); why != "" {
		t.Fatal(why)
	}
	leader := leaderOf(t, nodes)
	if leader != nodes[0] {
		t.Skipf("leader is %s, not the head; this test needs the group off the leader", leader.Name())
	}
	leader.Kill()
	newLeader := leaderOf(t, nodes[1:])
	got := waitPG(t, newLeader, g.ID, 10*time.Second, isState(store.PGCreated))
	for i := range got.Bundles {
		if got.Bundles[i].NodeID != g.Bundles[i].NodeID {
			t.Fatalf("bundle %d moved from %s to %s across the failover", i, g.Bundles[i].NodeName, got.Bundles[i].NodeName)
		}
	}
	testutil.Until(t, 10*time.Second, "stray prepared bundle released", func() error {
		if cpu := nodes[2].local.available()[sched.CPU]; cpu != sched.QuantityOf(2) {
			return fmt.Errorf("node %s has %s CPU free", nodes[2].Name(), cpu)
		}
		return nil
	})
	if err := pgCall(nodes[2], wire.MethodPGRemove, &wire.PGRemoveRequest{ID: g.ID}, nil); err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes[1:] {
		if q := nd.local.totals()["foo_group_"+g.ID]; q != 0 || nd.local.available()["foo"] != sched.QuantityOf(1) {
			t.Fatalf("node %s after remove: bundle %s, foo free %s", nd.Name(), q, nd.local.available()["foo"])
		}
	}
}
