package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster/objects"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// An owner's Obj.Free at the node of the primary copy deletes it there and
// on the node that pulled a secondary copy; a second free is a no-op.
func TestObjectFreeReachesTheNodesThatPulled(t *testing.T) {
	nodes := testCluster(t, 2, nil)
	ctx := pullCtx(t)
	const key, size = "j1/shared", objects.PullChunk + 100
	if err := nodes[1].objects.Store().Put(key, patterned(size)); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 10*time.Second, "n1 sees n0 in its view", func() error {
		for _, a := range nodes[1].peerAddrs() {
			if a == nodes[0].rpcAddr {
				return nil
			}
		}
		return fmt.Errorf("n1's peers: %v", nodes[1].peerAddrs())
	})
	req := &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: key, NodeAddr: nodes[1].rpcAddr, Size: size}}
	if _, err := nodes[0].objects.Locate(ctx, req); err != nil {
		t.Fatal(err)
	}
	if !nodes[0].objects.Store().Contains(key) {
		t.Fatal("no secondary copy after the pull")
	}
	for range 2 {
		if err := nodes[0].pool.Call(ctx, nodes[1].rpcAddr, wire.MethodObjectFree, &wire.ObjectFreeRequest{Keys: []string{key, "j1/absent"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Until(t, 10*time.Second, "both copies freed", func() error {
		for _, n := range nodes {
			if k, used := n.ObjectStoreUsage(); k != 0 || used != 0 {
				return fmt.Errorf("node %s holds %d objects (%d bytes)", n.Name(), k, used)
			}
		}
		return nil
	})
	// Too many keys in one request is refused, naming the limit.
	keys := make([]string, wire.MaxFreeKeys+1)
	for i := range keys {
		keys[i] = fmt.Sprintf("j1/k%d", i)
	}
	err := nodes[0].pool.Call(ctx, nodes[1].rpcAddr, wire.MethodObjectFree, &wire.ObjectFreeRequest{Keys: keys}, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeBadInput || !strings.Contains(err.Error(), fmt.Sprint(wire.MaxFreeKeys)) {
		t.Fatalf("free of %d keys: %v, want bad_input naming %d", len(keys), err, wire.MaxFreeKeys)
	}
}

// A free that reaches a node while it pulls the object must not delete the
// copy under the chunks still arriving: the pull drops it when it ends.
func TestFreeDuringAPullDropsTheCopy(t *testing.T) {
	nodes := testCluster(t, 1, insecure) // the fake peer speaks plaintext
	ctx := pullCtx(t)
	const key, size = "j1/racing", 1000
	addr := fakePeer(t, func(ctx context.Context, body []byte) (any, error) {
		// The forwarded free arrives while the chunk is on its way.
		if _, err := nodes[0].objects.Free(ctx, &wire.ObjectFreeRequest{Keys: []string{key}, FromNode: true}); err != nil {
			return nil, err
		}
		if !nodes[0].objects.Store().Contains(key) && nodes[0].objects.Store().Used() == 0 {
			return nil, fmt.Errorf("the free deleted the copy under the pull")
		}
		return &rpc.Bulk{Data: patterned(size)}, nil
	})
	req := &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: key, NodeAddr: addr, Size: size}}
	_, err := nodes[0].objects.Locate(ctx, req)
	if err == nil || !strings.Contains(err.Error(), "freed it meanwhile") {
		t.Fatalf("pull of an object freed meanwhile: %v", err)
	}
	if nodes[0].objects.Store().Contains(key) || nodes[0].objects.Store().Used() != 0 {
		t.Fatalf("the freed pull left its copy: Used %d", nodes[0].objects.Store().Used())
	}
}
