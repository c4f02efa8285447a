package cluster

import (
	"bufio"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// hostileMethods are methods a node serves (and one it does not), with
// request types that hold strings, bins, slices and maps.
var hostileMethods = []string{
	wire.MethodHello, wire.MethodStatus, wire.MethodNodeRegister, wire.MethodKVSet, wire.MethodJobRegister,
	wire.MethodLease, wire.MethodActorCreate, wire.MethodActorStart, wire.MethodPGCreate,
	wire.MethodObjectCreate, wire.MethodLogsList, wire.MethodLogsRead, "No.Such",
}

// hostileNodeBodies are bodies of a few bytes that declare 4 GiB or 4 Gi
// elements, at the top level and in fields the request types have.
func hostileNodeBodies() [][]byte {
	huge := []byte{0xff, 0xff, 0xff, 0xff}
	fieldOf := func(name string, code byte) []byte {
		b := append([]byte{0x81, 0xa0 | byte(len(name))}, name...)
		return append(append(b, code), huge...)
	}
	bodies := [][]byte{append([]byte{0xdd}, huge...), append([]byte{0xdf}, huge...)}
	for _, f := range []struct {
		name string
		code byte
	}{
		{"Args", 0xdd}, {"Env", 0xdd}, {"Bundles", 0xdd}, {"EnvVars", 0xdf}, {"Resources", 0xdf},
		{"Labels", 0xdf}, {"Value", 0xc6}, {"Key", 0xdb}, {"JobID", 0xdb}, {"Data", 0xc6},
	} {
		bodies = append(bodies, fieldOf(f.name, f.code))
	}
	return bodies
}

// heapAfterGC returns the live heap and the stacks in use, in bytes.
func heapAfterGC() (heap, stacks uint64) {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.StackInuse
}

// sendRPC dials the node port, sends the RPC preamble and a request frame
// for method with body, and waits until the node answers or closes.
func sendRPC(t *testing.T, addr, method string, body []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w := bufio.NewWriter(conn)
	_, _ = w.Write(rpc.AppendHello([]byte{connRPC}, wire.ProtocolVersion))
	if err := rpc.WriteFrame(w, &rpc.Frame{Seq: 1, Kind: rpc.KindRequest, Method: method, Body: body}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := rpc.ReadFrame(bufio.NewReader(conn)); err != nil && strings.Contains(err.Error(), "timeout") {
		t.Fatalf("%s: node neither answered nor closed the connection", method)
	}
}

// TestNodeSurvivesHostileTraffic sends a running node tiny frames that
// declare huge lengths, garbage on its port, idle connections and an
// oversized HTTP header, and checks that its live heap stays bounded and
// that it still serves.
func TestNodeSurvivesHostileTraffic(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	nd := nodes[0]
	addr := nd.RPCAddr()
	heap0, _ := heapAfterGC()

	frames := 0
	for range 3 {
		for _, m := range hostileMethods {
			for _, b := range hostileNodeBodies() {
				sendRPC(t, addr, m, b)
				frames++
			}
		}
	}
	heap1, stacks1 := heapAfterGC()
	t.Logf("%d hostile frames: live heap %d -> %d bytes", frames, heap0, heap1)

	r := rand.New(rand.NewPCG(13, 1))
	for i := range 200 {
		garbage := make([]byte, 1+r.IntN(256))
		for j := range garbage {
			garbage[j] = byte(r.Uint32())
		}
		garbage[0] = []byte{connRPC, byte(i)}[i%2] // half RPC, half any protocol byte
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write(garbage)
		conn.Close()
	}

	const idle = 200
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		if _, err := c.Write(rpc.AppendHello([]byte{connRPC}, wire.ProtocolVersion)); err != nil {
			t.Fatal(err)
		}
	}
	// The node answers each hello once it has admitted the connection and
	// read ours, so after these reads every idle connection is being
	// served and its buffers count in heap2.
	for _, c := range open {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, rpc.HelloSize)); err != nil {
			t.Fatalf("idle connection: no hello from the node: %v", err)
		}
	}
	heap2, stacks2 := heapAfterGC()
	perConn := (int64(heap2+stacks2) - int64(heap1+stacks1)) / idle
	t.Logf("garbage and %d idle connections: live heap %d -> %d bytes, %d bytes of heap and stack per connection", idle, heap1, heap2, perConn)

	req, _ := http.NewRequest("GET", "http://"+nd.HTTPAddr()+"/v1/health", nil)
	req.Header.Set("X-Junk", strings.Repeat("j", 1<<20))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("1 MiB header: status %d, want 431", resp.StatusCode)
		}
	}

	if heap2 > heap0+64<<20 {
		t.Errorf("live heap grew from %d to %d bytes", heap0, heap2)
	}
	if perConn > 32<<10 {
		t.Errorf("an idle connection costs %d bytes, want at most %d", perConn, 32<<10)
	}
	if _, err := statusVia(nd); err != nil {
		t.Fatalf("node no longer serves: %v", err)
	}
}
