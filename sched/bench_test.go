package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchCluster is n nodes of 16 CPU / 64 GiB, every fourth with 8 GPUs and
// accelerator_type:H100, each partly used.
func benchCluster(n int) []Node {
	r := rand.New(rand.NewPCG(1, 2))
	nodes := make([]Node, n)
	for i := range nodes {
		total := ResourceSet{CPU: QuantityOf(16), Memory: QuantityOf(64 << 30), NodeResource(fmt.Sprint(i)): Unit}
		if i%4 == 0 {
			total[GPU] = QuantityOf(8)
			total[AcceleratorTypeResource("H100")] = Unit
		}
		avail := total.Clone()
		avail[CPU] = QuantityOf(int64(r.IntN(17)))
		if i%4 == 0 {
			avail[GPU] = QuantityOf(int64(r.IntN(9)))
		}
		nodes[i] = Node{ID: fmt.Sprintf("node-%03d", i), Total: total, Available: avail, Alive: true}
	}
	return nodes
}

func BenchmarkPlaceBundles100Nodes(b *testing.B) {
	nodes := benchCluster(100)
	for _, nb := range []int{4, 16, 64} {
		bs := make([]ResourceSet, nb)
		for i := range bs {
			bs[i] = ResourceSet{CPU: QuantityOf(2), Memory: QuantityOf(4 << 30)}
			if i%4 == 0 {
				bs[i][GPU] = Unit
			}
		}
		for _, s := range PlacementStrategies {
			b.Run(fmt.Sprintf("%s/%dbundles", s, nb), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_, err := PlaceBundles(nodes, bs, s, nil)
					if err != nil && s != StrictPack {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDecide is one task decision per strategy on 3, 100 and 1,000
// nodes: the cost every lease request now pays under its node's lock.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{3, 100, 1000} {
		s := Snapshot{Nodes: benchCluster(n), Local: "node-001"}
		for _, kind := range []StrategyKind{StrategyHybrid, StrategySpread} {
			b.Run(fmt.Sprintf("%s/%d", map[StrategyKind]string{StrategyHybrid: "hybrid", StrategySpread: "spread"}[kind], n), func(b *testing.B) {
				req := Request{Demand: ResourceSet{CPU: QuantityOf(1)}, Strategy: Strategy{Kind: kind}}
				rng := rand.New(rand.NewPCG(1, 2))
				for b.Loop() {
					d, err := Decide(s, req, rng)
					if err != nil {
						b.Fatal(err)
					}
					s.SpreadNext = d.SpreadNext
				}
			})
		}
	}
}
