package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/sched"
)

// startLabelled starts three nodes labelled zone=rack1, zone=rack2 and
// zone=rack2 with gpu=yes; node 2 also has one H100 (declared as the GPU
// resources a GPU node offers).
func startLabelled(t *testing.T) {
	startClusterInit(t, 3, func(i int, cfg *cluster.Config) {
		cfg.Labels = map[string]string{"zone": []string{"rack1", "rack2", "rack2"}[i]}
		if i == 2 {
			cfg.Labels["gpu"] = "yes"
			cfg.Resources["accelerator_type:H100"] = sched.QuantityOf(1)
		}
	})
}

func whereAll(t *testing.T, k int, opts ...Option) map[string]int {
	t.Helper()
	ctx := ctxT(t)
	f := Must(where.Options(opts...))
	var refs []Ref[string]
	for i := 0; i < k; i++ {
		refs = append(refs, f.Remote(ctx))
	}
	got, err := GetAll(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, n := range got {
		count[n]++
	}
	return count
}

func TestNodeLabelsAndAcceleratorType(t *testing.T) {
	startLabelled(t)
	ctx := ctxT(t)
	// Soft labels first, while every node is idle: the task goes to the
	// soft match, wherever the driver is (Ray's NodeLabelSchedulingStrategy).
	if got := whereAll(t, 1, NodeLabelStrategy(nil, LabelSelector{"gpu": Exists()})); got["n2"] != 1 {
		t.Fatalf("soft gpu exists: task ran on %v, want n2", got)
	}
	if got := whereAll(t, 1, NodeLabelStrategy(LabelSelector{"zone": In("rack2")}, LabelSelector{"gpu": DoesNotExist()})); got["n1"] != 1 {
		t.Fatalf("hard zone in (rack2), soft gpu does_not_exist: task ran on %v, want n1", got)
	}
	if got := whereAll(t, 1, NodeLabelStrategy(LabelSelector{"zone": In("rack1")}, LabelSelector{"gpu": Exists()})); got["n0"] != 1 {
		t.Fatalf("hard zone in (rack1), soft gpu exists (no rack1 node has it): task ran on %v, want n0", got)
	}
	rack2 := NodeLabels(LabelSelector{"zone": In("rack2")})
	if got := whereAll(t, 30, rack2); got["n0"] != 0 || got["n1"]+got["n2"] != 30 {
		t.Fatalf("zone in (rack2): tasks ran on %v", got)
	}
	if got := whereAll(t, 30, rack2, Spread()); got["n0"] != 0 || got["n1"]+got["n2"] != 30 {
		t.Fatalf("SPREAD with zone in (rack2): tasks ran on %v", got)
	}
	if got := whereAll(t, 10, NodeLabels(LabelSelector{"zone": NotIn("rack2")})); got["n0"] != 10 {
		t.Fatalf("zone not_in (rack2): tasks ran on %v", got)
	}
	if got := whereAll(t, 10, NodeLabels(LabelSelector{"gpu": Exists()})); got["n2"] != 10 {
		t.Fatalf("gpu exists: tasks ran on %v", got)
	}
	if got := whereAll(t, 10, AcceleratorType("H100")); got["n2"] != 10 {
		t.Fatalf("AcceleratorType(H100): tasks ran on %v", got)
	}

	// An actor follows its labels too.
	h, err := Must(logActorClass.Options(NodeLabels(LabelSelector{"gpu": DoesNotExist(), "zone": In("rack2")}))).Remote(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := entriesCall.Remote(ctx, h).Get(ctx); err != nil {
		t.Fatal(err)
	}
	actors, err := ListActors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	placed := ""
	for _, a := range actors {
		if a.ActorID == h.ID() {
			placed = a.NodeName
		}
	}
	if placed != "n1" {
		t.Fatalf("actor with gpu does_not_exist, zone in (rack2) placed on %q, want n1", placed)
	}

	// An actor's soft labels are kept in its record and followed by the
	// leader.
	hs, err := Must(logActorClass.Options(NodeLabelStrategy(nil, LabelSelector{"gpu": Exists()}))).Remote(ctx, "y")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := entriesCall.Remote(ctx, hs).Get(ctx); err != nil {
		t.Fatal(err)
	}
	if actors, err = ListActors(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range actors {
		if a.ActorID == hs.ID() && a.NodeName != "n2" {
			t.Fatalf("actor with soft gpu exists placed on %q, want n2", a.NodeName)
		}
	}

	// No node matches: infeasible, naming the selector.
	_, err = Must(where.Options(NodeLabels(LabelSelector{"zone": In("rack9")}), FailIfInfeasible())).Remote(ctx).Get(ctx)
	var inf *InfeasibleError
	if !errors.As(err, &inf) || !strings.Contains(err.Error(), "rack9") {
		t.Fatalf("zone in (rack9): %v (want *InfeasibleError naming rack9)", err)
	}
	_, err = Must(where.Options(AcceleratorType("A100"), FailIfInfeasible())).Remote(ctx).Get(ctx)
	if !errors.As(err, &inf) || !strings.Contains(err.Error(), "accelerator_type:A100") {
		t.Fatalf("AcceleratorType(A100): %v (want *InfeasibleError naming the resource)", err)
	}
	// Bad selectors are refused with the key named.
	if _, err := where.Options(NodeLabels(LabelSelector{"zone": In()})); err == nil || !strings.Contains(err.Error(), `"zone"`) {
		t.Fatalf("In() without values: %v", err)
	}
	if _, err := where.Options(AcceleratorType(" ")); err == nil || !strings.Contains(err.Error(), "AcceleratorType") {
		t.Fatalf("empty accelerator type: %v", err)
	}
}

// Actors are placed by the tasks' policy (sched.Decide), with the
// creator's node as the local node: by default the creator's node takes
// actors while it is under half used, then the others do (Ray's hybrid
// policy); a burst of SPREAD actors goes round robin.
func TestActorsFollowTheTaskPolicy(t *testing.T) {
	startClusterInit(t, 3, func(i int, cfg *cluster.Config) { cfg.Resources[sched.CPU] = sched.QuantityOf(4) })
	ctx := ctxT(t)
	create := func(k int, opts ...Option) []ActorHandle[logActor] {
		t.Helper()
		var hs []ActorHandle[logActor]
		for i := range k {
			h, err := Must(logActorClass.Options(opts...)).Remote(ctx, fmt.Sprint(i))
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		return hs
	}
	placed := func(hs []ActorHandle[logActor]) map[string]int {
		t.Helper()
		var refs []Ref[[]string]
		for _, h := range hs {
			refs = append(refs, entriesCall.Remote(ctx, h)) // answered once it is ALIVE
		}
		if _, err := GetAll(ctx, refs); err != nil {
			t.Fatal(err)
		}
		count := map[string]int{}
		for _, h := range hs {
			count[actorState(t, ctx, h.ID()).NodeName]++
		}
		return count
	}
	var hs []ActorHandle[logActor]
	for range 4 {
		h := create(1, CPUs(1))
		placed(h) // one at a time: each decision sees the ones before
		hs = append(hs, h...)
	}
	if got := placed(hs); got["n0"] != 2 {
		t.Fatalf("four one-CPU actors from n0 on three idle 4-CPU nodes landed %v; want two on n0 (half its CPUs), then elsewhere", got)
	}
	for _, h := range hs {
		if err := Kill(ctx, h, true); err != nil {
			t.Fatal(err)
		}
	}
	if got := placed(create(6, CPUs(1), Spread())); got["n0"] != 2 || got["n1"] != 2 || got["n2"] != 2 {
		t.Fatalf("a burst of six SPREAD actors on three 4-CPU nodes landed %v; want two on each", got)
	}
}
