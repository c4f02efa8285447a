package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// How FuzzTLSListener sends its bytes to the secure node's TCP port.
const (
	// tlsFuzzRaw: the bytes as they are, in place of a TLS ClientHello.
	tlsFuzzRaw byte = iota
	// tlsFuzzInner: the bytes inside a TLS connection (no client
	// certificate), where the inner protocol byte is expected.
	tlsFuzzInner
	// tlsFuzzFrames: the bytes inside a TLS connection after the RPC
	// protocol byte and a hello with a valid read token: frames from an
	// authenticated principal.
	tlsFuzzFrames
	tlsFuzzModes
)

// tlsFuzzTarget is a secure node and what FuzzTLSListener needs of it.
type tlsFuzzTarget struct {
	nd       *Node
	addr     string
	cfg      *tls.Config // a token client's: verifies the node against the CA pin
	read     string      // a read token of the node's cluster
	baseline uint64      // live heap and stacks after the warm-up, in bytes
}

// maxTLSFuzzGrowth is how much more live heap and stack, in bytes, the
// process may hold after any hostile connection than after the warm-up.
const maxTLSFuzzGrowth = 64 << 20

// startTLSFuzzTarget starts a one-node secure cluster and makes a read
// token on it.
func startTLSFuzzTarget(t testing.TB) *tlsFuzzTarget {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	nd := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp wire.TokenCreateResponse
	if err := nd.forward(ctx, wire.MethodTokenCreate, &wire.TokenCreateRequest{Role: "read", TTLNanos: int64(time.Hour)}, &resp); err != nil {
		t.Fatalf("create a read token: %v", err)
	}
	tt := &tlsFuzzTarget{nd: nd, addr: nd.RPCAddr(), cfg: pki.PinnedConfig(nd.sec.ca.Hash()), read: resp.Token}
	if err := tt.answers(); err != nil {
		t.Fatal(err)
	}
	h, s := heapAfterGC()
	tt.baseline = h + s
	return tt
}

// answers checks that the node serves a good token client over TLS.
func (tt *tlsFuzzTarget) answers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, "tcp", tt.addr, []byte{wire.PreambleRPC}, wire.ProtocolVersion, rpc.WithToken(tt.read),
		rpc.WithDialer(func(ctx context.Context, addr string) (net.Conn, error) { return pki.DialTLS(ctx, nil, addr, tt.cfg) }))
	if err != nil {
		return fmt.Errorf("a good token client cannot connect: %w", err)
	}
	defer c.Close()
	if err := c.Call(ctx, wire.MethodStatus, &wire.Empty{}, &wire.StatusResponse{}); err != nil {
		return fmt.Errorf("a good token client's Cluster.Status: %w", err)
	}
	return nil
}

// send opens a connection as mode says, writes data, half-closes, and
// waits until the node closes its side: the node must neither hang on
// the bytes nor keep the connection. A refused TLS handshake is fine.
// It returns how many bytes the node sent back (inside TLS, if TLS).
func (tt *tlsFuzzTarget) send(mode byte, data []byte) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var conn net.Conn
	var closeWrite func() error
	switch mode % tlsFuzzModes {
	case tlsFuzzRaw:
		c, err := net.Dial("tcp", tt.addr)
		if err != nil {
			return 0, err
		}
		conn, closeWrite = c, c.(*net.TCPConn).CloseWrite
	default:
		c, err := pki.DialTLS(ctx, nil, tt.addr, tt.cfg)
		if err != nil {
			return 0, fmt.Errorf("TLS handshake of a token client: %w", err)
		}
		conn, closeWrite = c, c.(*tls.Conn).CloseWrite
		if mode%tlsFuzzModes == tlsFuzzFrames {
			data = append(rpc.AppendHelloToken([]byte{wire.PreambleRPC}, wire.ProtocolVersion, tt.read), data...)
		}
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	_, _ = conn.Write(data) // fails once the node has closed
	_ = closeWrite()
	n, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return n, fmt.Errorf("mode %d, %d bytes: the node neither closed the connection nor stopped answering within 20 s", mode%tlsFuzzModes, len(data))
	}
	return n, nil
}

// goodFrame sends a Cluster.Status frame after a read token's hello,
// the way tlsFuzzFrames inputs are sent, and wants its reply.
func (tt *tlsFuzzTarget) goodFrame() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pki.DialTLS(ctx, nil, tt.addr, tt.cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	w := bufio.NewWriter(c)
	_, _ = w.Write(rpc.AppendHelloToken([]byte{wire.PreambleRPC}, wire.ProtocolVersion, tt.read))
	if err := rpc.WriteFrame(w, &rpc.Frame{Seq: 1, Kind: rpc.KindRequest, Method: wire.MethodStatus, Body: []byte{0x80}}); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	if _, err := br.Discard(rpc.HelloSize); err != nil {
		return fmt.Errorf("the node's hello: %w", err)
	}
	fr, err := rpc.ReadFrame(br)
	if err != nil {
		return fmt.Errorf("the reply to Cluster.Status after a read token's hello: %w", err)
	}
	if fr.Kind != rpc.KindResponse {
		return fmt.Errorf("the reply to Cluster.Status after a read token's hello is of kind %d, want a response: %q", fr.Kind, fr.Body)
	}
	return nil
}

// heapBounded fails when the process's live heap and stacks grew past the bound.
func (tt *tlsFuzzTarget) heapBounded() error {
	h, s := heapAfterGC()
	if h+s > tt.baseline+maxTLSFuzzGrowth {
		return fmt.Errorf("live heap and stacks grew from %d to %d bytes, over %d more", tt.baseline, h+s, maxTLSFuzzGrowth)
	}
	return nil
}

// clientHello returns the first TLS record a token client sends: its
// ClientHello.
func clientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		_ = tls.Client(client, cfg).Handshake() // fails once server closes
		client.Close()
	}()
	_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hdr [5]byte
	if _, err := io.ReadFull(server, hdr[:]); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 5+int(binary.BigEndian.Uint16(hdr[3:])))
	copy(rec, hdr[:])
	if _, err := io.ReadFull(server, rec[5:]); err != nil {
		t.Fatal(err)
	}
	return rec
}

// tlsFuzzSeed is one input of FuzzTLSListener.
type tlsFuzzSeed struct {
	mode byte
	data []byte
}

// tlsFuzzSeeds are hostile inputs for each stage of a TLS connection:
// garbage and truncated or padded ClientHellos before TLS; bad protocol
// bytes, bad hellos and huge or garbage token hellos inside it; frames
// declaring huge lengths and hostile bodies after a good token hello.
func tlsFuzzSeeds(t testing.TB, cfg *tls.Config) []tlsFuzzSeed {
	hello := clientHello(t, cfg)
	huge := []byte{0xff, 0xff, 0xff, 0xff}
	rpcHello := rpc.AppendHello([]byte{wire.PreambleRPC}, wire.ProtocolVersion)
	frame := func(method string, body []byte) []byte {
		var b bytes.Buffer
		w := bufio.NewWriter(&b)
		_ = rpc.WriteFrame(w, &rpc.Frame{Seq: 1, Kind: rpc.KindRequest, Method: method, Body: body})
		_ = w.Flush()
		return b.Bytes()
	}
	seeds := []tlsFuzzSeed{
		{tlsFuzzRaw, []byte("GET / HTTP/1.1\r\n\r\n")},
		{tlsFuzzRaw, []byte{connTLS}},
		{tlsFuzzRaw, append([]byte{connTLS, 3, 1}, huge...)},       // a record declaring 64 KiB
		{tlsFuzzRaw, append(append([]byte{}, hello...), hello...)}, // two ClientHellos
		{tlsFuzzRaw, append(append([]byte{}, hello...), bytes.Repeat([]byte{0x17}, 300)...)},
		{tlsFuzzInner, nil},
		{tlsFuzzInner, []byte{connRaft, 0, 1, 2, 3}}, // Raft without a node certificate
		{tlsFuzzInner, []byte{0xee, 1, 2, 3}},
		{tlsFuzzInner, append(append([]byte{}, rpcHello...), huge...)},                                              // a frame of 4 GiB
		{tlsFuzzInner, append([]byte{wire.PreambleRPC, 'N', 'T', 0, 1}, 0xff, 0xff)},                                // a 64 KiB token
		{tlsFuzzInner, append([]byte{wire.PreambleRPC, 'N', 'T', 0, 1, 0, 114}, bytes.Repeat([]byte{'x'}, 114)...)}, // a garbage token
		{tlsFuzzInner, append(append([]byte{}, rpcHello...), frame(wire.MethodStatus, nil)...)},                     // anonymous
		{tlsFuzzFrames, huge},
		{tlsFuzzFrames, frame(wire.MethodStatus, []byte{0x80})},
		{tlsFuzzFrames, append(frame(wire.MethodStatus, []byte{0x80}), huge...)},
	}
	for _, n := range []int{1, 5, 6, 40, len(hello) / 2, len(hello) - 1} {
		seeds = append(seeds, tlsFuzzSeed{tlsFuzzRaw, hello[:n]})
	}
	for _, m := range hostileMethods {
		for _, b := range hostileNodeBodies()[:3] {
			seeds = append(seeds, tlsFuzzSeed{tlsFuzzFrames, frame(m, b)})
		}
	}
	return seeds
}

// FuzzTLSListener sends arbitrary bytes to a secure node's TCP port, in
// place of a ClientHello or inside a TLS connection (before or after a
// hello with a valid read token), and checks after each input that the
// node closed the connection, still answers a good token client, and that
// the process's live heap stays within maxTLSFuzzGrowth of where it was
// after the warm-up. One node per fuzzing process.
func FuzzTLSListener(f *testing.F) {
	tt := startTLSFuzzTarget(f)
	for _, s := range tlsFuzzSeeds(f, tt.cfg) {
		f.Add(s.mode, s.data)
	}
	f.Fuzz(func(t *testing.T, mode byte, data []byte) {
		if _, err := tt.send(mode, data); err != nil {
			t.Fatal(err)
		}
		if err := tt.answers(); err != nil {
			t.Fatal(err)
		}
		if err := tt.heapBounded(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestTLSListenerSurvivesHostileBytes runs FuzzTLSListener's seeds and
// 300 random inputs (a fixed seed) against one secure node, with the same
// checks: every connection closed, the node answering, the heap bounded.
func TestTLSListenerSurvivesHostileBytes(t *testing.T) {
	tt := startTLSFuzzTarget(t)
	seeds := tlsFuzzSeeds(t, tt.cfg)
	r := rand.New(rand.NewPCG(15, 1))
	hello := clientHello(t, tt.cfg)
	for i := range 300 {
		data := make([]byte, r.IntN(512))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		mode := byte(i) % tlsFuzzModes
		if mode == tlsFuzzRaw && i%2 == 0 {
			// A ClientHello cut short or with bytes flipped.
			data = append([]byte{}, hello[:1+r.IntN(len(hello))]...)
			data[r.IntN(len(data))] ^= byte(1 + r.IntN(255))
		}
		seeds = append(seeds, tlsFuzzSeed{mode, data})
	}
	// A good frame after the token hello is answered: the hostile
	// frames reach the authenticated RPC server, not only the handshake.
	if err := tt.goodFrame(); err != nil {
		t.Fatal(err)
	}
	slowest, slowestAt := time.Duration(0), 0
	for i, s := range seeds {
		start := time.Now()
		if _, err := tt.send(s.mode, s.data); err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		if d := time.Since(start); d > slowest {
			slowest, slowestAt = d, i
		}
		if i%25 == 0 {
			if err := tt.answers(); err != nil {
				t.Fatalf("after input %d: %v", i, err)
			}
		}
	}
	if err := tt.answers(); err != nil {
		t.Fatalf("after %d hostile connections: %v", len(seeds), err)
	}
	// The node lets go of a connection's buffers as it closes it;
	// wait for the last ones.
	testutil.Until(t, 10*time.Second, "the live heap back within bounds", tt.heapBounded)
	h, s := heapAfterGC()
	t.Logf("%d hostile connections: live heap and stacks %d -> %d bytes; the slowest, input %d (mode %d), took %v",
		len(seeds), tt.baseline, h+s, slowestAt, seeds[slowestAt].mode, slowest)
}
