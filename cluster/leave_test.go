package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/wire"
)

// TestTwoVotersKeepLeaderOnGracefulStop stops either voter of a 2-voter
// cluster gracefully: the other must keep (or take over) leadership and
// commit writes, because the leaving node removed itself from the Raft
// configuration first instead of leaving a 2-voter group with one voter up.
func TestTwoVotersKeepLeaderOnGracefulStop(t *testing.T) {
	for _, stopLeader := range []bool{true, false} {
		name := map[bool]string{true: "leader_stops", false: "follower_stops"}[stopLeader]
		t.Run(name, func(t *testing.T) {
			nodes := testCluster(t, 2, func(i int, c *Config) { c.RaftVoters = 2 })
			waitFormed(t, nodes, 2, 2)
			leader := leaderOf(t, nodes)
			stopping, staying := nodes[0], nodes[1]
			if (stopping == leader) != stopLeader {
				stopping, staying = staying, stopping
			}
			if err := stopping.Shutdown(); err != nil {
				t.Fatal(err)
			}
			testutil.Until(t, 10*time.Second, "the remaining voter leads and commits", func() error {
				if !staying.IsLeader() {
					return fmt.Errorf("%s is %s", staying.Name(), staying.raft.State())
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				var r wire.KVResponse
				return staying.forward(ctx, wire.MethodKVSet, &wire.KVRequest{Key: "after-stop", Value: []byte("v")}, &r)
			})
			st, err := statusVia(staying)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range st.Servers {
				if s.ID == stopping.ID() {
					t.Fatalf("the stopped node is still a Raft server (%s)", s.Suffrage)
				}
			}

			// Started again on its data dir, it is added back as a voter.
			cfg := stopping.cfg
			cfg.Head, cfg.Join, cfg.Port, cfg.GossipPort = false, []string{staying.RPCAddr()}, 0, 0
			again, err := Start(context.Background(), cfg)
			if err != nil {
				t.Fatalf("restart: %v", err)
			}
			t.Cleanup(again.Kill)
			waitFormed(t, []*Node{staying, again}, 2, 2)
		})
	}
}
