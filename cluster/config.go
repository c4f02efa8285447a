// Package cluster is the node daemon: gossip membership (memberlist), the
// Raft group (raft, raft-boltdb, raft-autopilot), the one-port RPC transport
// with leader forwarding, the HTTP endpoint, and the wiring of the per-node
// parts. State changes go through the store's FSM only.
package cluster

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// Default ports. One TCP port carries RPC and Raft; memberlist uses TCP and
// UDP on the gossip port.
const (
	DefaultPort       = 7370
	DefaultGossipPort = 7371
	DefaultHTTPPort   = 7372
	DefaultRaftVoters = 3
)

// Defaults of Config.ReconnectInterval and ReconnectTimeout (reconnect.go).
const (
	DefaultReconnectInterval = 5 * time.Second
	DefaultReconnectTimeout  = 72 * time.Hour
)

// Config is everything a node needs to start. Zero values are filled by
// Defaults; Validate reports bad combinations.
type Config struct {
	// ClusterName names a new cluster (head only; joiners learn it).
	ClusterName string
	// Head bootstraps a one-voter Raft group when the data dir holds no state.
	Head bool
	// Join lists peers (host or host:port of their RPC port) to join through.
	Join []string
	// BindAddr is the IP to listen on; AdvertiseAddr the one others dial
	// ("" = BindAddr, or the first private address when binding 0.0.0.0).
	BindAddr      string
	AdvertiseAddr string
	// Port is the TCP port for RPC and Raft; GossipPort memberlist's TCP and
	// UDP port; HTTPPort the HTTP API (-1 disables it). 0 picks a free port.
	Port, GossipPort, HTTPPort int
	// DataDir holds the node identity, the Raft log and snapshots.
	DataDir string
	// NodeName is a human name (default: hostname); IDs are generated.
	NodeName string
	// Resources are the node's total resources, CPU and memory included.
	Resources sched.ResourceSet
	// ObjectStoreMemory is the shared-memory object store's capacity in
	// bytes (default: 30% of the memory resource, as Ray's default).
	ObjectStoreMemory int64
	// ObjectStorePrefault populates the whole object store when the node
	// starts (objstore.Store.PrefaultAll, bounded by 90% of free memory and
	// by prefaultLimit), so Puts do not pay for fresh pages; as Ray's
	// preallocate_plasma_memory setting. Off by default: the memory is then
	// taken as objects first use it, not at start.
	ObjectStorePrefault bool
	// ObjectSpillThreshold is the fraction of the object store (0 to 1]
	// above which a Create first spills primary copies that no reader
	// pins to <DataDir>/spill, as Ray's object_spilling_threshold (0:
	// DefaultObjectSpillThreshold). NoObjectSpilling turns spilling off: a
	// full store is then object_store_full.
	ObjectSpillThreshold float64
	NoObjectSpilling     bool
	// GPUs says how the node finds its GPUs (detected by default, or
	// declared); they add GPU, accelerator_type:<model> and gpu_memory to
	// Resources, which must not hold GPU or gpu_memory itself.
	GPUs GPUConfig
	// Labels are free-form key=value node labels.
	Labels map[string]string
	// Python is the interpreter that runs Python jobs' workers
	// (`<Python> -m nodeup.worker`, as Ray's per-node python). Empty picks
	// /usr/bin/python3 when it imports msgpack and cloudpickle (Debian's
	// python3-msgpack, python3-cloudpickle), else python3 on PATH.
	Python string
	// RaftVoters is the target number of Raft voters (as Consul's
	// bootstrap_expect plus autopilot); Server=false never votes.
	RaftVoters int
	Server     bool
	// RecordCurrent makes the node this machine's default for client verbs
	// and drivers ($TMPDIR/nodeup-<uid>/current); nodeup start sets it,
	// embedded and test nodes do not.
	RecordCurrent bool
	// Version is the nodeup version string gossiped to peers.
	Version string
	// Timing knobs; zero uses the production defaults (see docs/architecture.md).
	HeartbeatInterval time.Duration // node → leader soft-state reports
	ReconcileInterval time.Duration // leader's gossip → Raft reconciliation
	DiskProbeInterval time.Duration // probe writes to the data dir and raft.db (disk.go)
	// ReconnectInterval is how often a node tries to rejoin a member gossip
	// declared failed (default 5 s; Serf's is 30 s), and ReconnectTimeout how
	// long after the failure it keeps trying (default 72 h, as Serf).
	ReconnectInterval time.Duration
	ReconnectTimeout  time.Duration
	// EnableDebug serves Go's profiler (net/http/pprof) under /debug/pprof/
	// on the HTTP port (--enable-debug), as Nomad's enable_debug; behind
	// an admin token unless Insecure. Off: those paths are 404.
	EnableDebug bool
	// Insecure turns the cluster identity off (--insecure): plaintext
	// between nodes, no CA, no tokens. For a laptop; a warning says so.
	Insecure bool
	// Token is the join token (nodeup1.…, pki.ParseToken) a node without
	// a cluster certificate joins with; unused once it has one.
	Token string
	// Logger receives structured logs; nil uses slog.Default().
	Logger *slog.Logger
	// SocketGroup names the group (name or numeric ID) whose members may
	// use the node's Unix socket (<data-dir>/nodeup.sock, mode 0660) as the
	// local principal, besides the node's own user and root; "" for none.
	SocketGroup string
	// MaxWorkingDirBytes caps a submitted job's working dir, its archive
	// and what it unpacks to (--max-working-dir); 0 means
	// wire.DefaultMaxWorkingDirBytes (100 MiB, as Ray's).
	MaxWorkingDirBytes int64
	// JobStopGrace is how long `nodeup job stop` waits after SIGTERM
	// before it SIGKILLs the job's process group; 0 means 3 s, Ray's
	// RAY_JOB_STOP_WAIT_TIME_S default.
	JobStopGrace time.Duration
	// MaxJobLogBytes bounds each job's log file; output past it is
	// dropped and the log says so. 0 means 64 MiB.
	MaxJobLogBytes int64
	// WorkerLogMaxBytes is the size each worker or actor process's log
	// file rotates at (--worker-log-max-size); 0 means
	// DefaultWorkerLogMaxBytes (100 MiB). WorkerLogBackups is how many
	// rotated files it keeps (--worker-log-backups); 0 means
	// DefaultWorkerLogBackups (5), negative none. WorkerLogRetention is how long
	// the files of an exited process are kept after their last write
	// (--worker-log-retention); 0 means DefaultWorkerLogRetention (24 h).
	WorkerLogMaxBytes  int64
	WorkerLogBackups   int
	WorkerLogRetention time.Duration

	// tokens, when set, turns enforcement on: every RPC is checked against
	// wire.MethodRoles and tokens resolves the tokens clients present.
	// Unset (insecure mode, until issue 15's Raft-backed authority is
	// wired) every call is allowed, as before. Tests set a map.
	tokens tokenAuthority

	// links, set only by tests, cuts links to chosen peers (links.go).
	links linkFilter
	// nodeCertValidity and renewFloor, set only by tests, shorten node
	// certificates' life (pki.NodeCertValidity) and the least wait between
	// two renewals (a minute).
	nodeCertValidity, renewFloor time.Duration
	// tuneGossip, set only by tests, adjusts memberlist's settings last.
	tuneGossip func(*memberlist.Config)
}

// Defaults returns a copy of c with unset fields filled in.
func (c Config) Defaults() Config {
	if c.MaxWorkingDirBytes <= 0 {
		c.MaxWorkingDirBytes = wire.DefaultMaxWorkingDirBytes
	}
	if c.JobStopGrace <= 0 {
		c.JobStopGrace = 3 * time.Second
	}
	if c.MaxJobLogBytes <= 0 {
		c.MaxJobLogBytes = 64 << 20
	}
	if c.ClusterName == "" {
		c.ClusterName = "nodeup"
	}
	if c.BindAddr == "" {
		c.BindAddr = "0.0.0.0"
	}
	if c.NodeName == "" {
		c.NodeName, _ = os.Hostname()
	}
	if c.RaftVoters == 0 {
		c.RaftVoters = DefaultRaftVoters
	}
	if c.Resources == nil {
		c.Resources = sched.ResourceSet{}
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	if c.ObjectSpillThreshold == 0 {
		c.ObjectSpillThreshold = DefaultObjectSpillThreshold
	}
	if c.ObjectStoreMemory == 0 {
		c.ObjectStoreMemory = max(int64(c.Resources[sched.Memory]/sched.Unit)*3/10, 64<<20)
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = time.Second
	}
	if c.DiskProbeInterval == 0 {
		c.DiskProbeInterval = 10 * time.Second
	}
	if c.ReconnectInterval == 0 {
		c.ReconnectInterval = DefaultReconnectInterval
	}
	if c.ReconnectTimeout == 0 {
		c.ReconnectTimeout = DefaultReconnectTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first bad setting, naming the value and what is accepted.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return fmt.Errorf("no data dir: set --data-dir or NODEUP_DATA_DIR")
	}
	if !filepath.IsAbs(c.DataDir) {
		return fmt.Errorf("data dir %q: must be an absolute path", c.DataDir)
	}
	if net.ParseIP(c.BindAddr) == nil {
		return fmt.Errorf("bind address %q: must be an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return fmt.Errorf("advertise address %q: must be an IP address", c.AdvertiseAddr)
	}
	for name, p := range map[string]int{"port": c.Port, "gossip-port": c.GossipPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("--%s %d: must be 0..65535", name, p)
		}
	}
	if c.HTTPPort < -1 || c.HTTPPort > 65535 {
		return fmt.Errorf("--http-port %d: must be -1 (off) or 0..65535", c.HTTPPort)
	}
	if !(c.ObjectSpillThreshold >= 0 && c.ObjectSpillThreshold <= 1) { // 0: the default
		return fmt.Errorf("object spill threshold %v: must be a fraction of the store in (0, 1]", c.ObjectSpillThreshold)
	}
	if c.ObjectStoreMemory < 1<<20 {
		return fmt.Errorf("object store memory %d bytes: must be at least 1 MiB", c.ObjectStoreMemory)
	}
	if c.RaftVoters < 1 || c.RaftVoters > 9 {
		return fmt.Errorf("--raft-voters %d: must be 1..9 (odd numbers tolerate the most failures)", c.RaftVoters)
	}
	if c.ReconnectInterval < 0 || c.ReconnectTimeout < 0 {
		return fmt.Errorf("reconnect interval %s, timeout %s: must not be negative", c.ReconnectInterval, c.ReconnectTimeout)
	}
	if c.Head && !c.Server {
		return fmt.Errorf("--head with --server=false: the head bootstraps Raft, so it must be a server")
	}
	if err := c.GPUs.validate(c.Resources); err != nil {
		return err
	}
	for k := range c.Labels {
		if k == "" {
			return fmt.Errorf("label with empty key: labels are key=value with a non-empty key")
		}
	}
	return nil
}
