package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
)

// nodeFlags are shared by start and join; docs/cli.md lists their defaults.
func nodeFlags() []ucli.Flag {
	return append([]ucli.Flag{
		configFlag(),
		&ucli.StringFlag{Name: "bind", Value: "0.0.0.0", Usage: "IP address to listen on (and advertise, unless --advertise): an IP, an interface name (eth0) or a go-sockaddr template ('{{ GetInterfaceIP \"eth0\" }}')"},
		&ucli.StringFlag{Name: "advertise", Usage: "IP address other nodes use to reach this one, as --bind takes it (default: --bind, or the first private IP)"},
		&ucli.IntFlag{Name: "port", Value: cluster.DefaultPort, Usage: "TCP port for RPC and Raft (0: any free port)"},
		&ucli.IntFlag{Name: "gossip-port", Value: cluster.DefaultGossipPort, Usage: "memberlist TCP and UDP port (0: any free port)"},
		&ucli.IntFlag{Name: "http-port", Value: cluster.DefaultHTTPPort, Usage: "HTTP API and /metrics port (0: any free port, -1: off)"},
		&ucli.StringFlag{Name: "data-dir", Value: defaultDataDir(), EnvVars: []string{"NODEUP_DATA_DIR"}, Usage: "directory for the node identity and the Raft log"},
		&ucli.StringFlag{Name: "node-name", Usage: "human name of this node (default: hostname)"},
		&ucli.StringFlag{Name: "cluster-name", Value: "nodeup", Usage: "name of a new cluster (with --head)"},
		&ucli.StringFlag{Name: "num-cpus", Usage: "CPU resource units (default: logical CPUs)"},
		&ucli.StringFlag{Name: "memory", Usage: "memory resource in bytes, or with a unit: 8GiB, 500MB (default: 70% of RAM)"},
		&ucli.StringFlag{Name: "object-store-memory", Usage: "shared-memory object store size in bytes or with a unit (default: 30% of --memory)"},
		&ucli.BoolFlag{Name: "object-store-prefault", Usage: "populate the whole object store at start (bounded by free memory and 2 minutes; logged with its duration), so Puts do not pay for fresh pages"},
		&ucli.Float64Flag{Name: "object-spill-threshold", Value: cluster.DefaultObjectSpillThreshold, Usage: "fraction of the object store above which primary copies not being read spill to <data-dir>/spill (0 < f <= 1; 0 turns spilling off)"},
		&ucli.StringFlag{Name: "resources", Usage: `custom resources: TPU-v3=2,FPGA=4 or '{"TPU-v3": 2}'`},
		&ucli.StringFlag{Name: "labels", Usage: "node labels: key=value,key2=value2"},
		&ucli.IntFlag{Name: "raft-voters", Value: cluster.DefaultRaftVoters, Usage: "target number of Raft voters (1..9)"},
		&ucli.BoolFlag{Name: "server", Value: true, Usage: "may become a Raft voter (--server=false: never)"},
		&ucli.StringFlag{Name: "socket-group", EnvVars: []string{"NODEUP_SOCKET_GROUP"},
			Usage: "group (name or ID) whose members may use the node's Unix socket <data-dir>/" + cluster.SocketFile + " without a token, besides the node's user and root"},
		&ucli.BoolFlag{Name: "enable-debug", Usage: "serve Go's profiler at /debug/pprof/ on --http-port (admin token unless --insecure)"},
		&ucli.BoolFlag{Name: "insecure", Usage: "no TLS between nodes, no CA, no tokens: for a laptop only (docs/security.md)"},
		&ucli.StringFlag{Name: "token", EnvVars: []string{"NODEUP_TOKEN"}, Usage: "join token (nodeup1.…) printed by 'nodeup start --head' or made by 'nodeup token create'; needed once, at a node's first join"},
		&ucli.StringFlag{Name: "token-file", Usage: "file holding the join token (instead of --token)"},
		&ucli.StringFlag{Name: "max-working-dir", Usage: "largest working dir a submitted job may upload to this node, in bytes or with a unit (default 100MiB, as Ray's)"},
		&ucli.StringFlag{Name: "worker-log-max-size", Usage: "size each worker or actor process's log file rotates at, in bytes or with a unit (default 100MiB)"},
		&ucli.IntFlag{Name: "worker-log-backups", Value: cluster.DefaultWorkerLogBackups, Usage: "rotated files each worker log keeps besides the current one (0: none)"},
		&ucli.DurationFlag{Name: "worker-log-retention", Value: cluster.DefaultWorkerLogRetention, Usage: "how long an exited worker's log files are kept after their last write"},
		&ucli.StringFlag{Name: "python", Usage: "interpreter for Python jobs' workers (default: /usr/bin/python3 when it imports msgpack and cloudpickle, else python3)"},
	}, append(gpuFlags(), retryFlags()...)...)
}

func joinFlag() ucli.Flag {
	return &ucli.StringSliceFlag{Name: "join", Usage: "peer to join through (host or host:port of its RPC port); repeatable, or comma-separated in NODEUP_JOIN"}
}

func startCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "start",
		Usage:     "run a node in the foreground (--head starts a new cluster)",
		ArgsUsage: " ",
		Flags: withEnv(append(nodeFlags(),
			&ucli.BoolFlag{Name: "head", Usage: "bootstrap a new cluster (a one-voter Raft group) if the data dir has none"},
			joinFlag(),
		)),
		Before: applyConfig,
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("nodeup start takes no arguments (got %q); to join peers use 'nodeup join <peer>'", c.Args().First())
			}
			return runNode(c, c.Bool("head"), c.StringSlice("join"))
		},
	}
}

func joinCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "join",
		Usage:     "run a node in the foreground that joins the cluster through any live member",
		ArgsUsage: "<peer> [<peer>...]",
		Flags:     withEnv(append(nodeFlags(), joinFlag())),
		Before:    applyConfig,
		Action: func(c *ucli.Context) error {
			peers := append(c.Args().Slice(), c.StringSlice("join")...)
			if len(peers) == 0 {
				return errors.New("nodeup join needs at least one peer (host or host:port of a member's RPC port), as arguments, --join, NODEUP_JOIN or join in --config")
			}
			return runNode(c, false, peers)
		},
	}
}

// reservedResources are the resources a node sets itself, which --resources
// may not name, with how to set them instead.
var reservedResources = []struct{ name, how string }{
	{sched.CPU, "set it with --num-cpus"},
	{sched.Memory, "set it with --memory"},
	{sched.ObjectStoreMemory, "set it with --object-store-memory"},
	{sched.GPU, declareGPUs},
	{gpu.MemoryResource, declareGPUs},
}

const declareGPUs = "declare GPUs with --num-gpus N [--gpu-model NAME] [--gpu-memory SIZE], or let the node detect them"

// parseCustomResources reads --resources (TPU-v3=2,FPGA=4 or JSON),
// refusing the resources a node sets itself.
func parseCustomResources(s string) (sched.ResourceSet, error) {
	res, err := sched.ParseResources(s)
	if err != nil {
		return nil, fmt.Errorf("--resources: %w", err)
	}
	for _, r := range reservedResources {
		if _, ok := res[r.name]; ok {
			return nil, fmt.Errorf("--resources %q: %s is not a custom resource; %s", s, r.name, r.how)
		}
	}
	for name := range res {
		if strings.HasPrefix(name, sched.NodeResourcePrefix) {
			return nil, fmt.Errorf("--resources: %q is reserved (every node gets node:<id> itself)", name)
		}
	}
	return res, nil
}

// nodeConfig turns flags into a cluster.Config, rejecting bad values.
func nodeConfig(c *ucli.Context, head bool, peers []string) (cluster.Config, error) {
	cfg := cluster.Config{
		ClusterName: c.String("cluster-name"), Head: head, Join: peers,
		BindAddr: c.String("bind"), AdvertiseAddr: c.String("advertise"),
		Port: c.Int("port"), GossipPort: c.Int("gossip-port"), HTTPPort: c.Int("http-port"),
		NodeName: c.String("node-name"), RaftVoters: c.Int("raft-voters"), Server: c.Bool("server"),
		Version: Version, Logger: slog.Default(), RecordCurrent: true, SocketGroup: c.String("socket-group"), Python: c.String("python"),
		Insecure: c.Bool("insecure"), Token: c.String("token"), EnableDebug: c.Bool("enable-debug"),
	}
	var err error
	if cfg.BindAddr, err = resolveAddr("bind", cfg.BindAddr); err != nil {
		return cfg, err
	}
	if cfg.AdvertiseAddr, err = resolveAddr("advertise", cfg.AdvertiseAddr); err != nil {
		return cfg, err
	}
	if f := c.String("token-file"); f != "" {
		if cfg.Token != "" {
			return cfg, fmt.Errorf("--token-file %s and --token (or NODEUP_TOKEN): give the token once", f)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return cfg, fmt.Errorf("--token-file: %w", err)
		}
		cfg.Token = strings.TrimSpace(string(b))
	}
	if cfg.Insecure && cfg.Token != "" {
		return cfg, errors.New("--insecure with a token: an insecure cluster has no tokens; drop one of them")
	}
	if v := c.Int("raft-voters"); v < 1 {
		return cfg, fmt.Errorf("--raft-voters %d: must be 1..9 (odd numbers tolerate the most failures)", v)
	}
	dir, err := filepath.Abs(c.String("data-dir"))
	if err != nil {
		return cfg, fmt.Errorf("--data-dir %q: %w", c.String("data-dir"), err)
	}
	cfg.DataDir = dir
	res, err := parseCustomResources(c.String("resources"))
	if err != nil {
		return cfg, err
	}
	cpus := sched.QuantityOf(defaultCPUs())
	if s := c.String("num-cpus"); s != "" {
		if cpus, err = sched.ParseQuantity(s); err != nil {
			return cfg, fmt.Errorf("--num-cpus: %w", err)
		}
	}
	res[sched.CPU] = cpus
	mem, err := defaultMemory()
	if s := c.String("memory"); s != "" {
		mem, err = parseBytes(s)
	}
	if err != nil {
		return cfg, fmt.Errorf("--memory: %w", err)
	}
	res[sched.Memory] = sched.QuantityOf(mem)
	cfg.Resources = res
	if cfg.GPUs, err = gpuConfig(c); err != nil {
		return cfg, err
	}
	if s := c.String("object-store-memory"); s != "" {
		if cfg.ObjectStoreMemory, err = parseBytes(s); err != nil {
			return cfg, fmt.Errorf("--object-store-memory: %w", err)
		}
		if cfg.ObjectStoreMemory < 1<<20 {
			return cfg, fmt.Errorf("--object-store-memory %q: must be at least 1MiB", s)
		}
	}
	cfg.ObjectStorePrefault = c.Bool("object-store-prefault")
	if s := c.String("max-working-dir"); s != "" {
		if cfg.MaxWorkingDirBytes, err = parseBytes(s); err != nil || cfg.MaxWorkingDirBytes < 1 {
			return cfg, fmt.Errorf("--max-working-dir %q: want a positive size such as 500MiB (%v)", s, err)
		}
	}
	if s := c.String("worker-log-max-size"); s != "" {
		if cfg.WorkerLogMaxBytes, err = parseBytes(s); err != nil || cfg.WorkerLogMaxBytes < 4096 {
			return cfg, fmt.Errorf("--worker-log-max-size %q: want a size of at least 4KiB such as 100MiB (%v)", s, err)
		}
	}
	if c.IsSet("worker-log-backups") {
		switch b := c.Int("worker-log-backups"); {
		case b < 0:
			return cfg, fmt.Errorf("--worker-log-backups %d: want 0 (none) or more", b)
		case b == 0:
			cfg.WorkerLogBackups = -1 // Config's 0 is the default
		default:
			cfg.WorkerLogBackups = b
		}
	}
	if c.IsSet("worker-log-retention") {
		if d := c.Duration("worker-log-retention"); d <= 0 {
			return cfg, fmt.Errorf("--worker-log-retention %v: want a positive duration such as 24h", d)
		} else {
			cfg.WorkerLogRetention = d
		}
	}
	switch f := c.Float64("object-spill-threshold"); {
	case f == 0:
		cfg.NoObjectSpilling = true
	case f > 0 && f <= 1:
		cfg.ObjectSpillThreshold = f
	default:
		return cfg, fmt.Errorf("--object-spill-threshold %v: must be a fraction in (0, 1], or 0 to turn spilling off", f)
	}
	if cfg.Labels, err = parseLabels(c.String("labels")); err != nil {
		return cfg, fmt.Errorf("--labels: %w", err)
	}
	return cfg, nil
}

func runNode(c *ucli.Context, head bool, peers []string) error {
	cfg, err := nodeConfig(c, head, peers)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	reloader := newSettingsReloader(c)
	defer logHangups(slog.Default(), cfg.DataDir, reloader.reload)()
	retry, err := retryPolicyOf(c)
	if err != nil {
		return err
	}
	n, err := startWithRetry(ctx, cfg, retry, slog.Default())
	if err != nil {
		return err
	}
	if tok := n.NewClusterToken(); tok != "" {
		// Printed once, when the cluster is made; kept 0600 in the data dir.
		fmt.Fprintf(os.Stdout, "New cluster %s. Join other nodes with:\n\n  nodeup join %s --token %s\n\n(the token is also in %s; make more with 'nodeup token create')\n",
			n.ClusterID(), n.RPCAddr(), tok, filepath.Join(cfg.DataDir, cluster.InitialTokenFile))
	}
	reloader.node.Store(n)
	stopNotify := notifySystemd(ctx, n, slog.Default())
	<-ctx.Done()
	stopNotify()
	return n.Shutdown()
}

// logLevelFile, in a node's data dir, holds the log level (debug, info, warn
// or error, optionally with per-component levels: info,raft=warn) a SIGHUP switches the running node to, as Nomad reloads its
// log_level on SIGHUP: `echo debug > <data-dir>/log-level; systemctl reload
// nodeup`.
const logLevelFile = "log-level"

// logHangups keeps SIGHUP (systemd's reload, a closed terminal) from killing
// the node: each one reloads the log level from logLevelFile in dataDir, or
// keeps the current level when there is no such file, then calls reload
// (nil: nothing more), and logs what it did. The returned func stops it.
func logHangups(logger *slog.Logger, dataDir string, reload func(*slog.Logger)) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				reloadLogLevel(logger, filepath.Join(dataDir, logLevelFile))
				if reload != nil {
					reload(logger)
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// reloadLogLevel sets procLevels from the file at path (parseLogLevels'
// spec: "debug" or "info,raft=warn") and logs the outcome; a missing file
// keeps the levels, a bad one is logged (naming the accepted values) and
// keeps them too.
func reloadLogLevel(logger *slog.Logger, path string) {
	was := procLevels.String()
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		logger.Info("SIGHUP received: log level unchanged (write a level such as info or info,raft=warn to the log-level file to change it; flags are read only at start)",
			"level", was, "file", path)
		return
	case err == nil && len(b) > 256:
		err = fmt.Errorf("%d bytes: want one line such as info,raft=warn", len(b))
	}
	var base slog.Level
	var byComp map[string]slog.Level
	if err == nil {
		base, byComp, err = parseLogLevels(string(bytes.TrimSpace(b)))
	}
	if err != nil {
		logger.Warn("SIGHUP received: log level unchanged: cannot read the log-level file",
			"level", was, "file", path, "err", err)
		return
	}
	procLevels.set(base, byComp)
	// Logged at warn so that it shows whatever the new level is.
	logger.Warn("SIGHUP received: log level reloaded", "from", was, "to", procLevels.String(), "file", path)
}

func stopCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "stop",
		Usage: "stop the node running on this machine gracefully (it leaves the cluster)",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "data-dir", Value: defaultDataDir(), EnvVars: []string{"NODEUP_DATA_DIR"}, Usage: "data dir of the node to stop"},
			&ucli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "how long to wait for it to exit"},
		},
		Action: func(c *ucli.Context) error {
			dir := c.String("data-dir")
			pid, err := cluster.ReadDataDirPID(dir)
			if err != nil {
				return fmt.Errorf("data dir %s: %w", dir, err)
			}
			if pid == 0 {
				return fmt.Errorf("no nodeup node is running on data dir %s", dir)
			}
			if err := unix.Kill(pid, unix.SIGTERM); err != nil {
				return fmt.Errorf("signal node (pid %d): %w", pid, err)
			}
			deadline := time.Now().Add(c.Duration("timeout"))
			for time.Now().Before(deadline) {
				if p, _ := cluster.ReadDataDirPID(dir); p == 0 {
					fmt.Fprintf(c.App.Writer, "stopped node (pid %d)\n", pid)
					return nil
				}
				time.Sleep(100 * time.Millisecond)
			}
			return fmt.Errorf("node (pid %d) did not exit within %s", pid, c.Duration("timeout"))
		},
	}
}

// defaultDataDir is /var/lib/nodeup for root, else ~/.nodeup.
func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/nodeup"
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".nodeup")
	}
	return filepath.Join(os.TempDir(), "nodeup")
}

// defaultMemory is 70% of physical RAM in bytes, as Ray's default, or of
// the cgroup v2 memory.max limit when that is lower (cgroup.go).
func defaultMemory() (int64, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, fmt.Errorf("read RAM size: %w", err)
	}
	total := float64(si.Totalram) * float64(si.Unit)
	if lim := processLimits().Memory; lim > 0 {
		total = min(total, float64(lim))
	}
	return int64(total * 0.7), nil
}

// parseBytes reads "1073741824", "8GiB", "500MB", "2G" (G = GiB, as Docker).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult := map[string]int64{"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1e3, "m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9, "t": 1 << 40, "tib": 1 << 40, "tb": 1e12}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || mult == 0 || n < 0 || n > (1<<62)/mult/int64(sched.Unit) {
		return 0, fmt.Errorf("invalid size %q: use bytes (1073741824) or a number with B, KiB, MiB, GiB, TiB, KB, MB, GB, TB", s)
	}
	return n * mult, nil
}

// parseLabels reads key=value,key2=value2.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q: use key=value", item)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}
