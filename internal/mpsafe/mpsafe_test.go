package mpsafe

import (
	"bytes"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

type inner struct {
	Name  string
	Tags  []string
	Attrs map[string]float64
}

type sample struct {
	I     int64
	U     uint64
	F32   float32
	F64   float64
	B     bool
	S     string
	Blob  []byte
	Inner []inner
	Any   any
	When  time.Time
	Ptr   *inner
}

// validValues cover every msgpack type and length form the encoder emits.
func validValues() []any {
	long := strings.Repeat("x", 70000) // str32
	return []any{
		nil, true, false, 0, -1, -33, 127, 128, -129, 1 << 20, -1 << 40, uint64(math.MaxUint64),
		float32(1.5), 2.25, "", "short", strings.Repeat("y", 200), strings.Repeat("z", 300), long,
		[]byte{}, []byte("abc"), make([]byte, 300), make([]byte, 70000),
		[]int{}, make([]int, 15), make([]int, 16), make([]int, 70000),
		map[string]int{}, map[string]int{"a": 1}, manyKeys(16), manyKeys(70000),
		[]any{[]any{[]any{map[string]any{"k": []any{1, "2", nil}}}}},
		time.Unix(1700000000, 5), time.Unix(1<<40, 0), // fixext8 and ext8 forms
		&sample{I: -5, U: 7, F32: 1, F64: 2, B: true, S: "s", Blob: []byte{1, 2}, Any: map[string]any{"x": []any{1.5}},
			Inner: []inner{{Name: "n", Tags: []string{"a", "b"}, Attrs: map[string]float64{"CPU": 2}}}, When: time.Unix(5, 0), Ptr: &inner{}},
		msgpack.RawMessage{0x93, 1, 2, 3},
		// ext forms the encoder emits only for registered ext types:
		// fixext1, fixext2, fixext16, ext16 and ext32, each of type 1.
		ext(0xd4, nil, 1), ext(0xd5, nil, 2), ext(0xd8, nil, 16),
		ext(0xc8, []byte{0x01, 0x2c}, 300), ext(0xc9, []byte{0x00, 0x01, 0x11, 0x70}, 70000),
	}
}

// ext is the raw ext value of type code code, length bytes size and n
// payload bytes.
func ext(code byte, size []byte, n int) msgpack.RawMessage {
	b := append(append([]byte{code}, size...), 1)
	return append(b, make([]byte, n)...)
}

func manyKeys(n int) map[string]int {
	m := make(map[string]int, n)
	for i := range n {
		m[strings.Repeat("k", i%7)+string(rune('a'+i%26))+string(rune(i))] = i
	}
	return m
}

func TestCheckAcceptsEncodedValues(t *testing.T) {
	t.Parallel()
	for i, v := range validValues() {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatalf("value %d: %v", i, err)
		}
		if err := Check(b); err != nil {
			t.Errorf("value %d (%T, %d bytes): %v", i, v, len(b), err)
		}
	}
}

func TestUnmarshalRoundTrip(t *testing.T) {
	t.Parallel()
	in := &sample{I: -5, S: "hello", Blob: []byte("bin"), Inner: []inner{{Name: "n", Tags: []string{"t"}}}, When: time.Unix(9, 0).UTC()}
	b, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out sample
	if err := Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.I != in.I || out.S != in.S || !bytes.Equal(out.Blob, in.Blob) || len(out.Inner) != 1 || out.Inner[0].Tags[0] != "t" || !out.When.Equal(in.When) {
		t.Fatalf("got %+v, want %+v", out, in)
	}
}

// hostile inputs declare far more than they hold.
var hostile = map[string][]byte{
	"empty":               {},
	"reserved 0xc1":       {0xc1},
	"trailing byte":       {0xc0, 0xc0},
	"str32 4 GiB":         {0xdb, 0xff, 0xff, 0xff, 0xff},
	"bin32 4 GiB":         {0xc6, 0xff, 0xff, 0xff, 0xff, 1, 2, 3},
	"ext32 4 GiB":         {0xc9, 0xff, 0xff, 0xff, 0xff, 1},
	"array32 4 Gi":        {0xdd, 0xff, 0xff, 0xff, 0xff},
	"array16 3 for 2":     {0xdc, 0x00, 0x03, 1, 2},
	"map32 4 Gi":          {0xdf, 0xff, 0xff, 0xff, 0xff},
	"map16 2 for 3 bytes": {0xde, 0x00, 0x02, 1, 2, 3},
	"fixmap odd":          {0x81, 1},
	"nested array32":      {0x92, 0xdd, 0x00, 0x0f, 0xff, 0xff, 0xdd, 0xff, 0xff, 0xff, 0xff},
	"str8 cut":            {0xd9},
	"uint64 cut":          {0xcf, 1, 2},
	"fixext16 cut":        {0xd8, 1, 2},
	"ext8 cut":            {0xc7, 4},
	"fixarray short":      {0x93, 1, 2},
}

func TestCheckRejectsHostileInput(t *testing.T) {
	t.Parallel()
	for name, b := range hostile {
		if err := Check(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

// nested returns depth one-element arrays around nil.
func nested(depth int) []byte {
	return append(bytes.Repeat([]byte{0x91}, depth), 0xc0)
}

func TestCheckBoundsNesting(t *testing.T) {
	t.Parallel()
	if err := Check(nested(MaxDepth)); err != nil {
		t.Fatalf("depth %d: %v", MaxDepth, err)
	}
	err := Check(nested(MaxDepth + 1))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "deeper than") {
		t.Fatalf("depth %d: got %v", MaxDepth+1, err)
	}
	if err := Check(nested(1 << 20)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("depth 1 Mi: got %v", err)
	}
}

func TestCheckErrorNamesOffset(t *testing.T) {
	t.Parallel()
	err := Check([]byte{0x92, 0x01, 0xdb, 0xff, 0xff, 0xff, 0xff})
	if err == nil || !strings.Contains(err.Error(), "offset 2 declares 4294967295 bytes, 0 follow") {
		t.Fatalf("got %v", err)
	}
	err = Check([]byte{0x91, 0xdf, 0x00, 0x00, 0x00, 0x02, 1, 2, 3})
	if err == nil || !strings.Contains(err.Error(), "offset 1 declares 4 elements, 3 bytes follow") {
		t.Fatalf("got %v", err)
	}
}

// allocated returns the bytes fn allocates on the heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestUnmarshalHostileAllocatesNothing(t *testing.T) {
	for name, b := range hostile {
		var v sample
		var anyv any
		var err1, err2 error
		n := allocated(func() {
			err1 = Unmarshal(b, &v)
			err2 = Unmarshal(b, &anyv)
		})
		if !errors.Is(err1, ErrMalformed) || !errors.Is(err2, ErrMalformed) {
			t.Errorf("%s: got %v, %v", name, err1, err2)
		}
		if n > 64<<10 { // errors allocate a little; the race detector more
			t.Errorf("%s: allocated %d bytes", name, n)
		}
	}
}

func TestUnmarshalDoesNotPoolGrownDecoders(t *testing.T) {
	big, err := msgpack.Marshal(&sample{S: strings.Repeat("s", 1<<20)})
	if err != nil {
		t.Fatal(err)
	}
	var v sample
	for range 10 {
		if err := Unmarshal(big, &v); err != nil {
			t.Fatal(err)
		}
	}
	v = sample{}
	var m runtime.MemStats
	runtime.GC() // once: pooled decoders survive it, as on a busy process
	runtime.ReadMemStats(&m)
	if m.HeapAlloc > 1<<20 {
		t.Fatalf("live heap %d bytes after decoding 1 MiB strings: a decoder kept its buffer", m.HeapAlloc)
	}
}

// FuzzCheck compares Check with the msgpack package's own Skip: input that
// Check accepts is one value that Skip consumes exactly, and input Skip
// consumes exactly is rejected by Check only for its nesting.
func FuzzCheck(f *testing.F) {
	for _, v := range validValues() {
		if b, _ := msgpack.Marshal(v); len(b) <= 4<<10 { // large seeds slow the mutator down
			f.Add(b)
		}
	}
	for _, b := range hostile {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Check(b)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error does not wrap ErrMalformed: %v", err)
		}
		r := bytes.NewReader(b)
		skipErr := msgpack.NewDecoder(r).Skip()
		exact := skipErr == nil && r.Len() == 0
		switch {
		case err == nil && !exact:
			t.Fatalf("Check accepted what Skip rejects (%v, %d bytes left)", skipErr, r.Len())
		case err != nil && exact && !strings.Contains(err.Error(), "deeper than"):
			t.Fatalf("Check rejected a value Skip consumes: %v", err)
		}
	})
}
