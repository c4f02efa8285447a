package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/nodeup/nodeup/cluster/objects"
	"github.com/nodeup/nodeup/cluster/observe"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// Node is one running node daemon. Create it with Start; stop it with
// Shutdown (graceful leave) or Kill (as if the process died, for tests).
type Node struct {
	cfg Config
	// settings are the custom resources and labels, which Reload changes
	// (read them there, not in cfg).
	settings settings
	// rpcMetrics are the served RPCs' latency and errors (rpcmetrics.go).
	rpcMetrics     *rpcMetrics
	rpcMetricsOnce sync.Once
	logger         *slog.Logger
	dir            *dataDir
	id             Identity

	rpcAddr string // advertised host:port of the RPC+Raft port
	ln      net.Listener
	mux     *mux
	// auth decides connections' principals (auth.go); its checks are on
	// only with a token authority (Config.tokens).
	auth *authenticator
	// remoteTokens resolves tokens through the leader while this secure
	// node has no Raft state of its own (hasRaftState); nil on an
	// --insecure node or one given a token authority (SetTokenAuthority).
	remoteTokens *remoteTokens
	// tokenWaits bounds the token checks waiting for a follower's state
	// to catch up (raftTokens.await).
	tokenWaits chan struct{}
	// sockLn and sockMux serve local clients on <data-dir>/nodeup.sock;
	// sockAddr is UnixPrefix and its path ("" when it could not listen).
	sockLn    net.Listener
	sockMux   *mux
	sockAddr  string
	rpcServer *rpc.Server
	pool      *rpc.Pool // to other nodes: mutual TLS unless --insecure
	// pullPools add connections to each peer for object pulls, to the one
	// of pool (chunkSpread, pullConnections): one TLS connection seals and
	// opens on one core.
	pullPools []*rpc.Pool
	// localPool calls this node's workers, plaintext on loopback.
	localPool *rpc.Pool
	sec       *security
	keyring   *memberlist.Keyring // gossip's keys (nil with --insecure)
	keyringMu sync.Mutex          // one keyring change at a time
	rotateMu  sync.Mutex          // one rotation at a time (leader)

	members *membership
	ml      *memberlist.Memberlist

	// taskEvents is the latest state of the tasks this node's processes
	// reported (cluster/observe).
	taskEvents *observe.TaskEvents

	fsm           *store.FSM
	raft          *raft.Raft
	raftStore     *trackedStore // raft.db, its writes tracked in disk
	raftSnaps     raft.SnapshotStore
	raftTrans     *raft.NetworkTransport
	raftLayer     *raftLayer
	pilot         *autopilot.Autopilot
	pilotDelegate *pilotDelegate
	leaderCh      chan bool

	httpServer *http.Server
	httpAddr   string

	leader      leaderState
	leaderHint  atomic.Value // string: RPC address of the leader, for non-voters
	view        atomic.Value // []wire.NodeInfo: the cluster as the leader last reported it
	spills      spillLedger  // demand spilled to other nodes since view arrived
	viewUpdates broadcast    // published at every new view from the leader

	local       *localSched
	workers     *workerPool
	actors      *actorManager
	pgs         *pgManager
	drainMoving drainMoves       // actors a drain is moving now (drain.go)
	objects     *objects.Service // the object store, Obj.* endpoints and pulls from peers (cluster/objects)
	drivers     driverWatch      // drivers registered here, ended jobs when they exit (drivers.go)
	jobs        *jobSupervisor   // submitted jobs run here (jobsupervisor.go)

	gpus nodeGPUs    // the node's GPU devices (gpus.go)
	disk *diskHealth // outcome of the latest writes to the data dir (disk.go)

	ctx      context.Context
	cancel   context.CancelFunc
	group    *goGroup // every goroutine the node starts; close stops it
	stopOnce sync.Once
	// live tells systemd when the node is ready and still alive (notify.go).
	live liveness
}

// Start opens the data dir, binds the ports, joins or bootstraps the cluster
// and returns a running node. Errors name what failed (a port in use, an
// unreachable peer, a data dir of another cluster; a *RaftDataError for Raft
// data it cannot safely start from); on error nothing in the data dir has been
// changed beyond its lock file.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, logger: cfg.Logger, disk: newDiskHealth(), tokenWaits: make(chan struct{}, maxTokenWaits)}
	n.settings.resources, n.settings.labels = cfg.Resources.Clone(), maps.Clone(cfg.Labels)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.group = newGoGroup(n.ctx, n.logger)
	n.leaderHint.Store("")
	defer func() {
		if err != nil {
			n.close()
		}
	}()

	if !cfg.Head && len(cfg.Join) == 0 {
		// Checked before the data dir is created or locked, too.
		if _, err := os.Stat(filepath.Join(cfg.DataDir, peersFile)); err != nil {
			return nil, errNoPeers(cfg.DataDir)
		}
	}
	if n.dir, err = openDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if n.id, err = n.dir.readIdentity(); err != nil {
		return nil, err
	}
	if cfg.Server {
		if err := checkRaftData(cfg.DataDir, n.id.RaftState); err != nil {
			return nil, err
		}
	}
	// A record's own "node" key (another node) becomes "peer_node" (logkeys.go).
	n.logger = slog.New(newUniqueKeys(n.logger.Handler())).With("node", cfg.NodeName)

	advertise, err := advertiseAddr(cfg)
	if err != nil {
		return nil, err
	}
	if n.ln, err = net.Listen("tcp", hostPort(cfg.BindAddr, cfg.Port)); err != nil {
		return nil, fmt.Errorf("RPC port %d on %s: %w", cfg.Port, cfg.BindAddr, err)
	}
	n.rpcAddr = hostPort(advertise, n.ln.Addr().(*net.TCPAddr).Port)
	n.pool = rpc.NewPool([]byte{connRPC}, wire.ProtocolVersion, 5*time.Second)
	n.pool.SetDialer(n.dialNode)
	for range pullConnections() - 1 {
		p := rpc.NewPool([]byte{connRPC}, wire.ProtocolVersion, 5*time.Second)
		p.SetDialer(n.dialNode)
		n.pullPools = append(n.pullPools, p)
	}
	n.localPool = rpc.NewPool([]byte{connRPC}, wire.ProtocolVersion, 5*time.Second)
	n.localPool.SetDialer(n.dialTCP)
	n.localPool.SetTokenFunc(n.workerToken)

	// Learn the cluster from a peer before writing anything to the data dir
	// but the cluster identity: the --join peers, else those the data dir
	// remembers.
	peers, err := n.dir.readPeers()
	if err != nil {
		n.logger.Warn("remembered peers: some or all ignored", "err", err)
	}
	if !cfg.Head && len(cfg.Join) == 0 && len(peers) == 0 {
		return nil, errNoPeers(cfg.DataDir)
	}
	if err := n.setupSecurity(ctx, peers); err != nil {
		return nil, err
	}
	var hello *wire.HelloResponse
	if len(cfg.Join) > 0 || len(peers) > 0 {
		hello, err = n.findCluster(ctx, cfg.Join, peers)
		switch {
		case err == nil:
		case cfg.Head:
			n.logger.Warn("no peer answered; starting as head", "err", err)
		case n.id.ClusterID != "" && len(peers) > 0:
			// A restart while the peers are down too (a whole-cluster
			// restart): the data dir says which cluster this is, Raft
			// elects once a quorum is back, and gossip keeps trying to
			// rejoin the remembered peers (reconnect.go).
			n.logger.Warn("no peer answered; starting from the data dir, rejoining the remembered peers in the background", "cluster", n.id.ClusterName, "err", err)
		default:
			return nil, err
		}
	}
	switch {
	case hello != nil:
		if n.id.ClusterID != "" && n.id.ClusterID != hello.ClusterID {
			return nil, fmt.Errorf("data dir %s belongs to cluster %q (%s), but the peer is in cluster %q (%s): use a fresh --data-dir to join this one",
				cfg.DataDir, n.id.ClusterName, n.id.ClusterID, hello.ClusterName, hello.ClusterID)
		}
		n.id.ClusterID, n.id.ClusterName = hello.ClusterID, hello.ClusterName
		n.leaderHint.Store(hello.LeaderAddr)
	case n.id.ClusterID == "":
		n.id.ClusterID, n.id.ClusterName = newID(), cfg.ClusterName
	}
	n.id.Incarnation++
	if err := n.dir.writeIdentity(n.id); err != nil {
		return nil, fmt.Errorf("write node identity: %w", err)
	}
	n.logger = n.logger.With("node_id", short(n.id.NodeID))

	n.fsm = store.NewFSM(n.logger.With("component", "fsm"))
	if err := n.openObjectStore(); err != nil {
		return nil, err
	}
	if err := n.startGPUs(ctx); err != nil {
		return nil, err
	}
	n.local = newLocalSched(n.Resources())
	n.attachGPUs()
	n.workers = newWorkerPool(n, n.workerPoolConfig())
	n.actors = newActorManager(n)
	n.pgs = newPGManager(n)
	n.jobs = newJobSupervisor(n)
	n.rpcServer = rpc.NewServer(n.logger.With("component", "rpc"), wire.ProtocolVersion)
	if err := n.setupAuth(); err != nil {
		return nil, err
	}
	n.registerEndpoints()
	if cfg.Server {
		if err := n.setupRaft(); err != nil {
			return nil, err
		}
	}
	n.listenSocket() // before any connection is served: workers are told the socket
	n.mux = newMux(n.ln, n.rpcServer.ServeConn, n.raftLayerOrNil(), n.logger)
	if !cfg.Insecure {
		n.mux.tls = n.sec.serverConfig()
	}
	n.group.goFunc("rpc-accept", n.mux.serve)

	if err := n.setupGossip(advertise, hello, peers); err != nil {
		return nil, err
	}
	if err := n.startHTTP(advertise); err != nil {
		return nil, err
	}
	if cfg.Server {
		n.group.goFunc("monitor-leadership", n.monitorLeadership)
		if !n.id.RaftState {
			n.group.goFunc("record-raft-state", n.recordRaftState)
		}
	}
	n.group.goFunc("agent", n.agentLoop)
	n.group.goFunc("watch-disk", n.watchDisk)
	n.group.goFunc("sweep-worker-logs", n.sweepWorkerLogs)
	n.group.goFunc("watch-drivers", n.watchDrivers)
	n.group.goCtx("kill-jobs-at-stop", func(ctx context.Context) { <-ctx.Done(); n.jobs.killAll() })
	n.group.goCtx("fail-orphan-jobs", n.jobs.failOrphans)
	n.group.goCtx("reconnect", n.reconnectLoop)
	if !cfg.Insecure {
		n.group.goCtx("renew-cert", n.renewLoop)
	}
	n.group.goFunc("peers", n.peersLoop)
	_ = os.WriteFile(n.dir.file(addressFile), []byte(n.rpcAddr+"\n"), 0o640)
	if cfg.RecordCurrent {
		writeCurrentAddress(n.rpcAddr, n.sockAddr)
		writeLocalNode(n.rpcAddr, n.sockAddr)
	}
	n.logger.Info("node started", "rpc", n.rpcAddr, "socket", n.sockAddr, "enforcing_roles", n.cfg.tokens != nil, "gossip", n.ml.LocalNode().Address(), "http", n.httpAddr,
		"cluster", n.id.ClusterName, "incarnation", n.id.Incarnation, "server", cfg.Server, "resources", cfg.Resources.String())
	warnUnauthenticated(n.logger, cfg.BindAddr, cfg.Insecure)
	return n, nil
}

// warnUnauthenticated says, once at start, what a node leaves open: with
// --insecure everything. A secure node has nothing to warn about: traffic
// between machines is TLS, core workers' (Go and Python) too
// (docs/security.md).
func warnUnauthenticated(logger *slog.Logger, bind string, insecure bool) {
	if insecure {
		logger.Warn("running with --insecure: no TLS between nodes, no CA, no tokens; anyone who can reach this node's ports can join, submit work and read the KV (docs/security.md)",
			"bind", bind)
	}
}

// raftLayerOrNil returns the Raft stream layer, or for a non-server a closed
// one, so Raft connections to it are dropped.
func (n *Node) raftLayerOrNil() *raftLayer {
	if n.raftLayer == nil {
		l := newRaftLayer(n.ln.Addr())
		_ = l.Close()
		return l
	}
	return n.raftLayer
}

// advertiseAddr picks the IP others dial: --advertise, else --bind, else
// (bind 0.0.0.0) the first private address, as Consul does.
func advertiseAddr(cfg Config) (string, error) {
	if cfg.AdvertiseAddr != "" {
		return cfg.AdvertiseAddr, nil
	}
	if ip := net.ParseIP(cfg.BindAddr); ip != nil && !ip.IsUnspecified() {
		return cfg.BindAddr, nil
	}
	ip, err := sockaddr.GetPrivateIP()
	if err != nil || ip == "" {
		return "", fmt.Errorf("binding %s but found no private IP to advertise: set --advertise", cfg.BindAddr)
	}
	return ip, nil
}

func (n *Node) setupRaft() error {
	dir := n.dir.file(raftDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("raft dir: %w", err)
	}
	hl := hclogFor(n.logger, "raft")
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl)
	if err != nil {
		return fmt.Errorf("raft snapshots: %w", err)
	}
	n.raftSnaps = snaps
	path := filepath.Join(dir, raftDBFile)
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		return fmt.Errorf("open raft log %s: %w", path, err)
	}
	n.raftStore = &trackedStore{BoltStore: bolt, path: path, health: n.disk}
	n.raftLayer = newRaftLayer(n.ln.Addr())
	n.raftLayer.dial = n.dialNode
	n.raftTrans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: n.raftLayer, MaxPool: 3, Timeout: 10 * time.Second, Logger: hl,
		ServerAddressProvider: nil,
	})
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.id.NodeID)
	rc.Logger = hl
	n.leaderCh = make(chan bool, 8)
	rc.NotifyCh = n.leaderCh
	rc.SnapshotThreshold = 8192
	existing, err := raft.HasExistingState(n.raftStore, n.raftStore, snaps)
	if err != nil {
		return fmt.Errorf("read raft state: %w", err)
	}
	if err := n.recoverPeers(rc, snaps, existing); err != nil {
		return err
	}
	if n.raft, err = n.newRaft(rc, snaps); err != nil {
		return err
	}
	if n.cfg.Head && !existing {
		f := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: rc.LocalID, Address: raft.ServerAddress(n.rpcAddr),
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("bootstrap raft: %w", err)
		}
		n.logger.Info("bootstrapped a new cluster", "cluster", n.id.ClusterName, "cluster_id", n.id.ClusterID)
	}
	n.pilotDelegate = &pilotDelegate{n: n}
	n.pilot = autopilot.New(n.raft, n.pilotDelegate,
		autopilot.WithLogger(hclogFor(n.logger, "autopilot")),
		autopilot.WithUpdateInterval(time.Second),
		autopilot.WithReconcileInterval(2*time.Second))
	return nil
}

// newRaft starts Raft on the opened stores. checkRaftData has vetted them;
// should Raft still panic on what it reads, the panic becomes a
// *RaftDataError rather than a crash.
func (n *Node) newRaft(rc *raft.Config, snaps raft.SnapshotStore) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &RaftDataError{Path: n.dir.file(filepath.Join(raftDir, raftDBFile)), DataDir: n.cfg.DataDir,
				Problem: "cannot be read by Raft", Err: fmt.Errorf("%v", p)}
		}
	}()
	if r, err = raft.NewRaft(rc, n.fsm, n.raftStore, n.raftStore, snaps, n.raftTrans); err != nil {
		return nil, fmt.Errorf("start raft: %w", err)
	}
	return r, nil
}

// recordRaftState marks node.json once this node holds Raft state (at once
// after a restart or a bootstrap, else when a leader first replicates to it),
// so that losing raft.db later is refused rather than silently rejoined.
func (n *Node) recordRaftState() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		has, err := raft.HasExistingState(n.raftStore, n.raftStore, n.raftSnaps)
		if err == nil && has {
			id := n.id
			id.RaftState = true
			if err := n.dir.writeIdentity(id); err != nil {
				n.logger.Warn("record Raft state in node identity", "file", n.dir.file(identityFile), "err", err)
			}
			return
		}
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// setupGossip starts memberlist and joins the members the hello listed
// (else, if none of them answers, the remembered peers); remembered peers
// gossip does not show are retried in the background.
func (n *Node) setupGossip(advertise string, hello *wire.HelloResponse, peers []peerRecord) error {
	var err error
	meta := gossipMeta{ID: n.id.NodeID, Name: n.cfg.NodeName, RPCAddr: n.rpcAddr, Server: n.cfg.Server,
		Version: n.cfg.Version, Incarnation: n.id.Incarnation}
	if n.members, err = newMembership(meta, n.logger.With("component", "gossip")); err != nil {
		return err
	}
	mc := gossipConfig(n.cfg, n.id.NodeID, n.cfg.BindAddr, advertise, n.cfg.GossipPort, "nodeup/"+n.id.ClusterID, n.members)
	if !n.sec.insecure {
		// Gossip is encrypted and authenticated with the cluster's keys
		// (AES-GCM): a packet from a node without them is dropped.
		keys := n.sec.gossipKeys()
		if mc.Keyring, err = memberlist.NewKeyring(keys, keys[0]); err != nil {
			return fmt.Errorf("gossip keyring: %w", err)
		}
		n.keyring = mc.Keyring
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	tr, err := newGossipTransport(n, n.cfg.BindAddr, n.cfg.GossipPort, mc.Logger)
	if err != nil {
		return err
	}
	mc.Transport = tr
	mc.BindPort, mc.AdvertisePort = tr.GetAutoBindPort(), tr.GetAutoBindPort()
	if n.ml, err = memberlist.Create(mc); err != nil {
		_ = tr.Shutdown()
		return fmt.Errorf("gossip port %d on %s: %w", n.cfg.GossipPort, n.cfg.BindAddr, err)
	}
	n.members.ml = n.ml
	if hello != nil && len(hello.GossipAddrs) > 0 {
		if _, err := n.ml.Join(hello.GossipAddrs); err != nil {
			var remembered []string
			for _, p := range peers {
				remembered = append(remembered, p.Gossip)
			}
			if len(remembered) == 0 {
				return fmt.Errorf("join gossip through %v: %w", hello.GossipAddrs, err)
			}
			if _, err2 := n.ml.Join(remembered); err2 != nil {
				return fmt.Errorf("join gossip through %v, then the remembered %v: %w", hello.GossipAddrs, remembered, errors.Join(err, err2))
			}
		}
	}
	n.members.remember(peers)
	return nil
}

func errNoPeers(dataDir string) error {
	return fmt.Errorf("a node needs --head (start a new cluster) or peers to join (nodeup join <peer>); data dir %s remembers none", dataDir)
}

// findCluster asks the --join peers in turn, then up to helloFanout
// remembered ones at once, which cluster they are in.
func (n *Node) findCluster(ctx context.Context, join []string, peers []peerRecord) (*wire.HelloResponse, error) {
	var errs []error
	if len(join) > 0 {
		h, err := n.helloPeers(ctx, join)
		if err == nil {
			return h, nil
		}
		errs = append(errs, err)
	}
	if len(peers) > 0 {
		h, err := n.helloRemembered(ctx, peers)
		if err == nil {
			return h, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// helloPeers asks each peer in turn which cluster it belongs to.
func (n *Node) helloPeers(ctx context.Context, peers []string) (*wire.HelloResponse, error) {
	var errs []error
	for _, p := range peers {
		addr := p
		if _, _, err := net.SplitHostPort(p); err != nil {
			addr = hostPort(p, DefaultPort)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var resp wire.HelloResponse
		err := n.pool.Call(cctx, addr, wire.MethodHello, &wire.Empty{}, &resp)
		cancel()
		if err == nil {
			return &resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, fmt.Errorf("%w: %w", ErrNoPeerAnswered, errors.Join(errs...))
}

// ID returns the node's stable ID.
func (n *Node) ID() string { return n.id.NodeID }

// Name returns the node's human name.
func (n *Node) Name() string { return n.cfg.NodeName }

// RPCAddr returns the advertised host:port of the node's RPC and Raft port.
func (n *Node) RPCAddr() string { return n.rpcAddr }

// HTTPAddr returns the HTTP API's host:port ("" when disabled).
func (n *Node) HTTPAddr() string { return n.httpAddr }

// Incarnation returns how many times this data dir has started a node.
func (n *Node) Incarnation() uint64 { return n.id.Incarnation }

// ClusterID returns the ID of the cluster the node belongs to.
func (n *Node) ClusterID() string { return n.id.ClusterID }

// IsLeader reports whether this node is the Raft leader now.
func (n *Node) IsLeader() bool { return n.raft != nil && n.raft.State() == raft.Leader }

// hasRaftState says whether this node's copy of the replicated state is
// kept current: it leads, or is a server (voter or nonvoter) in its latest
// Raft configuration. A node outside the configuration (not a server, or
// one of more servers than RaftVoters, or one removed from the group)
// holds an empty or stale copy and asks the leader instead.
func (n *Node) hasRaftState() bool {
	if n.raft == nil {
		return false
	}
	if n.raft.State() == raft.Leader {
		return true
	}
	f := n.raft.GetConfiguration() // the latest configuration, read without the Raft loop
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.id.NodeID {
			return true
		}
	}
	return false
}

// State returns the node's read-only copy of the replicated state.
func (n *Node) State() *store.StateStore { return n.fsm.State() }

// Resources returns the node's total resources, its node:<id> resource included.
func (n *Node) Resources() sched.ResourceSet {
	r, _ := n.settings.get()
	r[sched.NodeResource(n.id.NodeID)] = sched.Unit
	if s := n.objects.Store(); s != nil {
		r[sched.ObjectStoreMemory] = sched.QuantityOf(s.Capacity())
	}
	r.Add(n.gpuResources())
	return r
}

// Shutdown leaves the cluster gracefully: gossip announces the intent to
// leave, a Raft server takes itself out of the Raft configuration (a leader
// hands leadership to another voter first; leaveRaft, bounded by
// leaveRaftTimeout) so the remaining voters keep a quorum, gossip announces
// the departure (peers mark the node left at once), then Raft and the ports
// close. Safe to call more than once.
func (n *Node) Shutdown() error {
	n.stopOnce.Do(func() {
		n.logger.Info("leaving the cluster")
		if n.ml != nil {
			n.members.setLeaving()
			if err := n.ml.UpdateNode(2 * time.Second); err != nil {
				n.logger.Warn("gossip leave intent failed", "err", err)
			}
		}
		if n.raft != nil {
			n.leaveRaft(leaveRaftTimeout)
		}
		if n.ml != nil {
			if err := n.ml.Leave(3 * time.Second); err != nil {
				n.logger.Warn("gossip leave failed", "err", err)
			}
		}
		n.close()
		n.logger.Info("node stopped")
	})
	return nil
}

// Kill stops the node abruptly, without telling peers, as a crash would (the
// data dir is kept). For tests of failure handling.
func (n *Node) Kill() {
	n.stopOnce.Do(n.close)
}

func (n *Node) otherVoters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.id.NodeID {
			c++
		}
	}
	return c
}

// shutdownBound is how long close waits for the node's goroutines to return
// before it logs the ones still running and goes on.
const shutdownBound = 15 * time.Second

// close releases everything Start acquired, in reverse order.
func (n *Node) close() {
	n.cancel()
	if n.workers != nil {
		n.workers.stopAll()
	}
	n.stopGPUs()
	defer func() {
		if n.objects != nil {
			_ = n.objects.Close()
		}
	}()
	if n.pilot != nil {
		<-n.pilot.Stop()
	}
	if n.ml != nil {
		_ = n.ml.Shutdown()
	}
	if n.httpServer != nil {
		_ = n.httpServer.Close()
	}
	if n.raft != nil {
		if err := n.raft.Shutdown().Error(); err != nil {
			n.logger.Warn("raft shutdown", "err", err)
		}
	}
	if n.raftTrans != nil {
		_ = n.raftTrans.Close()
	}
	if n.ln != nil {
		_ = n.ln.Close()
	}
	if n.sockLn != nil {
		_ = n.sockLn.Close() // a Unix listener removes its socket file
	}
	if n.rpcServer != nil {
		n.rpcServer.Close()
	}
	if n.mux != nil {
		n.mux.close()
	}
	if n.sockMux != nil {
		n.sockMux.close()
	}
	if n.pool != nil {
		n.pool.Close()
	}
	for _, p := range n.pullPools {
		p.Close()
	}
	if n.localPool != nil {
		n.localPool.Close()
	}
	// Requests still being handled (a worker start, a binary download)
	// must not write into the data dir after the node is gone.
	if n.rpcServer != nil && !n.rpcServer.Drain(10*time.Second) {
		n.logger.Warn("node stopped with RPC handlers still running")
	}
	n.group.stop(shutdownBound)
	if n.raftStore != nil {
		_ = n.raftStore.Close()
	}
	if n.dir != nil {
		_ = os.Remove(n.dir.file(addressFile))
		removeCurrentAddress(n.rpcAddr)
		n.dir.close()
	}
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// writeCurrentAddress records addr and, on a second line, the node's
// Unix socket (sock, "" for none) as this machine's current node.
func writeCurrentAddress(addr, sock string) {
	p := wire.CurrentAddressFile()
	if os.MkdirAll(filepath.Dir(p), 0o700) == nil {
		_ = writeFileAtomic(p, []byte(addr+"\n"+sock+"\n"))
	}
}

func removeCurrentAddress(addr string) {
	if wire.CurrentAddress() == addr {
		_ = os.Remove(wire.CurrentAddressFile())
	}
	if b, err := os.ReadFile(wire.LocalNodeFile(addr)); err == nil && strings.HasPrefix(string(b), addr+"\n") {
		_ = os.Remove(wire.LocalNodeFile(addr))
	}
}

// writeLocalNode records this machine's node at addr with its Unix socket
// (wire.LocalSocketFor), beside every other node running here.
func writeLocalNode(addr, sock string) {
	if sock == "" {
		return
	}
	p := wire.LocalNodeFile(addr)
	if os.MkdirAll(filepath.Dir(p), 0o700) == nil {
		_ = writeFileAtomic(p, []byte(addr+"\n"+sock+"\n"))
	}
}

// DataDir returns the node's data dir.
func (n *Node) DataDir() string { return n.cfg.DataDir }
