package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkInvariants verifies that live allocations lie in the arena and do not
// overlap each other or any free range, that free and used bytes add up to the
// capacity, that Used is the sum of live aligned sizes, and that the free list
// is sorted and coalesced.
func checkInvariants(t *testing.T, s *Store) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var spans []span
	var sum int64
	for _, o := range s.objects {
		if o.off%Alignment != 0 {
			t.Fatalf("%s at unaligned offset %d", o.id, o.off)
		}
		if n := alignUp(o.size); n > 0 {
			spans = append(spans, span{o.off, n})
			sum += n
		}
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

// TestRandomOps runs random create/seal/abort/delete/pin sequences against a
// small store, checking the allocator invariants after every step and each
// sealed object's bytes at the end of each round.
func TestRandomOps(t *testing.T) {
	var fulls, evicted int
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			s := openTest(t, 64<<10)
			contents := map[string][]byte{} // sealed objects we wrote
			secondary := map[string]bool{}
			next := 0
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
				default:
					s.Get(pick())
				}
				checkInvariants(t, s)
				if step%100 == 0 {
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
		})
	}
	// The sequences must reach the interesting paths, not just the easy ones.
	if fulls == 0 || evicted == 0 {
		t.Errorf("random ops hit ErrFull %d times and evicted %d objects; want both > 0", fulls, evicted)
	}
	t.Logf("ErrFull %d times, %d evictions observed", fulls, evicted)
}
