package objstore

import "testing"

// TestStatsMatchesList: Stats (for /metrics) adds up what List does, without
// the entries: primary, secondary and pinned bytes, each rounded up to
// Alignment, and the object count.
func TestStatsMatchesList(t *testing.T) {
	s := openTest(t, 1<<20)
	if err := s.Put("a", pattern(1, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSecondary("b", pattern(2, 5000)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("c", pattern(3, 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Pin("c"); err != nil {
		t.Fatal(err)
	}
	_, want := s.List()
	got := s.Stats()
	if got != want {
		t.Fatalf("Stats() = %+v, List's = %+v", got, want)
	}
	if got.Objects != 3 || got.Pinned != Alignment || got.Secondary != alignUp(5000) || got.Primary != alignUp(100)+alignUp(10) {
		t.Fatalf("Stats() = %+v, want 3 objects, %d pinned, %d secondary, %d primary", got, Alignment, alignUp(5000), alignUp(100)+alignUp(10))
	}
}
