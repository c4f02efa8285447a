package cluster

import (
	"fmt"
	"log"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/nodeup/nodeup/internal/mpsafe"
	"github.com/nodeup/nodeup/store"
)

// gossipMeta is the small record every node gossips about itself (memberlist
// caps it at 512 bytes); resource tables live in Raft state instead.
type gossipMeta struct {
	ID          string `msgpack:"id"`
	Name        string `msgpack:"n"`
	RPCAddr     string `msgpack:"rpc"`
	Server      bool   `msgpack:"s"`
	Version     string `msgpack:"v"`
	Incarnation uint64 `msgpack:"inc"`
	// Leaving is gossiped just before a graceful leave: memberlist reports a
	// departed node the same way whether it left or died, so peers use this
	// to tell the two apart (as serf's leave intent does).
	Leaving bool `msgpack:"l,omitempty"`
}

// member is one node as gossip sees it.
type member struct {
	gossipMeta
	GossipAddr string
	Status     store.NodeStatus
	Since      time.Time
}

// membership tracks memberlist's view, including dead and left members that
// memberlist.Members() no longer lists, and wakes the leader on changes.
type membership struct {
	mu      sync.Mutex
	members map[string]*member
	seeds   map[string]seed // remembered peers gossip has not shown yet (reconnect.go)
	ml      *memberlist.Memberlist
	changed retrier       // wakes the leader's reconcile loop
	persist chan struct{} // wakes peersLoop
	logger  *slog.Logger
	mu2     sync.Mutex // guards self and meta
	self    gossipMeta
	meta    []byte
}

func newMembership(meta gossipMeta, logger *slog.Logger) (*membership, error) {
	b, err := msgpack.Marshal(&meta)
	if err != nil {
		return nil, err
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("gossip metadata is %d bytes, over memberlist's %d: shorten --node-name", len(b), memberlist.MetaMaxSize)
	}
	return &membership{members: map[string]*member{}, seeds: map[string]seed{}, changed: newRetrier(),
		persist: make(chan struct{}, 1), logger: logger, self: meta, meta: b}, nil
}

// setLeaving marks this node's gossip metadata as leaving; the caller then
// pushes it out with memberlist's UpdateNode.
func (m *membership) setLeaving() {
	m.mu2.Lock()
	defer m.mu2.Unlock()
	m.self.Leaving = true
	if b, err := msgpack.Marshal(&m.self); err == nil {
		m.meta = b
	}
}

// gossipTimings are the failure-detector settings (memberlist's LAN profile);
// docs/architecture.md derives the detection times from them.
func gossipConfig(cfg Config, id, bind, advertise string, port int, label string, mb *membership) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = id
	mc.BindAddr = bind
	mc.BindPort = port
	mc.AdvertiseAddr = advertise
	mc.AdvertisePort = port
	mc.Label = label
	mc.Delegate = mb
	mc.Events = mb
	mc.Logger = log.New(newLogWriter(cfg.Logger, "gossip"), "", 0)
	mc.DeadNodeReclaimTime = 10 * time.Second // a node restarted on a new address may reclaim its ID
	if cfg.tuneGossip != nil {
		cfg.tuneGossip(mc)
	}
	return mc
}

func (m *membership) notify() {
	m.changed.wake()
	select {
	case m.persist <- struct{}{}:
	default:
	}
}

func (m *membership) update(n *memberlist.Node, status store.NodeStatus) {
	var meta gossipMeta
	if err := mpsafe.Unmarshal(n.Meta, &meta); err != nil || meta.ID != n.Name {
		m.logger.Warn("ignoring gossip member with unreadable metadata", "name", n.Name, "addr", n.Address())
		return
	}
	m.mu.Lock()
	cur, ok := m.members[n.Name]
	if status == store.NodeDead && (meta.Leaving || ok && cur.Leaving) {
		status = store.NodeLeft
	}
	if !ok || cur.Status != status || cur.Incarnation != meta.Incarnation || cur.RPCAddr != meta.RPCAddr {
		m.members[n.Name] = &member{gossipMeta: meta, GossipAddr: n.Address(), Status: status, Since: time.Now()}
		m.logger.Info("member "+string(status), "node", meta.Name, "id", meta.ID, "rpc", meta.RPCAddr)
	} else {
		cur.gossipMeta = meta
	}
	m.mu.Unlock()
	m.notify()
}

// NotifyJoin implements memberlist.EventDelegate.
func (m *membership) NotifyJoin(n *memberlist.Node) { m.update(n, store.NodeAlive) }

// NotifyLeave implements memberlist.EventDelegate; update turns dead into
// left for a node that gossiped its intent to leave.
func (m *membership) NotifyLeave(n *memberlist.Node) { m.update(n, store.NodeDead) }

// NotifyUpdate implements memberlist.EventDelegate.
func (m *membership) NotifyUpdate(n *memberlist.Node) { m.update(n, store.NodeAlive) }

// NodeMeta implements memberlist.Delegate.
func (m *membership) NodeMeta(limit int) []byte {
	m.mu2.Lock()
	defer m.mu2.Unlock()
	return m.meta
}

// NotifyMsg implements memberlist.Delegate; nodeup sends no user messages.
func (m *membership) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate.
func (m *membership) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate.
func (m *membership) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (m *membership) MergeRemoteState(buf []byte, join bool) {}

// snapshot returns all known members sorted by ID, with memberlist's
// suspicion overlaid (suspect members are still "alive" to the event API).
func (m *membership) snapshot() []member {
	suspect := map[string]bool{}
	if m.ml != nil {
		for _, n := range m.ml.Members() {
			if n.State == memberlist.StateSuspect {
				suspect[n.Name] = true
			}
		}
	}
	m.mu.Lock()
	out := make([]member, 0, len(m.members))
	for id, mem := range m.members {
		c := *mem
		if suspect[id] && c.Status == store.NodeAlive {
			c.Status = store.NodeSuspect
		}
		out = append(out, c)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// gossipAddrs lists the gossip addresses of live members, for joiners.
func (m *membership) gossipAddrs() []string {
	var out []string
	for _, mem := range m.snapshot() {
		if mem.Status.Live() {
			out = append(out, mem.GossipAddr)
		}
	}
	return out
}

// rpcAddrs lists the RPC addresses of live members.
func (m *membership) rpcAddrs(serversOnly bool) []string {
	var out []string
	for _, mem := range m.snapshot() {
		if mem.Status.Live() && (!serversOnly || mem.Server) {
			out = append(out, mem.RPCAddr)
		}
	}
	return out
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
