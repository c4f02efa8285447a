package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestEntrypointNode(t *testing.T) {
	t.Parallel()
	cpu := func(n int64) ResourceSet { return ResourceSet{CPU: QuantityOf(n)} }
	nodes := []Node{
		{ID: "id-c", Name: "c", Total: cpu(8), Alive: true},
		{ID: "id-a", Name: "a", Total: cpu(1), Alive: true},
		{ID: "id-b", Name: "b", Total: cpu(4), Alive: true},
		{ID: "id-d", Name: "d", Total: ResourceSet{CPU: QuantityOf(16), GPU: QuantityOf(2)}, Alive: false},
		{ID: "id-b2", Name: "b", Total: cpu(4), Alive: true}, // same name: by ID
	}
	for _, c := range []struct {
		name   string
		demand ResourceSet
		local  string
		want   string
		short  string // the resource an infeasible error names
	}{
		{"nothing asked: here", nil, "id-a", "id-a", ""},
		{"here covers it", cpu(1), "id-c", "id-c", ""},
		{"here too small: first by name", cpu(2), "id-a", "id-b", ""},
		{"here unknown: first by name", cpu(1), "elsewhere", "id-a", ""},
		{"only the largest", cpu(8), "id-a", "id-c", ""},
		{"a dead node is never chosen", cpu(16), "id-d", "", CPU},
		{"a resource only a dead node has", ResourceSet{GPU: QuantityOf(1)}, "", "", GPU},
		{"each resource somewhere, never together", ResourceSet{CPU: QuantityOf(8), "x": QuantityOf(1)}, "", "", "x"},
	} {
		got, err := EntrypointNode(nodes, c.demand, c.local)
		if c.want != "" {
			if err != nil || got != c.want {
				t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
			}
			continue
		}
		var ie *InfeasibleError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInfeasible) || ie.Resource != c.short || ie.Bundle != -1 {
			t.Errorf("%s: %q, %v; want infeasible naming %q", c.name, got, err, c.short)
		}
	}
	demand := ResourceSet{CPU: QuantityOf(8), "x": QuantityOf(1)}
	_, err := EntrypointNode(nodes, demand, "")
	if want := fmt.Sprintf("infeasible: no live node has the entrypoint resources %s (of 5 nodes in the cluster)", demand); err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// Against the definition on random clusters: the choice is alive and
// covers the demand, is local when local qualifies, else the least by
// (name, ID) of those that do; infeasible exactly when none does; and the
// order of the nodes does not matter.
func TestEntrypointNodeProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(26, 4))
	for iter := range 2000 {
		nodes := make([]Node, rng.IntN(6))
		for i := range nodes {
			nodes[i] = Node{ID: fmt.Sprintf("id%d", rng.IntN(9)), Name: fmt.Sprintf("n%d", rng.IntN(3)), Alive: rng.IntN(4) > 0,
				Total: ResourceSet{CPU: QuantityOf(rng.Int64N(5)), GPU: QuantityOf(rng.Int64N(2))}}
		}
		demand := ResourceSet{CPU: QuantityOf(rng.Int64N(5))}
		if rng.IntN(3) == 0 {
			demand[GPU] = QuantityOf(1)
		}
		local := fmt.Sprintf("id%d", rng.IntN(9))
		qualifies := func(n Node) bool { return n.Alive && n.Total.Covers(demand) }
		var want *Node
		for i, n := range nodes {
			if !qualifies(n) {
				continue
			}
			if n.ID == local {
				want = &nodes[i]
				break
			}
			if want == nil || n.Name < want.Name || (n.Name == want.Name && n.ID < want.ID) {
				want = &nodes[i]
			}
		}
		got, err := EntrypointNode(nodes, demand, local)
		switch {
		case want == nil && !errors.Is(err, ErrInfeasible):
			t.Fatalf("iter %d: no node qualifies, got %q, %v", iter, got, err)
		case want != nil && (err != nil || got != want.ID):
			t.Fatalf("iter %d: got %q, %v; want %q (nodes %+v, demand %s, local %s)", iter, got, err, want.ID, nodes, demand, local)
		}
		shuffled := append([]Node(nil), nodes...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again, err2 := EntrypointNode(shuffled, demand, local); again != got || (err == nil) != (err2 == nil) {
			t.Fatalf("iter %d: %q in one order, %q in another", iter, got, again)
		}
	}
}
