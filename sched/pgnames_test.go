package sched

import "testing"

// TestPlacementGroupDemandCannotOvercommitABundle: work pinned to bundle 0
// and work that takes any bundle share the bundle's resources, as in Ray
// (the pinned demand takes the wildcard name too).
func TestPlacementGroupDemandCannotOvercommitABundle(t *testing.T) {
	t.Parallel()
	const pg = "0a1b2c3d"
	bundle := ResourceSet{CPU: QuantityOf(1)}
	avail := BundleResources(pg, 0, bundle)
	pinned := PlacementGroupDemand(pg, 0, bundle)
	anyBundle := PlacementGroupDemand(pg, -1, bundle)
	if !avail.Covers(pinned) || !avail.Covers(anyBundle) {
		t.Fatalf("a fresh bundle %v does not cover %v or %v", avail, pinned, anyBundle)
	}
	avail.Sub(pinned)
	if avail.Covers(anyBundle) {
		t.Fatalf("after the pinned task took the bundle's CPU, %v still covers any-bundle work %v", avail, anyBundle)
	}
	avail.Add(pinned)
	avail.Sub(anyBundle)
	if avail.Covers(pinned) {
		t.Fatalf("after any-bundle work took the CPU, %v still covers pinned work %v", avail, pinned)
	}
	// Zero-resource work still needs the bundle, through the markers.
	if d := PlacementGroupDemand(pg, 0, ResourceSet{}); len(d) != 2 || d["bundle_group_0_"+pg] != BundleMarkerDemand || d["bundle_group_"+pg] != BundleMarkerDemand {
		t.Fatalf("empty pinned demand = %v", d)
	}
}

func TestPlacementGroupOfPrefersTheIndex(t *testing.T) {
	t.Parallel()
	for range 20 { // map order varies: the indexed marker must win every time
		pg, idx, ok := PlacementGroupOf(PlacementGroupDemand("0a1b2c3d", 2, ResourceSet{CPU: QuantityOf(1)}))
		if !ok || pg != "0a1b2c3d" || idx != 2 {
			t.Fatalf("PlacementGroupOf(pinned to 2) = %q, %d, %v", pg, idx, ok)
		}
	}
	if pg, idx, ok := PlacementGroupOf(PlacementGroupDemand("0a1b2c3d", -1, nil)); !ok || pg != "0a1b2c3d" || idx != -1 {
		t.Fatalf("PlacementGroupOf(any bundle) = %q, %d, %v", pg, idx, ok)
	}
	if _, _, ok := PlacementGroupOf(ResourceSet{CPU: QuantityOf(1)}); ok {
		t.Fatal("a plain demand taken for a placement-group demand")
	}
}

func TestBaseDemandUndoesPlacementGroupDemand(t *testing.T) {
	t.Parallel()
	const pg = "0a1b2c3d"
	base := ResourceSet{GPU: QuantityOf(1) / 2, CPU: QuantityOf(1), "gpu_memory": QuantityOf(1 << 30)}
	for _, idx := range []int{-1, 0, 12} {
		if got := BaseDemand(pg, PlacementGroupDemand(pg, idx, base)); !got.Equal(base) {
			t.Errorf("BaseDemand(PlacementGroupDemand(index %d, %v)) = %v", idx, base, got)
		}
	}
	if got := BaseDemand(pg, PlacementGroupDemand(pg, 3, nil)); len(got) != 0 {
		t.Errorf("BaseDemand of markers only = %v, want empty", got)
	}
	if got := BaseDemand("ffff0000", PlacementGroupDemand(pg, -1, base)); len(got) != 0 {
		t.Errorf("BaseDemand for another group = %v, want empty", got)
	}
}
