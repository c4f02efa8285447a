package cluster

import (
	"strings"
	"testing"
	"time"
)

func TestAliveReportsAStalledAgentLoop(t *testing.T) {
	n := &Node{cfg: Config{HeartbeatInterval: time.Second}}
	if err := n.Alive(); err != nil {
		t.Fatalf("before the loop started: %v", err)
	}
	n.live.beat()
	if err := n.Alive(); err != nil {
		t.Fatalf("just after a round: %v", err)
	}
	n.live.lastBeat.Store(time.Now().Add(-n.agentStallAfter() - time.Second).UnixNano())
	if err := n.Alive(); err == nil || !strings.Contains(err.Error(), "agent loop stalled") {
		t.Fatalf("a loop idle past %s: got %v", n.agentStallAfter(), err)
	}
	select {
	case <-n.Registered():
		t.Fatal("Registered closed before markRegistered")
	default:
	}
	n.live.markRegistered()
	n.live.markRegistered() // twice is fine (a re-registration)
	<-n.Registered()
}
