package objstore

import "testing"

const benchSize = 1 << 20

// BenchmarkPutGet1MiB stores a 1 MiB object, reads it back (zero-copy) and
// frees it: one copy in plus bookkeeping, to compare with BenchmarkMemcpy1MiB.
func BenchmarkPutGet1MiB(b *testing.B) {
	s := openTest(b, 64<<20)
	src := pattern(1, benchSize)
	b.SetBytes(benchSize)
	for b.Loop() {
		if err := s.Put("obj", src); err != nil {
			b.Fatal(err)
		}
		if _, got, ok := s.Get("obj"); !ok || len(got) != benchSize {
			b.Fatal("Get failed")
		}
		if err := s.Delete("obj"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemcpy1MiB is the baseline: a plain 1 MiB copy between heap
// buffers.
func BenchmarkMemcpy1MiB(b *testing.B) {
	src := pattern(1, benchSize)
	dst := make([]byte, benchSize)
	b.SetBytes(benchSize)
	for b.Loop() {
		copy(dst, src)
	}
}
