package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// wideItem and wideReq have every shape the msgpack decoder allocates for
// from a declared length: strings, bins, maps, slices of strings, of
// structs and of integers, and an interface.
type wideItem struct {
	A, B, C string
	N       [4]int64
}

type wideReq struct {
	Text   string
	Blob   []byte
	Names  []string
	Labels map[string]string
	Items  []wideItem
	Nums   []int64
	Any    any
}

// hostileServer serves Hostile.Wide (a typed handler over wideReq) and
// Hostile.Raw on loopback TCP and returns the address.
func hostileServer(t testing.TB) string {
	t.Helper()
	s := newTestServer(nil)
	Handle(s, "Hostile.Wide", func(ctx context.Context, req *wideReq) (*echoResp, error) {
		return &echoResp{N: len(req.Items)}, nil
	})
	return serveTCP(t, s)
}

// rawRequest encodes a request frame for method with body as it is,
// however malformed.
func rawRequest(seq uint64, method string, body []byte) []byte {
	b := appendHeader([]byte{0, 0, 0, 0}, &Frame{Seq: seq, Kind: KindRequest, Method: method})
	b = append(b, body...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// field returns a one-entry msgpack map {name: raw}, raw being the field
// value's bytes as they are.
func field(name string, raw ...byte) []byte {
	return append(appendStr([]byte{0x81}, name), raw...)
}

// huge32 is a 32-bit length of 4 GiB - 1.
var huge32 = []byte{0xff, 0xff, 0xff, 0xff}

// hostileBodies are request bodies of a few bytes that declare huge
// lengths, for Hostile.Wide.
func hostileBodies() []struct {
	name string
	body []byte
} {
	deep := bytes.Repeat([]byte{0x91}, 100_000) // 100,000 nested one-element arrays
	return []struct {
		name string
		body []byte
	}{
		{"str32", field("Text", append([]byte{0xdb}, huge32...)...)},
		{"bin32", field("Blob", append([]byte{0xc6}, huge32...)...)},
		{"map32", field("Labels", append([]byte{0xdf}, huge32...)...)},
		{"array32_strings", field("Names", append([]byte{0xdd}, huge32...)...)},
		{"array32_ints", field("Nums", append([]byte{0xdd}, 0x00, 0xff, 0xff, 0xff)...)},
		{"nested_array32", field("Any", append([]byte{0x92, 0xdd, 0x00, 0x0f, 0xff, 0xff, 0xdd}, huge32...)...)},
		{"deep_nesting", field("Any", append(deep, 0xc0)...)},
		{"array32_structs", field("Items", append([]byte{0xdd}, huge32...)...)},
		{"array32_any", field("Any", append([]byte{0xdd}, huge32...)...)},
	}
}

// memStats returns the runtime's memory statistics after a collection.
// One collection (not two) keeps what sync.Pools hold, as they do on a
// busy server.
func memStats() runtime.MemStats {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m
}

// exchange sends frame on a fresh connection to addr and waits until the
// server answers or closes the connection.
func exchange(t testing.TB, addr string, frame []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(helloed(frame)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = ReadFrame(bufio.NewReader(conn))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("server neither answered nor closed the connection")
	}
}

const (
	// hostileFrames is how many times each hostile body is sent.
	hostileFrames = 50
	// maxAllocPerFrame bounds what one hostile frame may make the process
	// allocate, in bytes, connection setup on both ends included.
	maxAllocPerFrame = 1 << 20
	// maxRetained bounds how much more live heap, in bytes, the process may
	// hold after the hostile frames than before.
	maxRetained = 8 << 20
)

// TestHostileBodiesBoundedMemory sends each hostile body hostileFrames
// times and checks that no frame allocates more than maxAllocPerFrame and
// that the live heap does not grow from frame to frame.
func TestHostileBodiesBoundedMemory(t *testing.T) {
	addr := hostileServer(t)
	exchange(t, addr, rawRequest(1, "Test.Echo", []byte{0xc0})) // warm up
	for _, hb := range hostileBodies() {
		t.Run(hb.name, func(t *testing.T) {
			frame := rawRequest(1, "Hostile.Wide", hb.body)
			before := memStats()
			var worst uint64
			for i := range hostileFrames {
				m0 := memStats()
				exchange(t, addr, frame)
				m1 := memStats()
				alloc := m1.TotalAlloc - m0.TotalAlloc
				worst = max(worst, alloc)
				if alloc > maxAllocPerFrame || m1.HeapAlloc > before.HeapAlloc+64<<20 {
					t.Fatalf("frame %d of %d bytes allocated %d bytes; live heap %d -> %d bytes",
						i, len(frame), alloc, before.HeapAlloc, m1.HeapAlloc)
				}
			}
			after := memStats()
			t.Logf("%d frames of %d bytes: worst frame allocated %d bytes; live heap %d -> %d bytes, heap in use %d -> %d, sys %d -> %d",
				hostileFrames, len(frame), worst, before.HeapAlloc, after.HeapAlloc, before.HeapInuse, after.HeapInuse, before.Sys, after.Sys)
			if after.HeapAlloc > before.HeapAlloc+maxRetained {
				t.Fatalf("live heap grew by %d bytes over %d frames", after.HeapAlloc-before.HeapAlloc, hostileFrames)
			}
		})
	}
	exchange(t, addr, rawRequest(1, "Test.Echo", []byte{0xc0}))
}

const (
	// stalledBytes is how much of a 64 MiB frame huge_frame_stalled sends.
	stalledBytes = 100 << 10
	// maxConnCost bounds the heap and stack, in bytes, one open
	// connection may cost both ends together, apart from what it sent.
	maxConnCost = 32 << 10
)

// TestHostileStreamsBoundedMemory sends garbage and frames with large
// length prefixes that never complete, holding the connections open, and
// checks the memory each costs the server.
func TestHostileStreamsBoundedMemory(t *testing.T) {
	const conns = 100
	cases := []struct {
		name    string
		payload func(r *rand.Rand) []byte
	}{
		{"idle", func(*rand.Rand) []byte { return nil }},
		{"huge_prefix_stalled", func(*rand.Rand) []byte {
			b := rawRequest(1, "Hostile.Wide", []byte{0x80})
			binary.BigEndian.PutUint32(b, MaxFrameSize) // promise 64 MiB, send 20 bytes
			return b
		}},
		{"huge_frame_stalled", func(*rand.Rand) []byte {
			b := rawRequest(1, "Hostile.Wide", append([]byte{0x81, 0xa4, 'B', 'l', 'o', 'b', 0xc6, 0x03, 0xff, 0xff, 0x00}, make([]byte, stalledBytes)...))
			binary.BigEndian.PutUint32(b, MaxFrameSize) // promise 64 MiB, send 100 KiB
			return b
		}},
		{"garbage", func(r *rand.Rand) []byte {
			b := make([]byte, 1+r.IntN(64))
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			return b
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := hostileServer(t)
			r := rand.New(rand.NewPCG(1, 2))
			before := memStats()
			open := make([]net.Conn, 0, conns)
			defer func() {
				for _, c := range open {
					c.Close()
				}
			}()
			sent := 0
			for range conns {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				open = append(open, c)
				p := tc.payload(r)
				sent += len(p)
				if _, err := c.Write(helloed(p)); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(300 * time.Millisecond) // let the server read what was sent
			during := memStats()
			perConn := (int64(during.HeapAlloc+during.StackInuse) - int64(before.HeapAlloc+before.StackInuse)) / conns
			t.Logf("%d connections, %d bytes sent on each: %d bytes of heap and stack each (live heap %d -> %d, stacks %d -> %d, sys %d -> %d)",
				conns, sent/conns, perConn, before.HeapAlloc, during.HeapAlloc, before.StackInuse, during.StackInuse, before.Sys, during.Sys)
			if budget := int64(maxConnCost + 2*sent/conns); perConn > budget {
				t.Fatalf("each connection costs %d bytes, want at most %d", perConn, budget)
			}
		})
	}
}

// fuzzServer is the live server FuzzServerHostileFrames feeds, one per
// fuzzing process.
var fuzzServer = sync.OnceValue(func() *Server {
	s := newTestServer(nil)
	Handle(s, "Hostile.Wide", func(ctx context.Context, req *wideReq) (*echoResp, error) {
		return &echoResp{N: len(req.Items)}, nil
	})
	s.SetLimits(Limits{FrameTimeout: time.Second, IdleTimeout: time.Second})
	feedServer(s, rawRequest(1, "Hostile.Wide", []byte{0x80})) // warm
	return s
})

// feedServer serves one connection on s that sends data and then closes,
// and waits until the server has let go of the connection and every
// request it started has finished.
func feedServer(s *Server, data []byte) {
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() { s.ServeConn(server); close(done) }()
	go func() { _, _ = io.Copy(io.Discard, client) }() // responses
	_, _ = client.Write(helloed(data))                 // fails once the server closes
	client.Close()
	<-done
	for deadline := time.Now().Add(10 * time.Second); s.inflight.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// fuzzSeeds are byte streams for FuzzServerHostileFrames: valid requests,
// the hostile bodies, a stalled huge frame, garbage, and several frames in
// a row.
func fuzzSeeds() [][]byte {
	valid := rawRequest(7, "Test.Echo", []byte{0x82, 0xa1, 'N', 3, 0xa4, 'T', 'e', 'x', 't', 0xa2, 'h', 'i'})
	seeds := [][]byte{valid, append(append([]byte{}, valid...), valid...), []byte("GET / HTTP/1.1\r\n\r\n")}
	for _, hb := range hostileBodies() {
		if len(hb.body) < 1024 {
			seeds = append(seeds, rawRequest(1, "Hostile.Wide", hb.body), append(append([]byte{}, valid...), rawRequest(2, "Test.Raw", hb.body)...))
		}
	}
	stalled := rawRequest(1, "Hostile.Wide", []byte{0x80})
	binary.BigEndian.PutUint32(stalled, MaxFrameSize)
	return append(seeds, stalled, []byte{0xff, 0xff, 0xff, 0xff}, rawRequest(3, "No.Such", make([]byte, 300)))
}

// FuzzServerHostileFrames writes arbitrary bytes to a live server's
// connection and checks what that costs: the process may allocate at most
// 1 MiB plus 256 bytes per byte sent (decoded values are bigger than their
// encoding: an element of one byte may become an 80-byte struct), and once
// the server has let go of the connection it may hold at most
// maxRetainedPerConn more live heap than before (the fuzzing engine's own
// heap changes between inputs, so the comparison is per input).
func FuzzServerHostileFrames(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := fuzzServer()
		before := memStats()
		feedServer(s, data)
		after := memStats()
		if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+256*len(data)); alloc > limit {
			t.Fatalf("%d bytes sent made the process allocate %d bytes, over %d", len(data), alloc, limit)
		}
		if after.HeapAlloc > before.HeapAlloc+maxRetainedPerConn {
			t.Fatalf("live heap grew from %d to %d bytes over one connection", before.HeapAlloc, after.HeapAlloc)
		}
	})
}

// maxRetainedPerConn is how much more live heap, in bytes, the process
// may hold after a closed connection than before it: less than the
// smallest growth of a decoder buffer kept from a hostile frame (1 MiB).
const maxRetainedPerConn = 512 << 10
