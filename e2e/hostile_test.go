package e2e

import (
	"bufio"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// hostileTarget is a node's ports under attack.
type hostileTarget struct {
	rpc, gossip, http string // host:port; http empty when the node has none
}

// hostileStats counts what hostileTraffic sent.
type hostileStats struct {
	sends, bytes atomic.Int64
	idle         atomic.Int64 // idle connections held open
}

// Protocol bytes a node's port multiplexes: RPC and Raft.
const (
	preambleRPC  = wire.PreambleRPC
	preambleRaft = 0x02
)

// hostileMethods mixes methods a node serves with one it does not.
var hostileMethods = []string{
	"Cluster.Hello", "Cluster.Status", "Node.Register", "Node.Heartbeat", "KV.Set", "Job.Register",
	"Sched.Lease", "Actor.Create", "Actor.Start", "PG.Create", "Obj.Create", "Binary.Fetch",
	"Task.Push", "Object.Get", "No.Such",
}

// hugeHeader returns a msgpack header that declares a huge length (an
// array, map, bin or str of up to 4 Gi elements or bytes) and nothing
// after it, the shape that once made a node allocate whatever a frame
// declared.
func hugeHeader(r *rand.Rand) []byte {
	codes := []byte{0xdc, 0xdd, 0xde, 0xdf, 0xc5, 0xc6, 0xda, 0xdb}
	c := codes[r.IntN(len(codes))]
	if c == 0xdc || c == 0xde || c == 0xc5 || c == 0xda {
		return []byte{c, 0xff, 0xff}
	}
	return []byte{c, 0xff, 0xff, 0xff, 0xff}
}

// hostileBody is a message body of a few bytes: a huge header at the top or
// inside a one-field map, or random bytes.
func hostileBody(r *rand.Rand) []byte {
	switch r.IntN(3) {
	case 0:
		return hugeHeader(r)
	case 1:
		field := []string{"Args", "Env", "Bundles", "Resources", "Labels", "Value", "Key", "Data", "Node"}[r.IntN(9)]
		b := append([]byte{0x81, 0xa0 | byte(len(field))}, field...)
		return append(b, hugeHeader(r)...)
	default:
		return randomBytes(r, 1+r.IntN(64))
	}
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// hostileTraffic attacks target until ctx ends, from workers goroutines:
// RPC frames with hostile bodies, Raft and unknown preambles followed by
// garbage, garbage and huge headers on the gossip port over TCP and UDP,
// garbage and oversized headers on the HTTP port, and idle connections
// (up to idle) held open on the RPC port. Errors are expected and ignored:
// only the node's memory and service matter.
func hostileTraffic(ctx context.Context, target hostileTarget, workers, idle int, seed uint64) *hostileStats {
	st := &hostileStats{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for ctx.Err() == nil {
				n := hostileSend(r, target)
				st.sends.Add(1)
				st.bytes.Add(int64(n))
			}
		}()
	}
	go holdIdle(ctx, target.rpc, idle, st)
	return st
}

// hostileSend makes one hostile send and returns the bytes written.
func hostileSend(r *rand.Rand, target hostileTarget) int {
	switch k := r.IntN(10); {
	case k < 4:
		return sendTCP(target.rpc, rpcFrames(r))
	case k < 5:
		return sendTCP(target.rpc, append([]byte{[]byte{preambleRaft, byte(r.Uint32())}[r.IntN(2)]}, randomBytes(r, 1+r.IntN(512))...))
	case k < 6:
		return sendTCP(target.gossip, append([]byte{byte(r.IntN(16))}, hostileBody(r)...))
	case k < 8:
		return sendUDP(target.gossip, append([]byte{byte(r.IntN(16))}, hostileBody(r)...))
	default:
		if target.http == "" {
			return 0
		}
		return sendHTTP(r, target.http)
	}
}

// rpcFrames is the RPC preamble, the hello of this protocol version (most
// of the time: else none, or another version) and a few request frames with
// hostile bodies.
func rpcFrames(r *rand.Rand) []byte {
	var b strings.Builder
	w := bufio.NewWriter(&b)
	_ = w.WriteByte(preambleRPC)
	switch r.IntN(8) {
	case 0:
	case 1:
		_, _ = w.Write(rpc.AppendHello(nil, uint16(r.Uint32())))
	default:
		_, _ = w.Write(rpc.AppendHello(nil, wire.ProtocolVersion))
	}
	for i := 0; i < 1+r.IntN(4); i++ {
		f := &rpc.Frame{Seq: uint64(i + 1), Kind: rpc.KindRequest, Method: hostileMethods[r.IntN(len(hostileMethods))], Body: hostileBody(r)}
		_ = rpc.WriteFrame(w, f)
	}
	_ = w.Flush()
	return []byte(b.String())
}

// sendTCP writes b on a new connection and reads what comes back for a
// moment, so the node handles the bytes before the close.
func sendTCP(addr string, b []byte) int {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	n, _ := c.Write(b)
	var buf [512]byte
	_, _ = c.Read(buf[:])
	return n
}

func sendUDP(addr string, b []byte) int {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return 0
	}
	defer c.Close()
	n, _ := c.Write(b)
	return n
}

// sendHTTP sends garbage, or a request with a 1 MiB header, or one with a
// large body, to an HTTP port.
func sendHTTP(r *rand.Rand, addr string) int {
	switch r.IntN(3) {
	case 0:
		return sendTCP(addr, randomBytes(r, 1+r.IntN(1024)))
	case 1:
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/health", nil)
		req.Header.Set("X-Junk", strings.Repeat("j", 1<<20))
		return doHTTP(req, 1<<20)
	default:
		body := strings.Repeat("{", 4<<20)
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/kv/x", strings.NewReader(body))
		return doHTTP(req, len(body))
	}
}

func doHTTP(req *http.Request, n int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err == nil {
		resp.Body.Close()
	}
	return n
}

// holdIdle opens up to n connections to addr that send the RPC preamble
// and the protocol hello and nothing more, and keeps them open until ctx
// ends, redialling those the node closes.
func holdIdle(ctx context.Context, addr string, n int, st *hostileStats) {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for ctx.Err() == nil {
		live := conns[:0]
		for _, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
			var b [1]byte
			if _, err := c.Read(b[:]); err != nil && !isTimeout(err) {
				c.Close()
				continue
			}
			live = append(live, c)
		}
		conns = live
		for len(conns) < n && ctx.Err() == nil {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				break
			}
			_, _ = c.Write(rpc.AppendHello([]byte{preambleRPC}, wire.ProtocolVersion))
			conns = append(conns, c)
		}
		st.idle.Store(int64(len(conns)))
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
