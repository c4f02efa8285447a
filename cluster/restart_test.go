package cluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// restartOn starts a node again on old's data dir and RPC port (as a daemon
// restarted with the same flags), joining through join; head lets it start
// when no peer is up yet.
func restartOn(t *testing.T, old *Node, head bool, join ...string) *Node {
	t.Helper()
	cfg := old.cfg
	_, port, _ := net.SplitHostPort(old.RPCAddr())
	cfg.Port, _ = strconv.Atoi(port)
	cfg.GossipPort, cfg.Head, cfg.Join = 0, head, join
	again, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("restart %s: %v", old.Name(), err)
	}
	t.Cleanup(again.Kill)
	return again
}

// spreadOver returns nil when g is CREATED with its bundles on distinct
// nodes.
func spreadOver(g *wire.PGInfo) error {
	if g.State != string(store.PGCreated) {
		return fmt.Errorf("state %s (%s), want CREATED", g.State, g.PendingReason)
	}
	seen := map[string]int{}
	for _, b := range g.Bundles {
		if prev, ok := seen[b.NodeID]; ok {
			return fmt.Errorf("bundles %d and %d share node %s", prev, b.Index, b.NodeName)
		}
		seen[b.NodeID] = b.Index
	}
	return nil
}

// A SPREAD or STRICT_SPREAD group over three nodes comes back spread after
// every node was stopped gracefully and started again: the bundles lost as
// the nodes left wait (within pgRespreadGrace) for nodes to spread over
// instead of piling onto the nodes still up, or onto the first one back.
func TestSpreadGroupSurvivesGracefulFullRestart(t *testing.T) {
	for _, strategy := range []string{"SPREAD", "STRICT_SPREAD"} {
		t.Run(strategy, func(t *testing.T) {
			nodes := testCluster(t, 3, nil)
			waitFormed(t, nodes, 3, 3)
			g := createPG(t, nodes[0], strategy, res("CPU", 1), res("CPU", 1), res("CPU", 1))
			waitPG(t, nodes[0], g.ID, 10*time.Second, spreadOver)
			for _, nd := range nodes {
				if err := nd.Shutdown(); err != nil {
					t.Fatalf("stop %s: %v", nd.Name(), err)
				}
			}
			// The last to stop was the last voter: it comes back first.
			last := restartOn(t, nodes[2], true)
			again := []*Node{restartOn(t, nodes[0], false, last.RPCAddr()), restartOn(t, nodes[1], false, last.RPCAddr()), last}
			waitFormed(t, again, 3, 3)
			info := waitPG(t, last, g.ID, 30*time.Second, spreadOver)
			t.Logf("after the restart: %+v", info.Bundles)
		})
	}
}
