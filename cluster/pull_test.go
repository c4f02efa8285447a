package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster/objects"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

func pullCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func patterned(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + i>>12)
	}
	return b
}

func TestPullCopiesChunksIntoTheArena(t *testing.T) {
	nodes := testCluster(t, 2, nil)
	ctx := pullCtx(t)
	const size = 3*objects.PullChunk + 12345 // several chunks, the last one short
	want := patterned(size)
	if err := nodes[1].objects.Store().Put("j1/big", want); err != nil {
		t.Fatal(err)
	}
	req := &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: "j1/big", NodeAddr: nodes[1].rpcAddr, Size: size}}
	// Concurrent Locates of one key (one pull, shared) get the same copy.
	var wg sync.WaitGroup
	locs := make([]*wire.ObjectLocation, 3)
	errs := make([]error, 3)
	for i := range locs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			locs[i], errs[i] = nodes[0].objects.Locate(ctx, req)
		}()
	}
	wg.Wait()
	for i := range locs {
		if errs[i] != nil || *locs[i] != *locs[0] {
			t.Fatalf("Locate %d: %+v, %v (first %+v)", i, locs[i], errs[i], locs[0])
		}
	}
	_, got, ok := nodes[0].objects.Store().Get("j1/big")
	if !ok || !bytes.Equal(got, want) {
		t.Fatalf("pulled copy: present=%v, equal=%v", ok, bytes.Equal(got, want))
	}
	// The source's views were all released: deleting it frees its space.
	if err := nodes[1].objects.Store().Delete("j1/big"); err != nil || nodes[1].objects.Store().Used() != 0 {
		t.Fatalf("source after the pull: Used %d, %v", nodes[1].objects.Store().Used(), err)
	}
	// Pulling an object the source no longer has fails with object_lost
	// and its key, and frees the space taken for the copy.
	used := nodes[0].objects.Store().Used()
	req.Loc.Key = "j1/gone"
	_, err := nodes[0].objects.Locate(ctx, req)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeObjectLost || !strings.Contains(err.Error(), "j1/gone") || !strings.Contains(err.Error(), "chunk at byte ") {
		t.Fatalf("pull of a missing object: %v", err)
	}
	if nodes[0].objects.Store().Contains("j1/gone") || nodes[0].objects.Store().Used() != used {
		t.Fatalf("failed pull left its copy: Used %d, was %d", nodes[0].objects.Store().Used(), used)
	}
}

func TestObjectReadAnswers(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	ctx := pullCtx(t)
	want := patterned(objects.MaxReadChunk + 100)
	if err := nodes[0].objects.Store().Put("j1/o", want); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].objects.Store().Create("j1/unsealed", 10); err != nil {
		t.Fatal(err)
	}
	addr := nodes[0].rpcAddr
	buf := make([]byte, len(want))
	// The answer is a bare bin, capped at objects.MaxReadChunk, short at the end.
	n, err := nodes[0].pool.CallInto(ctx, addr, wire.MethodObjectRead, &wire.ObjectReadRequest{Key: "j1/o", Offset: 50, Length: int64(len(want))}, buf)
	if err != nil || n != objects.MaxReadChunk || !bytes.Equal(buf[:n], want[50:50+objects.MaxReadChunk]) {
		t.Fatalf("capped read: %d bytes, %v", n, err)
	}
	var b []byte
	if err := nodes[0].pool.Call(ctx, addr, wire.MethodObjectRead, &wire.ObjectReadRequest{Key: "j1/o", Offset: int64(len(want)) - 7, Length: 100}, &b); err != nil || !bytes.Equal(b, want[len(want)-7:]) {
		t.Fatalf("read at the end: %d bytes, %v", len(b), err)
	}
	for _, c := range []struct {
		req  wire.ObjectReadRequest
		code string
	}{
		{wire.ObjectReadRequest{Key: "j1/absent", Length: 10}, wire.CodeNotFound},
		{wire.ObjectReadRequest{Key: "j1/unsealed", Length: 10}, wire.CodeNotFound},
		{wire.ObjectReadRequest{Key: "j1/o", Offset: -1, Length: 10}, wire.CodeBadInput},
		{wire.ObjectReadRequest{Key: "j1/o", Offset: int64(len(want)) + 1, Length: 10}, wire.CodeBadInput},
	} {
		_, err := nodes[0].pool.CallInto(ctx, addr, wire.MethodObjectRead, &c.req, buf)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != c.code || !strings.Contains(re.Message, c.req.Key) {
			t.Errorf("%+v: %v, want code %s naming the key", c.req, err, c.code)
		}
	}
}

// fakePeer serves Obj.Read with answer on a node-style port (RPC preamble
// first) and returns its address.
func fakePeer(t *testing.T, answer rpc.Handler) string {
	t.Helper()
	return fakePeerOfVersion(t, wire.ProtocolVersion, answer)
}

// fakePeerOfVersion is fakePeer speaking protocol version.
func fakePeerOfVersion(t *testing.T, version uint16, answer rpc.Handler) string {
	t.Helper()
	s := rpc.NewServer(testutil.Logger(), version)
	s.Register(wire.MethodObjectRead, answer)
	l := listenConns(t, func(conn net.Conn) {
		var pre [1]byte
		if _, err := io.ReadFull(conn, pre[:]); err != nil || pre[0] != connRPC {
			conn.Close()
			return
		}
		s.ServeConn(conn)
	})
	t.Cleanup(func() { s.Close() })
	return l.Addr().String()
}

// listenConns listens on 127.0.0.1 and runs serve on each connection in a
// goroutine of its own until the test ends.
func listenConns(t *testing.T, serve func(net.Conn)) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go serve(conn)
		}
	}()
	return l
}

func TestPullFromAMisbehavingPeerFailsCleanly(t *testing.T) {
	// The fake peers below speak plaintext: what is tested is the pull's
	// checks of the answers, not TLS.
	nodes := testCluster(t, 1, insecure)
	ctx := pullCtx(t)
	const size = 2*objects.PullChunk + 5
	cases := []struct {
		name   string
		answer rpc.Handler
		want   string
	}{
		{"a map, not a bin", func(ctx context.Context, body []byte) (any, error) {
			return map[string][]byte{"Data": []byte("xx")}, nil
		}, "want a bin"},
		{"short chunks", func(ctx context.Context, body []byte) (any, error) {
			return &rpc.Bulk{Data: []byte("short")}, nil
		}, "short chunk: 5 of"},
		{"too long for the chunk", func(ctx context.Context, body []byte) (any, error) {
			return &rpc.Bulk{Data: make([]byte, objects.PullChunk+1)}, nil
		}, "exceeds the"},
		{"an error", func(ctx context.Context, body []byte) (any, error) {
			return nil, &rpc.Error{Code: wire.CodeNotFound, Message: "no such object"}
		}, "no such object"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "j1/m" + string(rune('a'+i))
			req := &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: key, NodeAddr: fakePeer(t, tc.answer), Size: size}}
			_, err := nodes[0].objects.Locate(ctx, req)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), key) {
				t.Fatalf("got %v, want an error naming %s containing %q", err, key, tc.want)
			}
			if nodes[0].objects.Store().Contains(key) || nodes[0].objects.Store().Used() != 0 {
				t.Fatalf("failed pull left space taken: Used %d", nodes[0].objects.Store().Used())
			}
		})
	}
}

func TestPullFromAPeerThatHangsUpMidChunk(t *testing.T) {
	// The fake peers below speak plaintext: what is tested is the pull's
	// checks of the answers, not TLS.
	nodes := testCluster(t, 1, insecure)
	ctx := pullCtx(t)
	l := listenConns(t, func(conn net.Conn) {
		defer conn.Close()
		br := bufio.NewReader(conn)
		if _, err := br.Discard(1 + rpc.HelloSize); err != nil { // preamble, hello
			return
		}
		if _, err := conn.Write(rpc.AppendHello(nil, wire.ProtocolVersion)); err != nil {
			return
		}
		f, err := rpc.ReadFrame(br)
		if err != nil {
			return
		}
		// A response frame announcing a 4 MiB bin, then half of it.
		resp := []byte{0, 0x40, 0, 11, 0x95, byte(f.Seq), 1, 0xa0, 0xa0, 0xa0, 0xc6, 0, 0x40, 0, 0}
		_, _ = conn.Write(append(resp, make([]byte, 2<<20)...))
	})
	req := &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: "j1/cut", NodeAddr: l.Addr().String(), Size: objects.PullChunk}}
	_, err := nodes[0].objects.Locate(ctx, req)
	if err == nil || !rpc.IsTransport(err) || !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "j1/cut") {
		t.Fatalf("got %v, want a transport error (unexpected EOF) naming the object", err)
	}
	if nodes[0].objects.Store().Used() != 0 {
		t.Fatalf("failed pull left %d bytes taken", nodes[0].objects.Store().Used())
	}
}

// A node refuses to pull from a node of another protocol version (issue
// 14: such pulls used to fail on misread chunks), naming both versions.
func TestPullFromAPeerOfAnotherVersionNamesBoth(t *testing.T) {
	// The fake peers below speak plaintext: what is tested is the pull's
	// checks of the answers, not TLS.
	nodes := testCluster(t, 1, insecure)
	var ran atomic.Bool
	addr := fakePeerOfVersion(t, wire.ProtocolVersion+1, func(ctx context.Context, body []byte) (any, error) {
		ran.Store(true)
		return &rpc.Bulk{Data: make([]byte, 10)}, nil
	})
	req := &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: "j1/v", NodeAddr: addr, Size: 10}}
	_, err := nodes[0].objects.Locate(pullCtx(t), req)
	var ve *rpc.VersionError
	if !errors.As(err, &ve) || ve.Local != wire.ProtocolVersion || ve.Remote != wire.ProtocolVersion+1 || !strings.Contains(err.Error(), "j1/v") {
		t.Fatalf("pull from a node of protocol version %d: %v; want a *rpc.VersionError naming both versions and the object", wire.ProtocolVersion+1, err)
	}
	if ran.Load() || nodes[0].objects.Store().Used() != 0 {
		t.Fatalf("the pull ran (%v) or left %d bytes taken", ran.Load(), nodes[0].objects.Store().Used())
	}
}
