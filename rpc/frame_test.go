package rpc

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

func encodeFrame(t testing.TB, f *Frame) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := WriteFrame(w, f); err != nil {
		t.Fatalf("WriteFrame: %v", err)
	}
	if err := w.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	return buf.Bytes()
}

func sampleFrames() []*Frame {
	return []*Frame{
		{Seq: 1, Kind: KindRequest, Method: "Node.Register", Body: []byte{0xc0}},
		{Seq: 300, Kind: KindResponse, Body: []byte{0x93, 1, 2, 3}},
		{Seq: 1 << 40, Kind: KindError, Error: "boom", Code: CodeInternal, Body: []byte{}},
		{Seq: 70000, Kind: KindRequest, Method: strings.Repeat("m", 40), Error: strings.Repeat("e", 300), Body: bytes.Repeat([]byte{0xc0}, 70000)},
	}
}

func framesEqual(a, b *Frame) bool {
	return a.Seq == b.Seq && a.Kind == b.Kind && a.Method == b.Method &&
		a.Error == b.Error && a.Code == b.Code && bytes.Equal(a.Body, b.Body)
}

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	var stream bytes.Buffer
	for _, f := range sampleFrames() {
		stream.Write(encodeFrame(t, f))
	}
	r := bufio.NewReader(&stream)
	for i, want := range sampleFrames() {
		got, err := ReadFrame(r)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !framesEqual(got, want) {
			t.Fatalf("frame %d: got %+v, want %+v", i, got, want)
		}
	}
	if _, err := ReadFrame(r); err != io.EOF {
		t.Fatalf("at end: got %v, want io.EOF", err)
	}
}

func TestFrameNonCanonicalHeader(t *testing.T) {
	t.Parallel()
	// array16 header, int64 seq, uint8 kind, str8 method, nil error, str16 code.
	payload := []byte{0xdc, 0, 5, 0xd3, 0, 0, 0, 0, 0, 0, 0, 7, 0xcc, 2, 0xd9, 1, 'M', 0xc0, 0xda, 0, 1, 'c', 0xc0}
	data := append([]byte{0, 0, 0, byte(len(payload))}, payload...)
	f, err := ReadFrame(bufio.NewReader(bytes.NewReader(data)))
	if err != nil {
		t.Fatal(err)
	}
	want := &Frame{Seq: 7, Kind: KindError, Method: "M", Code: "c", Body: []byte{0xc0}}
	if !framesEqual(f, want) {
		t.Fatalf("got %+v, want %+v", f, want)
	}
}

func TestFrameErrors(t *testing.T) {
	t.Parallel()
	valid := encodeFrame(t, sampleFrames()[0])
	cases := map[string]struct {
		data []byte
		want error
	}{
		"partial prefix":  {valid[:2], io.ErrUnexpectedEOF},
		"partial payload": {valid[:len(valid)-1], io.ErrUnexpectedEOF},
		"zero length":     {[]byte{0, 0, 0, 0}, ErrMalformedFrame},
		"not an array":    {[]byte{0, 0, 0, 1, 0x01}, ErrMalformedFrame},
		"4 elements":      {[]byte{0, 0, 0, 5, 0x94, 1, 0, 0xa0, 0xa0}, ErrMalformedFrame},
		"negative seq":    {[]byte{0, 0, 0, 6, 0x95, 0xff, 0, 0xa0, 0xa0, 0xa0}, ErrMalformedFrame},
		"bad kind":        {[]byte{0, 0, 0, 6, 0x95, 1, 3, 0xa0, 0xa0, 0xa0}, ErrMalformedFrame},
		"string overrun":  {[]byte{0, 0, 0, 6, 0x95, 1, 0, 0xa5, 0xa0, 0xa0}, ErrMalformedFrame},
		"huge str32":      {[]byte{0, 0, 0, 10, 0x95, 1, 0, 0xdb, 0xff, 0xff, 0xff, 0xff, 0xa0, 0xa0}, ErrMalformedFrame},
		"4 GiB prefix":    {[]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}, ErrFrameTooLarge},
		"just over max":   {[]byte{0x04, 0, 0, 1}, ErrFrameTooLarge},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ReadFrame(bufio.NewReader(bytes.NewReader(tc.data)))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// allocatedBytes returns the bytes fn allocates on the heap.
func allocatedBytes(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestHugeLengthPrefixDoesNotAllocate(t *testing.T) {
	data := []byte{0xff, 0xff, 0xff, 0xff, 0x95, 1, 0, 0xa0}
	var err error
	n := allocatedBytes(func() {
		_, err = ReadFrame(bufio.NewReaderSize(bytes.NewReader(data), 16))
	})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	if n > 64<<10 {
		t.Fatalf("4 GiB prefix allocated %d bytes", n)
	}
}

func TestTruncatedLargeFrameAllocatesLittle(t *testing.T) {
	// A legal 60 MiB prefix followed by 10 bytes must not allocate 60 MiB.
	data := append([]byte{0x03, 0xc0, 0, 0}, 0x95, 1, 0, 0xa0, 0xa0, 0xa0, 0, 0, 0, 0)
	var err error
	n := allocatedBytes(func() {
		_, err = ReadFrame(bufio.NewReaderSize(bytes.NewReader(data), 16))
	})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
	if n > 2*readChunk {
		t.Fatalf("truncated 60 MiB frame allocated %d bytes", n)
	}
}

func TestWriteFrameTooLarge(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	err := WriteFrame(w, &Frame{Seq: 1, Body: make([]byte, MaxFrameSize)})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	if w.Buffered() != 0 || buf.Len() != 0 {
		t.Fatalf("refused frame left %d buffered, %d written", w.Buffered(), buf.Len())
	}
}

func FuzzReadFrame(f *testing.F) {
	for _, fr := range sampleFrames() {
		b := encodeFrame(f, fr)
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(b[:3])
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 6, 0x95, 0xcf, 0, 0xa0, 0xa0, 0xa0})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := ReadFrame(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			if fr != nil {
				t.Fatal("frame returned with error")
			}
			return
		}
		enc := encodeFrame(t, fr)
		again, err := ReadFrame(bufio.NewReader(bytes.NewReader(enc)))
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if !framesEqual(fr, again) {
			t.Fatalf("round trip changed frame: %+v -> %+v", fr, again)
		}
	})
}
