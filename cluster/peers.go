package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// peersFile in the data dir remembers the cluster's other members across
// restarts: a node started without --join finds its cluster through them,
// they back up --join peers that do not answer, and the node keeps trying to
// rejoin them (reconnect.go). It is rewritten atomically when gossip
// membership changes, and read as untrusted input: at most
// maxPeersFileBytes, at most maxPeers entries, each checked.
const (
	peersFile         = "peers.json"
	maxPeersFileBytes = 1 << 20 // bytes
	maxPeers          = 1024
)

// helloFanout is how many remembered peers a starting node asks at once
// (chosen at random) which cluster they are in.
const helloFanout = 16

// peerRecord is one remembered member.
type peerRecord struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	RPC    string `json:"rpc"`    // host:port of its RPC port
	Gossip string `json:"gossip"` // host:port of its gossip port
	// FailedAt is when this node began failing to reach the peer (unix
	// seconds), 0 for a peer alive when the file was written. Rejoining
	// stops ReconnectTimeout after it, across restarts.
	FailedAt int64 `json:"failed_at,omitempty"`
}

type peersDoc struct {
	Peers []peerRecord `json:"peers"`
}

// check reports what is wrong with a record read from the file.
func (p peerRecord) check() error {
	if !wire.IsHexID(p.ID) {
		return fmt.Errorf("id %q is not 8 to 64 hex digits", p.ID)
	}
	if len(p.Name) > 256 {
		return fmt.Errorf("name is %d bytes, over 256", len(p.Name))
	}
	if err := checkPeerAddr(p.RPC); err != nil {
		return fmt.Errorf("rpc: %w", err)
	}
	if err := checkPeerAddr(p.Gossip); err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	if p.FailedAt < 0 {
		return fmt.Errorf("failed_at %d is negative", p.FailedAt)
	}
	return nil
}

// checkPeerAddr accepts a literal unicast IP and a port 1..65535; names are
// refused, so the file can never make a node resolve or dial a hostname.
func checkPeerAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() || ip.IsMulticast() || ip.Equal(net.IPv4bcast) {
		return fmt.Errorf("%q: %q is not a unicast IP address", addr, host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q is not 1..65535", addr, port)
	}
	return nil
}

// readPeers returns the usable entries of peers.json (none if it does not
// exist). The error, if any, says what was skipped and why; the caller logs
// it and goes on, since the file is only a cache of what gossip knew.
func (d *dataDir) readPeers() ([]peerRecord, error) {
	path := d.file(peersFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPeersFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxPeersFileBytes {
		return nil, fmt.Errorf("%s is over %d bytes: ignored", path, maxPeersFileBytes)
	}
	var doc peersDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s is not a peers file: %w", path, err)
	}
	var out []peerRecord
	var errs []error
	seen := map[string]bool{}
	for i, p := range doc.Peers {
		if len(out) == maxPeers {
			errs = append(errs, fmt.Errorf("%s lists %d peers: kept the first %d", path, len(doc.Peers), maxPeers))
			break
		}
		if err := p.check(); err != nil {
			errs = append(errs, fmt.Errorf("%s entry %d skipped: %w", path, i, err))
			continue
		}
		if seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// writePeers replaces peers.json atomically with b.
func (d *dataDir) writePeers(b []byte) error { return writeFileAtomic(d.file(peersFile), b) }

func marshalPeers(peers []peerRecord) []byte {
	b, _ := json.MarshalIndent(peersDoc{Peers: peers}, "", "  ")
	return append(b, '\n')
}

// peerRecords lists what peers.json keeps: live members, members failed
// less than timeout ago, and remembered peers still being tried; never this
// node nor members that left. Sorted by ID, so unchanged membership gives
// the same bytes.
func (m *membership) peerRecords(now time.Time, timeout time.Duration) []peerRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []peerRecord{}
	for id, mem := range m.members {
		if id == m.self.ID || mem.Status == store.NodeLeft || mem.Status == store.NodeDead && now.Sub(mem.Since) >= timeout {
			continue
		}
		p := peerRecord{ID: id, Name: mem.Name, RPC: mem.RPCAddr, Gossip: mem.GossipAddr}
		if mem.Status == store.NodeDead {
			p.FailedAt = mem.Since.Unix()
		}
		out = append(out, p)
	}
	for id, s := range m.seeds {
		if _, known := m.members[id]; !known && now.Sub(s.since) < timeout {
			p := s.peerRecord
			p.FailedAt = s.since.Unix()
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// peersLoop rewrites peers.json after each membership change that alters it.
func (n *Node) peersLoop() {
	var last []byte
	for {
		b := marshalPeers(n.members.peerRecords(time.Now(), n.cfg.ReconnectTimeout))
		if !bytes.Equal(b, last) {
			if err := n.dir.writePeers(b); err != nil {
				n.logger.Warn("remember peers", "file", n.dir.file(peersFile), "err", err)
			} else {
				last = b
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-n.members.persist:
		}
	}
}

// helloRemembered asks up to helloFanout remembered peers at once which
// cluster they are in and returns the first answer from this data dir's
// cluster (any cluster for a data dir that has none yet).
func (n *Node) helloRemembered(ctx context.Context, peers []peerRecord) (*wire.HelloResponse, error) {
	var ask []peerRecord
	for _, p := range peers {
		if p.RPC != n.rpcAddr {
			ask = append(ask, p)
		}
	}
	rand.Shuffle(len(ask), func(i, j int) { ask[i], ask[j] = ask[j], ask[i] })
	ask = ask[:min(len(ask), helloFanout)]
	if len(ask) == 0 {
		return nil, fmt.Errorf("%s remembers no peer but this node", n.dir.file(peersFile))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	type answer struct {
		p   peerRecord
		h   *wire.HelloResponse
		err error
	}
	// The askers outlive a first answer, while Start goes on to change n.id.
	answers := make(chan answer, len(ask))
	want, wantName := n.id.ClusterID, n.id.ClusterName
	for _, p := range ask {
		asked := n.group.goFunc("hello-remembered", func() {
			var h wire.HelloResponse
			err := n.pool.Call(ctx, p.RPC, wire.MethodHello, &wire.Empty{}, &h)
			if err == nil && want != "" && h.ClusterID != want {
				err = fmt.Errorf("it is in cluster %q (%s) now, not %q (%s)", h.ClusterName, h.ClusterID, wantName, want)
			}
			answers <- answer{p, &h, err}
		})
		if !asked {
			answers <- answer{p, nil, errors.New("node stopping")}
		}
	}
	var errs []error
	for range ask {
		a := <-answers
		if a.err == nil {
			return a.h, nil
		}
		errs = append(errs, fmt.Errorf("%s at %s: %w", a.p.Name, a.p.RPC, a.err))
	}
	return nil, fmt.Errorf("none of %d peers remembered in %s answered (%w): %w", len(ask), n.dir.file(peersFile), ErrNoPeerAnswered, errors.Join(errs...))
}
