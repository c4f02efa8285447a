package cluster

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// checkInvariants checks, from the leader's state and listing, that no node
// has more CPU reserved than it has and that every CREATED group keeps its
// strategy's constraint with every bundle on a node.
func checkInvariants(leader *Node) error {
	reserved, err := leader.State().PlacementReserved()
	if err != nil {
		return err
	}
	for node, r := range reserved {
		if r[sched.CPU] > sched.QuantityOf(2) {
			return fmt.Errorf("node %s has %s CPU reserved of 2", node, r[sched.CPU])
		}
	}
	var list wire.PGList
	if err := pgCall(leader, wire.MethodPGList, &wire.Empty{}, &list); err != nil {
		return err
	}
	for _, g := range list.Groups {
		if g.State != string(store.PGCreated) {
			continue
		}
		nodes := map[string]int{}
		for _, b := range g.Bundles {
			if b.NodeID == "" {
				return fmt.Errorf("created group %s has bundle %d on no node", g.ID, b.Index)
			}
			nodes[b.NodeID]++
		}
		switch g.Strategy {
		case "STRICT_PACK":
			if len(nodes) != 1 {
				return fmt.Errorf("STRICT_PACK group %s spans %d nodes", g.ID, len(nodes))
			}
		case "STRICT_SPREAD":
			if len(nodes) != len(g.Bundles) {
				return fmt.Errorf("STRICT_SPREAD group %s puts %d bundles on %d nodes", g.ID, len(g.Bundles), len(nodes))
			}
		}
	}
	return nil
}

// Random groups of every strategy are created and removed concurrently on a
// 3-node cluster (2 CPUs each) while a checker watches the invariants; at
// the end every reservation is given back, in the state and on the nodes.
func TestPlacementConcurrentCreatesAndRemovesKeepInvariants(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	leader := leaderOf(t, nodes)
	strategies := []string{"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}
	halves := []float64{0.5, 1, 1.5}

	stop := make(chan struct{})
	checkErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				checkErr <- nil
				return
			default:
			}
			if err := checkInvariants(leader); err != nil {
				checkErr <- err
				return
			}
		}
	}()

	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for i := 0; i < 8; i++ {
				bundles := make([]sched.ResourceSet, 1+rng.IntN(3))
				for j := range bundles {
					q, _ := sched.QuantityFromFloat(halves[rng.IntN(len(halves))])
					bundles[j] = sched.ResourceSet{sched.CPU: q}
				}
				var info wire.PGInfo
				st := strategies[rng.IntN(len(strategies))]
				if err := pgCall(leader, wire.MethodPGCreate, &wire.PGCreateRequest{ID: newID()[:24], Strategy: st, Bundles: bundles}, &info); err != nil {
					t.Errorf("create %s %v: %v", st, bundles, err)
					return
				}
				// Give it a moment to be placed (a waiting Get answers once
				// it is CREATED), then maybe remove it.
				var g wire.PGInfo
				wait := int64(rng.IntN(300))
				if err := pgCall(leader, wire.MethodPGGet, &wire.PGGetRequest{ID: info.ID, WaitMillis: wait}, &g); err == nil && g.State == string(store.PGCreated) {
					mu.Lock()
					created++
					mu.Unlock()
				}
				if rng.IntN(4) > 0 {
					if err := pgCall(leader, wire.MethodPGRemove, &wire.PGRemoveRequest{ID: info.ID}, nil); err != nil {
						t.Errorf("remove %s: %v", info.ID, err)
					}
				}
			}
		}(uint64(w))
	}
	wg.Wait()
	close(stop)
	if err := <-checkErr; err != nil {
		t.Fatal(err)
	}
	if created == 0 {
		t.Fatal("no group was ever created: the test checked nothing")
	}
	// Remove what is left; everything comes back.
	var list wire.PGList
	if err := pgCall(leader, wire.MethodPGList, &wire.Empty{}, &list); err != nil {
		t.Fatal(err)
	}
	for _, g := range list.Groups {
		if g.State != string(store.PGRemoved) {
			if err := pgCall(leader, wire.MethodPGRemove, &wire.PGRemoveRequest{ID: g.ID}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.Until(t, 20*time.Second, "all reservations given back", func() error {
		if r := reservedCPU(t, leader); r != 0 {
			return fmt.Errorf("%s CPU still reserved in the state", r)
		}
		return checkNodePools(nodes)
	})
	t.Logf("%d groups seen created", created)
}
