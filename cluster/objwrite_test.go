package cluster

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Obj.Write fills a created object chunk by chunk (as a driver on another
// machine does), Obj.Seal makes it readable and Obj.Read gives the bytes
// back; a write past the object, after Seal, to an absent object or over
// the chunk cap is refused naming the object.
func TestObjectWriteFillsACreatedObject(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	ctx := pullCtx(t)
	addr := nodes[0].rpcAddr
	want := patterned(3<<20 + 17)
	var loc wire.ObjectLocation
	if err := nodes[0].pool.Call(ctx, addr, wire.MethodObjectCreate, &wire.ObjectCreateRequest{Key: "j1/w", Size: int64(len(want))}, &loc); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(want); off += 1 << 20 {
		chunk := want[off:min(off+1<<20, len(want))]
		if err := nodes[0].pool.Call(ctx, addr, wire.MethodObjectWrite, &wire.ObjectWriteRequest{Key: "j1/w", Offset: int64(off), Data: chunk}, nil); err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
	}
	if err := nodes[0].pool.Call(ctx, addr, wire.MethodObjectSeal, &wire.ObjectKey{Key: "j1/w"}, nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(want))
	if n, err := nodes[0].pool.CallInto(ctx, addr, wire.MethodObjectRead, &wire.ObjectReadRequest{Key: "j1/w", Length: int64(len(want))}, buf); err != nil || n != len(want) || !bytes.Equal(buf, want) {
		t.Fatalf("read back %d bytes, %v; equal %v", n, err, bytes.Equal(buf, want))
	}
	for _, c := range []struct {
		req  wire.ObjectWriteRequest
		code string
	}{
		{wire.ObjectWriteRequest{Key: "j1/w", Data: []byte{1}}, wire.CodeBadInput},                          // sealed
		{wire.ObjectWriteRequest{Key: "j1/absent", Data: []byte{1}}, wire.CodeNotFound},                     // never created
		{wire.ObjectWriteRequest{Key: "j1/w", Data: make([]byte, wire.MaxWriteChunk+1)}, wire.CodeBadInput}, // over the cap
	} {
		err := nodes[0].pool.Call(ctx, addr, wire.MethodObjectWrite, &c.req, nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != c.code || !strings.Contains(re.Message, c.req.Key) {
			t.Errorf("write of %d bytes to %s: %v, want code %s naming the key", len(c.req.Data), c.req.Key, err, c.code)
		}
	}
	if _, err := nodes[0].objects.Store().Create("j1/small", 4); err != nil {
		t.Fatal(err)
	}
	err := nodes[0].pool.Call(ctx, addr, wire.MethodObjectWrite, &wire.ObjectWriteRequest{Key: "j1/small", Offset: 2, Data: []byte{1, 2, 3}}, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeBadInput {
		t.Errorf("a write past the object's end: %v, want bad_input", err)
	}
}
