package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// startFiveNodes starts a head n0 and four nodes that join it, with the
// default three Raft voters: two nodes are outside the Raft group (issue
// 27: such a node refused every valid token), and waits until status
// through n4 shows five alive, three voters and a leader.
func startFiveNodes(t *testing.T) []*proc {
	t.Helper()
	root := t.TempDir()
	procs := []*proc{startHead(t, root)}
	for i := 1; i < 5; i++ {
		procs = append(procs, startNode(t, root, fmt.Sprintf("n%d", i), []string{"join", procs[0].addr(), "--token-file", tokenFile(procs[0])}))
	}
	took := testutil.Until(t, 60*time.Second, "5 alive nodes, 3 voters and a leader", func() error {
		st, err := status(t, procs[4].addr())
		if err != nil {
			return err
		}
		if alive(st) != 5 || voters(st) != 3 || st.Leader.ID == "" {
			return fmt.Errorf("%d alive, %d voters, leader %q; %v", alive(st), voters(st), st.Leader.Name, states(st))
		}
		return nil
	})
	t.Logf("5-node cluster (3 voters) formed %s after the joiners started", took.Round(time.Millisecond))
	return procs
}

// nonVoter returns a node of st that is not a Raft voter.
func nonVoter(t *testing.T, st *statusJSON, nodes []*proc) *proc {
	t.Helper()
	isVoter := map[string]bool{}
	for _, s := range st.Servers {
		if s.Suffrage == "voter" {
			isVoter[s.ID] = true
		}
	}
	for _, nd := range st.Nodes {
		if !isVoter[nd.NodeID] {
			for _, p := range nodes {
				if p.name == nd.NodeName {
					return p
				}
			}
		}
	}
	t.Fatalf("no node outside the Raft voters in %v", st.Servers)
	return nil
}

// TestChaosFiveNodesThreeVoters: the workload on five nodes of which only
// three are Raft voters, its driver on a node outside the Raft group (the
// issue-27 shape where such a node refused every token). Nothing may be
// lost and the non-voter's resources must come back.
func TestChaosFiveNodesThreeVoters(t *testing.T) {
	chaosLong(t)
	nodes := startFiveNodes(t)
	st, err := status(t, nodes[0].addr())
	if err != nil {
		t.Fatal(err)
	}
	via := nonVoter(t, st, nodes)
	t.Logf("driver on %s, outside the Raft voters", via.name)
	d := startChaosDriver(t, via.addr(), 30*time.Second)
	d.finish(t, 3*time.Minute)
	resourcesBack(t, func() (*statusJSON, error) { return status(t, via.addr()) })
	checkRSS(t, nodes...)
}

// TestChaosRollingRestart: on five nodes (three voters) under the steady
// task and actor load, every node in turn is stopped (SIGTERM, as systemd
// does on an upgrade), restarted at once, and must be alive again before
// the next; the leader is among them, so leadership moves. The driver's
// own node goes last: its driver reconnects or the run fails. Nothing may
// be lost; each node's time back and the longest stall are logged.
func TestChaosRollingRestart(t *testing.T) {
	chaosLong(t)
	nodes := startFiveNodes(t)
	st, err := status(t, nodes[0].addr())
	if err != nil {
		t.Fatal(err)
	}
	firstLeader := st.Leader.Name
	via := nonVoter(t, st, nodes)
	d := startChaosDriver(t, via.addr(), 60*time.Second)
	order := []*proc{}
	for _, p := range nodes {
		if p != via {
			order = append(order, p)
		}
	}
	order = append(order, via)
	leaders := []string{firstLeader}
	var watch *proc // a node other than the one being restarted
	for _, p := range order {
		watch = nodes[0]
		if watch == p {
			watch = nodes[1]
		}
		before := incarnation(t, watch.addr(), p.name)
		stopped := time.Now()
		signalTerm(p)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop within 30 s of SIGTERM", p.name)
		}
		p.run(t)
		took := testutil.Until(t, 60*time.Second, p.name+" alive again with a leader", func() error {
			st, err := status(t, watch.addr())
			if err != nil {
				return err
			}
			inc := uint64(0)
			for _, nd := range st.Nodes {
				if nd.NodeName == p.name {
					inc = nd.Incarnation
				}
			}
			if s := states(st); s[p.name] != "alive" || inc <= before || st.Leader.Name == "" {
				return fmt.Errorf("%s %s, incarnation %d (before the restart %d), leader %q", p.name, s[p.name], inc, before, st.Leader.Name)
			}
			if l := st.Leader.Name; l != leaders[len(leaders)-1] {
				leaders = append(leaders, l)
			}
			return nil
		})
		t.Logf("%s restarted: alive again (a new incarnation) %s after SIGTERM (%s of polling after its restart)", p.name,
			time.Since(stopped).Round(100*time.Millisecond), took.Round(100*time.Millisecond))
	}
	t.Logf("leaders in turn: %s", strings.Join(leaders, " → "))
	if len(leaders) < 2 {
		t.Errorf("leadership never moved although every node, leader %s included, was restarted", firstLeader)
	}
	d.finish(t, 4*time.Minute)
	resourcesBack(t, func() (*statusJSON, error) { return status(t, watch.addr()) })
	checkRSS(t, nodes...)
}

// incarnation is the named node's incarnation in the table asked through
// addr.
func incarnation(t *testing.T, addr, name string) uint64 {
	t.Helper()
	st, err := status(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range st.Nodes {
		if nd.NodeName == name {
			return nd.Incarnation
		}
	}
	t.Fatalf("no node %s in the table", name)
	return 0
}
