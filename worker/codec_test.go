package worker

import (
	"bytes"
	"math"
	"reflect"
	"runtime"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Named slice types take the library's generic element-by-element path, so
// they are the reference for the registered fast codecs.
type (
	refInts     []int
	refInt64s   []int64
	refInt32s   []int32
	refUint64s  []uint64
	refFloat64s []float64
	refFloat32s []float32
)

func TestSliceCodecsMatchTheLibrary(t *testing.T) {
	ints := []int{0, 1, -1, 127, 128, -33, 255, 256, 65535, 65536, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64}
	floats := []float64{0, 1.5, -2, math.Inf(1), math.MaxFloat64, math.SmallestNonzeroFloat64}
	cases := []struct{ fast, ref any }{
		{ints, refInts(ints)},
		{[]int(nil), refInts(nil)},
		{[]int{}, refInts{}},
		{[]float64(floats), refFloat64s(floats)},
		{[]float32{0, 1.5, -2}, refFloat32s{0, 1.5, -2}},
		{[]int64{1, -1, math.MaxInt64}, refInt64s{1, -1, math.MaxInt64}},
		{[]int32{1, -1, math.MaxInt32}, refInt32s{1, -1, math.MaxInt32}},
		{[]uint64{1, math.MaxUint64}, refUint64s{1, math.MaxUint64}},
	}
	for _, c := range cases {
		fast, err := msgpack.Marshal(c.fast)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := msgpack.Marshal(c.ref)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fast, ref) {
			t.Errorf("%T %v: encoded %x, the library %x", c.fast, c.fast, fast, ref)
		}
		// Decode the library's bytes with the fast decoder and compare.
		out := reflect.New(reflect.TypeOf(c.fast))
		if err := msgpack.Unmarshal(ref, out.Interface()); err != nil {
			t.Fatalf("%T: %v", c.fast, err)
		}
		if got := out.Elem().Interface(); !reflect.DeepEqual(got, c.fast) {
			t.Errorf("%T: decoded %#v, want %#v", c.fast, got, c.fast)
		}
	}
	// Inside a struct and a map too.
	type rec struct {
		A []int
		B map[string][]float64
	}
	in := rec{A: []int{3, 1, 2}, B: map[string][]float64{"x": {0.5}}}
	b, _ := msgpack.Marshal(in)
	var out rec
	if err := msgpack.Unmarshal(b, &out); err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("struct round trip: %+v, %v", out, err)
	}
}

func TestSliceDecoderRefusesHostileLength(t *testing.T) {
	// array32 claiming 2^31 elements with two behind it: an error, after
	// allocating at most maxPrealloc elements.
	b := []byte{0xdd, 0x80, 0, 0, 0, 1, 2}
	var v []int
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := msgpack.Unmarshal(b, &v)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatalf("decoded %d elements from a truncated array", len(v))
	}
	// maxPrealloc ints are 512 KiB; the claimed length would be 16 GiB.
	// The bound leaves room for whatever else this process allocates
	// meanwhile.
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Fatalf("decoding a truncated array claiming 2^31 elements allocated %d bytes", got)
	}
	var f []float64
	if err := msgpack.Unmarshal([]byte{0x92, 0xa1, 'x', 1}, &f); err == nil {
		t.Fatal("decoded a string as a float64")
	}
}

// BenchmarkSliceCodecs measures the registered codecs against the
// library's generic path (a named slice type) on 1,000 elements: the
// per-element figure codec.go quotes is ns/op divided by 1,000.
func BenchmarkSliceCodecs(b *testing.B) {
	ints := make([]int, 1000)
	for i := range ints {
		ints[i] = i * 1000
	}
	floats := make([]float64, 1000)
	for i := range floats {
		floats[i] = float64(i) / 3
	}
	for _, c := range []struct {
		name      string
		fast, ref any
	}{
		{"int", ints, refInts(ints)},
		{"float64", floats, refFloat64s(floats)},
	} {
		for _, side := range []struct {
			name string
			v    any
		}{{"fast", c.fast}, {"library", c.ref}} {
			data, err := msgpack.Marshal(side.v)
			if err != nil {
				b.Fatal(err)
			}
			typ := reflect.TypeOf(side.v)
			b.Run("decode/"+c.name+"/"+side.name, func(b *testing.B) {
				for b.Loop() {
					// Into a fresh value, as Get decodes.
					if err := msgpack.Unmarshal(data, reflect.New(typ).Interface()); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("encode/"+c.name+"/"+side.name, func(b *testing.B) {
				for b.Loop() {
					if _, err := msgpack.Marshal(side.v); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
