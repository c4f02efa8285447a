package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// kvSetVia writes key through nd (forwarded to the leader), waiting at most
// wait for a leader.
func kvSetVia(nd *Node, key string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var resp wire.KVResponse
	if err := nd.forward(ctx, wire.MethodKVSet, &wire.KVRequest{Key: key, Value: []byte(nd.Name())}, &resp); err != nil {
		return err
	}
	if !resp.OK {
		return fmt.Errorf("kv set %s via %s: not OK", key, nd.Name())
	}
	return nil
}

// nodeStatuses returns the leader's table as name → status, asked via nd.
func nodeStatuses(nd *Node) (map[string]store.NodeStatus, *wire.StatusResponse, error) {
	st, err := statusVia(nd)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]store.NodeStatus{}
	for _, nv := range st.Nodes {
		out[nv.Name] = nv.Status
	}
	return out, st, nil
}

// gossipToTheDead shortens how long memberlist keeps gossiping to members
// it declared dead (30 s in its LAN profile): a partition healed within
// that window heals by itself, so tests that need one outlasting it use
// this instead of waiting half a minute.
func gossipToTheDead(d time.Duration) func(*memberlist.Config) {
	return func(mc *memberlist.Config) { mc.GossipToTheDeadTime = d }
}

// Issue 13 item 2: five voters, two of them (the leader among them) cut off
// for longer than failure detection. The majority elects a leader, keeps
// committing, marks the two dead and autopilot drops them from Raft; the
// two refuse writes with no_leader. Once the cut heals they must rejoin
// gossip on their own, be alive again in the leader's table, be voters
// again, and take writes.
func TestPartitionOutlastingFailureDetectionHeals(t *testing.T) {
	nodes := testCluster(t, 5, func(i int, c *Config) {
		withCutLinks(i, c)
		c.RaftVoters = 5
		c.tuneGossip = gossipToTheDead(time.Second)
	})
	waitFormed(t, nodes, 5, 5)
	leader := leaderOf(t, nodes)
	minority := []*Node{leader}
	var majority []*Node
	for _, nd := range nodes {
		switch {
		case nd == leader:
		case len(minority) < 2:
			minority = append(minority, nd)
		default:
			majority = append(majority, nd)
		}
	}
	cut := time.Now()
	heal := partition(t, minority, majority)
	t.Logf("cut off %s and %s (the leader) from the other three", minority[1].Name(), minority[0].Name())

	newLeader := leaderOf(t, majority)
	t.Logf("majority elected %s after %s", newLeader.Name(), time.Since(cut).Round(time.Millisecond))
	testutil.Until(t, 30*time.Second, "majority marks the cut-off nodes dead and autopilot drops them", func() error {
		if err := kvSetVia(majority[0], "during", 3*time.Second); err != nil {
			return err
		}
		status, st, err := nodeStatuses(majority[0])
		if err != nil {
			return err
		}
		for _, nd := range minority {
			if status[nd.Name()] != store.NodeDead {
				return fmt.Errorf("%s is %s in the leader's table", nd.Name(), status[nd.Name()])
			}
		}
		if v := voterCount(st); v != 3 {
			return fmt.Errorf("%d voters, want 3", v)
		}
		return nil
	})
	for _, nd := range minority {
		err := kvSetVia(nd, "minority", time.Second)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != wire.CodeNoLeader {
			t.Fatalf("write via cut-off %s: %v (want %s)", nd.Name(), err, wire.CodeNoLeader)
		}
	}
	t.Logf("partition held %s (failure detection and Raft removal done)", time.Since(cut).Round(time.Millisecond))

	healed := time.Now()
	heal()
	// (A cut-off node that reaches the leader again re-registers, which
	// marks it alive in the table until the next reconcile; gossip is what
	// keeps it alive.)
	testutil.Until(t, 20*time.Second, "cut-off nodes alive in the new leader's gossip and table", func() error {
		for _, mem := range newLeader.members.snapshot() {
			if mem.Status != store.NodeAlive {
				return fmt.Errorf("gossip has %s %s", mem.Name, mem.Status)
			}
		}
		status, _, err := nodeStatuses(majority[0])
		if err != nil {
			return err
		}
		for _, m := range minority {
			if status[m.Name()] != store.NodeAlive {
				return fmt.Errorf("%s is %s", m.Name(), status[m.Name()])
			}
		}
		return nil
	})
	t.Logf("cut-off nodes alive in gossip and the table %s after the heal", time.Since(healed).Round(time.Millisecond))
	testutil.Until(t, 30*time.Second, "every node sees five alive nodes and five voters, and the cut-off ones take writes", func() error {
		for _, nd := range nodes {
			status, st, err := nodeStatuses(nd)
			if err != nil {
				return fmt.Errorf("status via %s: %w", nd.Name(), err)
			}
			for _, m := range nodes {
				if status[m.Name()] != store.NodeAlive {
					return fmt.Errorf("%s sees %s as %s", nd.Name(), m.Name(), status[m.Name()])
				}
			}
			if v := voterCount(st); v != 5 {
				return fmt.Errorf("%s sees %d voters, want 5", nd.Name(), v)
			}
		}
		for _, nd := range minority {
			if err := kvSetVia(nd, "after", 3*time.Second); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("healed (five voters, writes through the cut-off nodes) %s after the heal", time.Since(healed).Round(time.Millisecond))
}
