package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// twoNodes starts two 4-CPU nodes labelled zone=rack1 and zone=rack2 and
// waits until n0's view shows n1 with all its CPUs free.
func twoNodes(t *testing.T) (n0, n1 *Node) {
	t.Helper()
	nodes := testCluster(t, 2, func(i int, c *Config) {
		c.Resources[sched.CPU] = sched.QuantityOf(4)
		c.Labels = map[string]string{"zone": []string{"rack1", "rack2"}[i]}
	})
	waitFormed(t, nodes, 2, 2)
	testutil.Until(t, 20*time.Second, "n0 sees n1 idle", func() error {
		for _, nd := range nodes[0].clusterView() {
			if nd.NodeID == nodes[1].id.NodeID && nd.Alive && nd.Available[sched.CPU] == sched.QuantityOf(4) {
				return nil
			}
		}
		return errors.New("n1 not idle in n0's view yet")
	})
	return nodes[0], nodes[1]
}

// decisions asks n for k one-CPU leases in a row and renders each answer:
// "here", "spill:<node name>", or "infeasible: <reason>".
func decisions(t *testing.T, n *Node, k int, st wire.Strategy, names map[string]string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	for i := 0; i < k; i++ {
		rep, l, err := n.decideLease(ctx, &wire.LeaseRequest{JobID: "j", Resources: sched.ResourceSet{sched.CPU: sched.QuantityOf(1)}, Strategy: st})
		switch {
		case err != nil:
			t.Fatalf("lease %d: %v", i, err)
		case l != nil:
			out = append(out, "here")
			t.Cleanup(func() { n.local.release(l.id) })
		case rep.Infeasible != nil:
			out = append(out, "infeasible: "+rep.Infeasible.Why())
		default:
			out = append(out, "spill:"+names[rep.Spillback])
		}
	}
	return out
}

// The DEFAULT strategy packs the local node up to sched.SpreadThreshold, then
// prefers a node below it, and only when every node is at the threshold
// packs to 100% (Ray's hybrid policy). Spilled demand counts against the
// target at once, so a burst does not pile onto it.
func TestHybridPolicyThreshold(t *testing.T) {
	n0, n1 := twoNodes(t)
	names := map[string]string{n1.RPCAddr(): "n1", n0.RPCAddr(): "n0"}
	got := decisions(t, n0, 8, wire.Strategy{}, names)
	want := []string{"here", "here", "spill:n1", "spill:n1", "here", "here", "spill:n1", "spill:n1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("decisions for 8 one-CPU leases on two 4-CPU nodes:\n got %v\nwant %v", got, want)
	}
}

// Label selectors hold with any strategy: work goes only to matching nodes,
// and with none matching it is infeasible with the failing label named.
func TestLabelSelectorDecisions(t *testing.T) {
	n0, n1 := twoNodes(t)
	names := map[string]string{n1.RPCAddr(): "n1", n0.RPCAddr(): "n0"}
	rack2 := sched.LabelSelector{"zone": sched.In("rack2")}
	for _, st := range []wire.Strategy{{Labels: rack2}, {Kind: wire.StrategySpread, Labels: rack2}} {
		if got := decisions(t, n0, 3, st, names); strings.Join(got, " ") != "spill:n1 spill:n1 spill:n1" {
			t.Fatalf("strategy %q with zone in (rack2) from n0: %v", st.Kind, got)
		}
	}
	if got := decisions(t, n0, 1, wire.Strategy{Labels: sched.LabelSelector{"zone": sched.NotIn("rack2")}}, names); got[0] != "here" {
		t.Fatalf("zone not_in (rack2) from n0: %v", got)
	}
	got := decisions(t, n0, 1, wire.Strategy{Labels: sched.LabelSelector{"zone": sched.In("rack9")}}, names)
	if !strings.HasPrefix(got[0], "infeasible: ") || !strings.Contains(got[0], "rack9") || !strings.Contains(got[0], `zone="rack2"`) {
		t.Fatalf("zone in (rack9): %v (want infeasible naming the selector and a node's label)", got)
	}
	// Node affinity to a node the labels exclude is infeasible too.
	got = decisions(t, n0, 1, wire.Strategy{Kind: wire.StrategyNodeAffinity, NodeID: n1.id.NodeID, Labels: sched.LabelSelector{"zone": sched.In("rack1")}}, names)
	if !strings.HasPrefix(got[0], "infeasible: ") {
		t.Fatalf("affinity to n1 with zone in (rack1): %v", got)
	}
	// A malformed selector from the network is a bad-input error, not a crash.
	_, _, err := n0.decideLease(context.Background(), &wire.LeaseRequest{JobID: "j", Strategy: wire.Strategy{Labels: sched.LabelSelector{"zone": {Op: "near"}}}})
	if err == nil || !strings.Contains(err.Error(), "near") {
		t.Fatalf("unknown operator: %v", err)
	}
}

// Node affinity to this node waits here when this node is busy, hard or
// soft (Ray's node affinity queues on its target), instead of spilling to
// another node that would send a hard request straight back.
func TestAffinityToABusyLocalNodeWaitsHere(t *testing.T) {
	n0, n1 := twoNodes(t)
	names := map[string]string{n1.RPCAddr(): "n1", n0.RPCAddr(): "n0"}
	hard := wire.Strategy{Kind: wire.StrategyNodeAffinity, NodeID: n0.id.NodeID}
	if got := decisions(t, n0, 4, hard, names); strings.Join(got, " ") != "here here here here" {
		t.Fatalf("four leases with affinity to n0 on its 4 CPUs: %v", got)
	}
	for _, st := range []wire.Strategy{hard, {Kind: wire.StrategyNodeAffinity, NodeID: n0.id.NodeID, Soft: true}} {
		rep, l, err := n0.decideLease(context.Background(), &wire.LeaseRequest{JobID: "j", NoQueueIfNot: true,
			Resources: sched.ResourceSet{sched.CPU: sched.QuantityOf(1)}, Strategy: st})
		if err != nil || l != nil || rep == nil || !rep.Busy {
			t.Fatalf("affinity (soft %v) to busy n0 from n0: %+v, %v, %v; want busy (wait here)", st.Soft, rep, l, err)
		}
	}
}

// A strategy kind the policy does not know is refused as bad input, naming
// it, rather than scheduled as some other strategy.
func TestUnknownStrategyKindRefused(t *testing.T) {
	n0, _ := twoNodes(t)
	_, _, err := n0.decideLease(context.Background(), &wire.LeaseRequest{JobID: "j", Strategy: wire.Strategy{Kind: "PACK"}})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeBadInput || !strings.Contains(err.Error(), `"PACK"`) {
		t.Fatalf("kind PACK: %v", err)
	}
}
