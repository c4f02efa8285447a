package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// liveness is what a service manager asks of a running node (systemd's
// READY=1 and WATCHDOG=1, cli/systemd.go): whether the leader has accepted
// the node's registration, and whether its agent loop still turns.
type liveness struct {
	init, fire sync.Once
	registered chan struct{}
	// lastBeat is when the agent loop last began a round (UnixNano).
	lastBeat atomic.Int64
}

func (l *liveness) registeredC() chan struct{} {
	l.init.Do(func() { l.registered = make(chan struct{}) })
	return l.registered
}

// markRegistered closes the Registered channel; later calls do nothing.
func (l *liveness) markRegistered() {
	c := l.registeredC()
	l.fire.Do(func() { close(c) })
}

func (l *liveness) beat() { l.lastBeat.Store(time.Now().UnixNano()) }

// Registered returns a channel closed once the cluster leader has first
// accepted this node into the Raft node table (the agent loop's
// NodeRegister succeeded). It stays closed when the node later registers
// again (a new leader that did not know it). nodeup start sends systemd
// READY=1 when it closes, as Consul's agent signals readiness after it
// joined.
func (n *Node) Registered() <-chan struct{} { return n.live.registeredC() }

// agentStallAfter is how long the agent loop may go without starting a
// round before Alive reports it stalled: two forwarded calls at their
// timeout (register and heartbeat) and two heartbeat intervals.
func (n *Node) agentStallAfter() time.Duration {
	return 2*forwardTimeout + 2*n.cfg.HeartbeatInterval
}

// Alive returns nil while the node's agent loop (registration and
// heartbeats to the leader) has started a round within the last
// 2×15 s + 2×HeartbeatInterval, and an error naming how long ago it last
// did otherwise. A leader that cannot be reached does not make a node
// un-alive (each round ends at its call timeouts); a loop stuck on a lock
// does. systemd's watchdog pings are sent only while it returns nil.
func (n *Node) Alive() error {
	last := n.live.lastBeat.Load()
	if last == 0 {
		return nil // not started yet: Start has not returned
	}
	if since := time.Since(time.Unix(0, last)); since > n.agentStallAfter() {
		return fmt.Errorf("agent loop stalled: last round began %s ago (limit %s)", since.Round(time.Millisecond), n.agentStallAfter())
	}
	return nil
}
