package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkInvariants verifies that live allocations (objects in the index, and
// removed ones whose space waits for their Views) lie in the arena and do not
// overlap each other or any free range, that free and used bytes add up to the
// capacity, that Used is the sum of their aligned sizes, that the view counts
// add up, and that the free list is sorted and coalesced.
func checkInvariants(t *testing.T, s *Store) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var spans []span
	var sum int64
	views := 0
	for o := range s.dead {
		if !o.dead || o.views == 0 || s.objects[o.id] == o {
			t.Fatalf("dead object %s: dead=%v views=%d, indexed=%v", o.id, o.dead, o.views, s.objects[o.id] == o)
		}
	}
	for o := range chainObjects(s) {
		views += o.views
		if o.off%Alignment != 0 {
			t.Fatalf("%s at unaligned offset %d", o.id, o.off)
		}
		if n := alignUp(o.size); n > 0 {
			spans = append(spans, span{o.off, n})
			sum += n
		}
	}
	if views != s.views {
		t.Fatalf("Store.views %d != sum of object views %d", s.views, views)
	}
	if sum != s.alloc.used {
		t.Fatalf("Used %d != sum of live aligned sizes %d", s.alloc.used, sum)
	}
	var free int64
	for i, f := range s.alloc.free {
		if f.size <= 0 || (i > 0 && s.alloc.free[i-1].end() >= f.off) {
			t.Fatalf("free list not sorted and coalesced: %v", s.alloc.free)
		}
		free += f.size
	}
	if free+sum != s.capacity {
		t.Fatalf("free %d + used %d != capacity %d", free, sum, s.capacity)
	}
	spans = append(spans, s.alloc.free...)
	slices.SortFunc(spans, func(a, b span) int { return int(a.off - b.off) })
	var end int64
	for _, sp := range spans {
		if sp.off < end {
			t.Fatalf("overlapping ranges at %d: %v", sp.off, spans)
		}
		end = sp.end()
	}
	if end != s.capacity {
		t.Fatalf("ranges end at %d, capacity %d", end, s.capacity)
	}
}

// chainObjects yields the indexed objects, then the dead ones still viewed.
func chainObjects(s *Store) func(func(*object) bool) {
	return func(yield func(*object) bool) {
		for _, o := range s.objects {
			if !yield(o) {
				return
			}
		}
		for o := range s.dead {
			if !yield(o) {
				return
			}
		}
	}
}

// TestRandomOps runs random create/seal/abort/delete/pin/view sequences
// against a small store, checking the allocator invariants after every step,
// each sealed object's bytes at the end of each round, and that a View's
// bytes never change before it is released, even when its object is deleted
// or evicted and its space is wanted.
func TestRandomOps(t *testing.T) {
	t.Parallel()
	var fulls, evicted, deadViewed int
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			s := openTest(t, 64<<10)
			contents := map[string][]byte{} // sealed objects we wrote
			secondary := map[string]bool{}
			next := 0
			type held struct {
				view    []byte
				want    []byte
				release func()
			}
			var views []held
			for step := range 2000 {
				ids := make([]string, 0, len(s.objects))
				s.mu.Lock()
				for id := range s.objects {
					ids = append(ids, id)
				}
				s.mu.Unlock()
				slices.Sort(ids) // map order is random; keep runs reproducible
				pick := func() string {
					if len(ids) == 0 {
						return "none"
					}
					return ids[rng.IntN(len(ids))]
				}
				switch op := rng.IntN(10); {
				case op < 4: // create, usually seal
					id := fmt.Sprint("o", next)
					next++
					size := int64(rng.IntN(6000))
					if rng.IntN(10) == 0 {
						size = 0
					}
					var buf []byte
					var err error
					if secondary[id] = rng.IntN(2) == 0; secondary[id] {
						buf, err = s.CreateSecondary(id, size)
					} else {
						buf, err = s.Create(id, size)
					}
					if errors.Is(err, ErrFull) {
						fulls++
					}
					if err != nil {
						continue
					}
					for i := range buf {
						buf[i] = byte(next + i)
					}
					if rng.IntN(5) > 0 {
						if err := s.Seal(id); err != nil {
							t.Fatal(err)
						}
						contents[id] = bytes.Clone(buf)
					}
				case op < 7:
					id := pick()
					if s.Delete(id) == nil {
						delete(contents, id)
					}
				case op == 7:
					_ = s.Abort(pick())
				case op == 8:
					if id := pick(); rng.IntN(2) == 0 {
						_ = s.Pin(id)
					} else {
						_ = s.Unpin(id)
					}
				case op == 9 && rng.IntN(2) == 0: // take a view, or release one
					if len(views) > 0 && rng.IntN(2) == 0 {
						i := rng.IntN(len(views))
						if !bytes.Equal(views[i].view, views[i].want) {
							t.Fatalf("step %d: a view changed before its release", step)
						}
						views[i].release()
						views = slices.Delete(views, i, i+1)
						continue
					}
					id := pick()
					if want, ok := contents[id]; ok {
						off := int64(rng.IntN(len(want) + 1))
						v, release, err := s.View(id, off, int64(rng.IntN(3000)))
						if err != nil {
							t.Fatalf("step %d: view of %s: %v", step, id, err)
						}
						views = append(views, held{v, bytes.Clone(want[off : off+int64(len(v))]), release})
					}
				default:
					s.Get(pick())
				}
				checkInvariants(t, s)
				if len(s.dead) > 0 {
					deadViewed++
				}
				if step%100 == 0 {
					for _, h := range views {
						if !bytes.Equal(h.view, h.want) {
							t.Fatalf("step %d: a view changed before its release", step)
						}
					}
					for id, want := range contents {
						if _, got, ok := s.Get(id); ok && !bytes.Equal(got, want) {
							t.Fatalf("step %d: %s corrupted", step, id)
						} else if !ok {
							if !secondary[id] {
								t.Fatalf("step %d: primary %s vanished", step, id)
							}
							delete(contents, id) // evicted secondary
							evicted++
						}
					}
				}
			}
			for _, h := range views {
				h.release()
			}
			checkInvariants(t, s)
			if len(s.dead) != 0 || s.views != 0 {
				t.Fatalf("after releasing every view: %d dead objects, %d views", len(s.dead), s.views)
			}
		})
	}
	// The sequences must reach the interesting paths, not just the easy ones.
	if fulls == 0 || evicted == 0 || deadViewed == 0 {
		t.Errorf("random ops hit ErrFull %d times, evicted %d objects and held a deleted object's view in %d steps; want all > 0", fulls, evicted, deadViewed)
	}
	t.Logf("ErrFull %d times, %d evictions observed, %d steps with a deleted object still viewed", fulls, evicted, deadViewed)
}

// TestResidentFirst: over random creates and deletes, an allocation reaches
// past the already-resident part of the arena only when no hole wholly
// inside that part fits it, and the resident part covers every allocation
// ever made. Half the seeds start from a store whose first quarter was
// populated by PrefaultAll.
func TestResidentFirst(t *testing.T) {
	t.Parallel()
	var fresh, reused int
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := openTest(t, 256<<10)
		if seed%2 == 1 {
			s.mu.Lock()
			s.alloc.resident = 64 << 10 // as PrefaultAll bounded by free memory
			s.mu.Unlock()
		}
		var live []string
		for step := range 1500 {
			if len(live) > 0 && rng.IntN(5) < 2 {
				i := rng.IntN(len(live))
				if err := s.Delete(live[i]); err != nil {
					t.Fatal(err)
				}
				live = slices.Delete(live, i, i+1)
				continue
			}
			size := int64(1 + rng.IntN(20000))
			need := alignUp(size)
			s.mu.Lock()
			mark := s.alloc.resident
			fits := false // a hole wholly below the mark fits
			for _, h := range s.alloc.free {
				if h.end() <= mark && h.size >= need {
					fits = true
				}
			}
			s.mu.Unlock()
			id := fmt.Sprint("o", step)
			if _, err := s.Create(id, size); err != nil {
				if !errors.Is(err, ErrFull) {
					t.Fatal(err)
				}
				continue
			}
			live = append(live, id)
			loc, _ := s.Locate(id)
			end := loc.Offset + need
			switch {
			case end > mark && fits:
				t.Fatalf("seed %d step %d: %d bytes placed at %d, past the resident mark %d, while a resident hole fits", seed, step, need, loc.Offset, mark)
			case end > mark:
				fresh++
			default:
				reused++
			}
			s.mu.Lock()
			if s.alloc.resident < end || s.alloc.resident < mark {
				t.Fatalf("seed %d step %d: resident mark %d after placing [%d,%d) with the mark at %d", seed, step, s.alloc.resident, loc.Offset, end, mark)
			}
			s.mu.Unlock()
		}
		checkInvariants(t, s)
	}
	if fresh == 0 || reused == 0 {
		t.Errorf("%d allocations took fresh space and %d resident; want both > 0", fresh, reused)
	}
}
