package worker

import (
	"context"
	"testing"

	"github.com/nodeup/nodeup/wire"
)

// The calls to an actor's incarnation get a context that ends when the
// actor's node is declared dead (loseDeadNodes). If the cluster then
// reports the actor alive in that same incarnation (the node was declared
// dead, yet its actor was not replaced), calls must get a live context
// again: a cancelled one would make every call look unsent forever.
func TestActorCallContextRenewedAfterNodeLoss(t *testing.T) {
	cw := &coreWorker{}
	cw.ctx, cw.cancel = context.WithCancel(context.Background())
	defer cw.cancel()
	c := &actorConn{cw: cw, id: "a1", staleInc: -1}
	c.incCtxLocked(3)
	first := c.incCtx
	c.incCtxLocked(3)
	if c.incCtx != first {
		t.Fatal("the same live incarnation got a new context: calls out to it would be cut off")
	}
	c.info = &wire.ActorInfo{ActorID: "a1", Incarnation: 3, NodeID: "n9"}
	(&actorCaller{cw: cw, conns: map[string]*actorConn{"a1": c}}).loseDeadNodes(map[string]bool{"n9": true})
	if first.Err() == nil {
		t.Fatal("loseDeadNodes left the calls' context live")
	}
	c.incCtxLocked(3)
	if c.incCtx.Err() != nil {
		t.Fatal("incarnation 3 resolved again after its node was declared dead: its calls' context is still cancelled")
	}
	c.incCtxLocked(4)
	if c.incCtx.Err() != nil {
		t.Fatal("a new incarnation got a cancelled context")
	}
}
