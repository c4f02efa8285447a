package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// rememberedPeers reads nd's peers.json and returns the IDs it lists.
func rememberedPeers(dir string) (map[string]peerRecord, error) {
	d := &dataDir{path: dir}
	peers, err := d.readPeers()
	if err != nil {
		return nil, err
	}
	out := map[string]peerRecord{}
	for _, p := range peers {
		out[p.ID] = p
	}
	return out, nil
}

// waitRemembers waits until every node's peers.json lists all the others.
func waitRemembers(t *testing.T, nodes []*Node) {
	t.Helper()
	testutil.Until(t, 10*time.Second, "peers.json lists every other node", func() error {
		for _, nd := range nodes {
			got, err := rememberedPeers(nd.DataDir())
			if err != nil {
				return err
			}
			for _, o := range nodes {
				p, ok := got[o.ID()]
				switch {
				case o == nd && ok:
					return fmt.Errorf("%s remembers itself", nd.Name())
				case o != nd && (!ok || p.RPC != o.RPCAddr() || p.Gossip != o.ml.LocalNode().Address()):
					return fmt.Errorf("%s remembers %s as %+v", nd.Name(), o.Name(), p)
				}
			}
		}
		return nil
	})
}

// restartConfig is nd's config for a restart on its data dir without --join
// (ports kept when keepPorts, else new ones).
func restartConfig(nd *Node, keepPorts bool) Config {
	cfg := nd.cfg
	cfg.Join = nil
	cfg.Port, cfg.GossipPort = 0, 0
	if keepPorts {
		_, cfg.Port = splitHostPortInt(nd.RPCAddr())
		_, cfg.GossipPort = splitHostPortInt(nd.ml.LocalNode().Address())
	}
	return cfg
}

// A node restarted on its data dir with no --join (and on new ports) finds
// the cluster through the peers it remembers.
func TestRestartWithoutJoinFindsRememberedPeers(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	waitRemembers(t, nodes)
	old := nodes[2]
	old.Kill()
	again, err := Start(context.Background(), restartConfig(old, false))
	if err != nil {
		t.Fatalf("restart without --join: %v", err)
	}
	t.Cleanup(again.Kill)
	waitRestartedAlive(t, again)
	waitFormed(t, []*Node{nodes[0], nodes[1], again}, 3, 3)
}

// Every node of a cluster is killed and restarted without --join (the head
// with --head, as its unit file would say), on its ports: the first to start
// finds nobody and starts from its data dir, rejoining in the background;
// the cluster forms again.
func TestWholeClusterRestartWithoutJoin(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	waitRemembers(t, nodes)
	clusterID := nodes[0].ClusterID()
	for _, nd := range nodes {
		nd.Kill()
	}
	var again []*Node
	for _, i := range []int{1, 2, 0} {
		nd, err := Start(context.Background(), restartConfig(nodes[i], true))
		if err != nil {
			t.Fatalf("restart %s without --join: %v", nodes[i].Name(), err)
		}
		t.Cleanup(nd.Kill)
		again = append(again, nd)
	}
	waitFormed(t, again, 3, 3)
	for _, nd := range again {
		if nd.ClusterID() != clusterID {
			t.Fatalf("%s is in cluster %s after the restart, want %s", nd.Name(), nd.ClusterID(), clusterID)
		}
	}
}

// A data dir without peers.json (a fresh one), or whose peers.json lists
// nobody usable, still needs --head or --join, and the error says so; a
// fresh one is not even created.
func TestStartNeedsHeadJoinOrRememberedPeers(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), "lonely")
	check := func() {
		t.Helper()
		_, err := Start(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "--head") || !strings.Contains(err.Error(), cfg.DataDir) {
			t.Fatalf("start without --head, --join or remembered peers: %v (want an error naming --head and the data dir)", err)
		}
	}
	check()
	if _, err := os.Stat(cfg.DataDir); err == nil {
		t.Fatal("a refused start created the data dir")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, peersFile), []byte(`{"peers":[{"id":"nothex","rpc":"x","gossip":"y"}]}`), 0o640); err != nil {
		t.Fatal(err)
	}
	check()
}

// peers.json is untrusted: oversized files, bad JSON, and bad entries
// (hostnames, unspecified or multicast IPs, bad ports, bad IDs) are refused
// with errors that name them; good entries survive; the entry count is capped.
func TestReadPeersRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	d := &dataDir{path: dir}
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, peersFile), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := d.readPeers(); err != nil || got != nil {
		t.Fatalf("missing file: %v, %v", got, err)
	}

	good := peerRecord{ID: "0123456789abcdef0123456789abcdef", Name: "n1", RPC: "10.0.0.1:7370", Gossip: "10.0.0.1:7371"}
	bad := map[string]peerRecord{
		"not 8 to 64 hex": {ID: "../../etc", RPC: good.RPC, Gossip: good.Gossip},
		`"example.com"`:   {ID: "aaaaaaaa", RPC: "example.com:7370", Gossip: good.Gossip},
		`"0.0.0.0"`:       {ID: "bbbbbbbb", RPC: good.RPC, Gossip: "0.0.0.0:7371"},
		`"224.0.0.1"`:     {ID: "cccccccc", RPC: "224.0.0.1:7370", Gossip: good.Gossip},
		`port "0"`:        {ID: "dddddddd", RPC: "10.0.0.2:0", Gossip: good.Gossip},
		`port "99999"`:    {ID: "eeeeeeee", RPC: good.RPC, Gossip: "10.0.0.2:99999"},
		"not host:port":   {ID: "ffffffff", RPC: "10.0.0.2", Gossip: good.Gossip},
		"negative":        {ID: "abababab", RPC: good.RPC, Gossip: good.Gossip, FailedAt: -1},
	}
	doc := peersDoc{Peers: []peerRecord{good}}
	for _, p := range bad {
		doc.Peers = append(doc.Peers, p)
	}
	doc.Peers = append(doc.Peers, good) // a duplicate ID is dropped silently
	b, _ := json.Marshal(doc)
	write(b)
	got, err := d.readPeers()
	if len(got) != 1 || got[0] != good {
		t.Fatalf("kept %+v, want only %+v", got, good)
	}
	for want := range bad {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %s", err, want)
		}
	}

	write([]byte("{not json"))
	if got, err := d.readPeers(); got != nil || err == nil || !strings.Contains(err.Error(), "not a peers file") {
		t.Fatalf("bad JSON: %v, %v", got, err)
	}
	write(append([]byte(`{"peers":[]}`), make([]byte, maxPeersFileBytes)...))
	if got, err := d.readPeers(); got != nil || err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("oversized file: %v, %v", got, err)
	}

	doc.Peers = nil
	for i := 0; i < maxPeers+5; i++ {
		doc.Peers = append(doc.Peers, peerRecord{ID: fmt.Sprintf("%08x", i), RPC: good.RPC, Gossip: good.Gossip})
	}
	b, _ = json.Marshal(doc)
	write(b)
	if got, err := d.readPeers(); len(got) != maxPeers || err == nil || !strings.Contains(err.Error(), fmt.Sprintf("kept the first %d", maxPeers)) {
		t.Fatalf("%d entries: kept %d, %v", maxPeers+5, len(got), err)
	}
}
