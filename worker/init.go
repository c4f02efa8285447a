package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodeup/nodeup/internal/wdpack"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// InitOption configures Init.
type InitOption func(*initConfig)

type initConfig struct {
	address   string
	token     string
	namespace string
	resources sched.ResourceSet
	logger    *slog.Logger
	gpus      *gpuDecl   // EmbeddedGPUs (gpus.go)
	env       RuntimeEnv // JobRuntimeEnv
	noSignals bool       // HandleSignals(false)
	// noLogToDriver is LogToDriver(false) (logtodriver.go).
	noLogToDriver bool
}

// Address connects to the node at host:port (or unix:///path, a node's
// Unix socket) instead of NODEUP_ADDRESS or the node running on this
// machine. A host:port of a secure node needs a Token (TLS); one naming the
// node last started on this machine takes its Unix socket when no token is
// given.
func Address(addr string) InitOption { return func(c *initConfig) { c.address = addr } }

// Token makes the driver present token (as printed by nodeup token create,
// role submit or admin to run work) to the nodes it reaches over TCP, over
// TLS verified against the CA pin the token carries (an error names a
// token for another cluster); without it NODEUP_TOKEN is used. A driver on the node's machine that
// reaches it over its Unix socket (NODEUP_ADDRESS=unix:///path, or the
// node running on this machine) needs none. A node that refuses a call
// says so with an error matching ErrPermissionDenied.
func Token(token string) InitOption { return func(c *initConfig) { c.token = token } }

// EmbeddedResources sets the resources of the embedded single-node cluster
// Init starts when no node is running (default: all CPUs, 70% of RAM), e.g.
// {"CPU": 4, "TPU-v3": 2}.
func EmbeddedResources(r map[string]float64) InitOption {
	return func(c *initConfig) {
		c.resources = sched.ResourceSet{}
		for k, v := range r {
			q, _ := sched.QuantityFromFloat(v)
			c.resources[k] = q
		}
	}
}

// EnvNamespace carries the job's namespace to its worker processes (task
// workers and actors alike).
const EnvNamespace = wire.EnvNamespace

// DefaultNamespace is the namespace of named actors when none is set. (Ray
// gives each job an anonymous namespace by default; here drivers share one,
// so GetActor works across drivers without setting it.)
const DefaultNamespace = "default"

// JobNamespace sets the namespace in which this driver's named actors are
// created and GetActor looks (default DefaultNamespace), as ray.init's
// namespace=.
func JobNamespace(ns string) InitOption { return func(c *initConfig) { c.namespace = ns } }

// JobRuntimeEnv sets the runtime env of the whole job, as ray.init's
// runtime_env=: every task and actor this driver submits, and their
// children, run with its EnvVars and in its WorkingDir unless they
// override them (WithRuntimeEnv; see RuntimeEnv). Given more than once,
// later variables and dirs win. Init uploads the WorkingDir to its node
// and fails with an error naming a bad variable or a dir it could not
// upload. Ignored in a worker process, which runs with the env its node
// started it with.
func JobRuntimeEnv(env RuntimeEnv) InitOption {
	return func(c *initConfig) {
		if env.WorkingDir != "" {
			c.env.WorkingDir = env.WorkingDir
		}
		if len(env.EnvVars) == 0 {
			return
		}
		if c.env.EnvVars == nil {
			c.env.EnvVars = make(map[string]string, len(env.EnvVars))
		}
		maps.Copy(c.env.EnvVars, env.EnvVars)
	}
}

// Logger sets where the SDK logs (default slog.Default()).
func Logger(l *slog.Logger) InitOption { return func(c *initConfig) { c.logger = l } }

// Init connects this program to nodeup, as ray.init: to the node at Address,
// else NODEUP_ADDRESS, else the node running on this machine, else it starts
// an embedded single-node cluster in this process. In a worker process
// (started by a node) Init does not return: it serves tasks until the node
// stops it. Errors name the node that could not be reached. A driver shuts
// down on SIGINT and SIGTERM unless HandleSignals(false) is given, and its
// job ends when it exits without Shutdown (its node watches its process).
func Init(ctx context.Context, opts ...InitOption) error {
	cfg := initConfig{logger: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	currentMu.Lock()
	defer currentMu.Unlock()
	if currentCW != nil {
		return fmt.Errorf("nodeup: Init called twice (call Shutdown first)")
	}
	if err := cfg.env.validate(); err != nil && os.Getenv(wire.EnvWorkerMode) != "1" {
		return fmt.Errorf("nodeup: JobRuntimeEnv: %w", err)
	}
	cw := &coreWorker{logger: cfg.logger, ownerID: randomHex(6), objects: newObjectTable(), pool: rpc.NewPool([]byte{wire.PreambleRPC}, wire.ProtocolVersion, 5*time.Second)}
	cw.ctx, cw.cancel = context.WithCancel(context.Background())
	cw.sub = newSubmitter(cw)
	cw.events = newTaskEvents(cw)
	cw.actors = newActorCaller(cw)
	cw.namespace = cfg.namespace
	if ns := os.Getenv(EnvNamespace); ns != "" && cw.namespace == "" {
		cw.namespace = ns
	}
	if cw.namespace == "" {
		cw.namespace = DefaultNamespace
	}
	if cw.namespace != DefaultNamespace {
		cw.workerEnv = []string{EnvNamespace + "=" + cw.namespace}
	}
	// The token is presented on TCP connections (to other nodes, and to
	// the local node when its socket is not used). A worker process runs
	// the driver's main, so it presents the driver's Token too.
	if cfg.token == "" {
		cfg.token = os.Getenv(wire.EnvToken)
	}
	if err := cw.pool.SetToken(cfg.token); err != nil {
		cw.close()
		return fmt.Errorf("nodeup: Token: %w", err)
	}
	cw.userToken = cfg.token
	cw.pool.SetDialer(cw.dialer.dial)
	if cfg.token != "" {
		secure, err := nodeCredential(cfg.token, "")
		if err != nil {
			cw.close()
			return err
		}
		cw.dialer.secure = secure
	}
	if os.Getenv(wire.EnvWorkerMode) == "1" {
		env, err := workerRuntimeEnv()
		if err != nil {
			fmt.Fprintf(os.Stderr, "nodeup worker: %v\n", err)
			os.Exit(1)
		}
		cw.setEnv(env)
		currentCW = cw
		currentMu.Unlock()
		runWorker(cw) // never returns
	}
	cw.setEnv(cfg.env.EnvVars)
	if err := cw.connect(ctx, cfg); err != nil {
		cw.close()
		return err
	}
	if err := cw.setWorkingDir(ctx, cfg.env.WorkingDir); err != nil {
		cw.close()
		return err
	}
	if !cfg.noSignals {
		cw.stopSignals = handleSignals(cw.logger)
	}
	if !cfg.noLogToDriver {
		cw.startLogStreamer()
	}
	currentCW = cw
	return nil
}

func (cw *coreWorker) connect(ctx context.Context, cfg initConfig) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("nodeup: find own executable: %w", err)
	}
	if cw.binHash, err = fileHash(exe); err != nil {
		return fmt.Errorf("nodeup: hash own executable: %w", err)
	}
	cw.jobID = randomHex(4)
	req := &wire.JobRegisterRequest{JobID: cw.jobID, BinaryHash: cw.binHash, BinaryPath: exe, DriverPID: os.Getpid()}
	var rep wire.JobRegisterReply
	register := func(addr string) error {
		cw.dialer.markNode(addr)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return cw.pool.Call(cctx, addr, wire.MethodJobRegister, req, &rep)
	}
	addr := cfg.address
	if addr == "" {
		addr = os.Getenv("NODEUP_ADDRESS")
	}
	// A node running on this machine, named by its host:port, is reached
	// over its Unix socket unless a token is given: a secure node refuses
	// plaintext TCP, and the socket trusts this user.
	if sock := wire.LocalSocket(addr); sock != "" && cfg.token == "" {
		addr = sock
	}
	switch {
	case addr != "":
		if err := register(addr); err != nil {
			return fmt.Errorf("nodeup: connect to node at %s: %w", addr, err)
		}
	case wire.CurrentSocket() != "" && register(wire.CurrentSocket()) == nil:
		addr = wire.CurrentSocket()
	case wire.CurrentAddress() != "" && register(wire.CurrentAddress()) == nil:
	default:
		addr, err = cw.startEmbedded(ctx, cfg)
		if err != nil {
			return err
		}
		if err := register(addr); err != nil {
			return fmt.Errorf("nodeup: connect to the embedded node: %w", err)
		}
	}
	// The node's TCP address stays its name in everything this process
	// sends; reached over its Unix socket, calls to it take the socket.
	if strings.HasPrefix(addr, rpc.UnixPrefix) {
		cw.pool.SetRoute(rep.NodeAddr, addr)
		if err := cw.useNodeCredential(cfg.token, addr); err != nil {
			return err
		}
	}
	cw.dialer.markNode(rep.NodeAddr)
	cw.nodeAddr, cw.nodeID, cw.nodeName = rep.NodeAddr, rep.NodeID, rep.NodeName
	cw.arena.path = rep.ArenaPath
	if err := cw.useJobToken(rep.JobToken); err != nil {
		return fmt.Errorf("nodeup: node %s: %w", rep.NodeAddr, err)
	}
	if err := cw.setupWorkerTLS(); err != nil {
		return err
	}
	if err := cw.serve(rep.BindIP); err != nil {
		return err
	}
	cw.logger.Debug("connected to nodeup", "node", rep.NodeName, "addr", rep.NodeAddr, "job", cw.jobID)
	go cw.sub.watchNodes()
	return nil
}

// useNodeCredential: without a token, a process whose node answers on
// sock dials other nodes with that node's certificate when it can read it
// (nodeCredential).
func (cw *coreWorker) useNodeCredential(token, sock string) error {
	if token != "" {
		return nil
	}
	secure, err := nodeCredential("", sock)
	if err != nil {
		return err
	}
	cw.dialer.secure = secure
	return nil
}

// runWorker serves tasks for the node that started this process and exits
// when the node goes away.
func runWorker(cw *coreWorker) {
	fatal := func(err error) {
		fmt.Fprintf(os.Stderr, "nodeup worker: %v\n", err)
		os.Exit(1)
	}
	cw.isWorker = true
	cw.jobID = os.Getenv(wire.EnvJobID)
	cw.nodeAddr = os.Getenv(wire.EnvNodeAddr)
	cw.dialer.markNode(cw.nodeAddr)
	if sock := os.Getenv(wire.EnvNodeSocket); strings.HasPrefix(sock, rpc.UnixPrefix) {
		cw.pool.SetRoute(cw.nodeAddr, sock)
		if err := cw.useNodeCredential(os.Getenv(wire.EnvToken), sock); err != nil {
			fatal(err)
		}
	}
	cw.nodeID, cw.nodeName = os.Getenv(wire.EnvNodeID), os.Getenv(wire.EnvNodeName)
	cw.arena.path = os.Getenv(wire.EnvArenaPath)
	// The node started us from its content-addressed cache and says under
	// which hash; hashing the executable here would cost every worker start
	// tens of milliseconds of CPU.
	cw.binHash = os.Getenv(wire.EnvBinaryHash)
	if err := cw.useJobToken(os.Getenv(wire.EnvJobToken)); err != nil {
		fatal(fmt.Errorf("%s: %w", wire.EnvJobToken, err))
	}
	if err := cw.setupWorkerTLS(); err != nil {
		fatal(err)
	}
	if err := cw.serve(os.Getenv(wire.EnvBindIP)); err != nil {
		fatal(err)
	}
	ctx, cancel := context.WithTimeout(cw.ctx, 30*time.Second)
	err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodWorkerRegister, &wire.WorkerRegisterRequest{
		WorkerID: os.Getenv(wire.EnvWorkerID), Addr: cw.addr, PID: os.Getpid()}, nil)
	cancel()
	if err != nil {
		fatal(fmt.Errorf("register with node %s: %w", cw.nodeAddr, err))
	}
	go cw.sub.watchNodes()
	// Exit when the node is gone for good (it also kills us on job end).
	for misses := 0; misses < 3; {
		time.Sleep(2 * time.Second)
		ctx, cancel := context.WithTimeout(cw.ctx, 2*time.Second)
		if cw.pool.Call(ctx, cw.nodeAddr, wire.MethodHello, &wire.Empty{}, &wire.HelloResponse{}) != nil {
			misses++
		} else {
			misses = 0
		}
		cancel()
	}
	fatal(fmt.Errorf("node %s stopped answering", cw.nodeAddr))
}

// Shutdown ends the job: its workers stop, its objects are freed, and an
// embedded node is stopped. Safe to call when not initialised.
func Shutdown() {
	currentMu.Lock()
	cw := currentCW
	currentCW = nil
	currentMu.Unlock()
	if cw == nil {
		return
	}
	if cw.stopSignals != nil {
		cw.stopSignals()
	}
	if cw.logs != nil {
		cw.logs.stop()
	}
	cw.sub.returnAll()
	// The last task events (a driver's tasks' outcomes) go before the job
	// ends.
	fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
	cw.events.flush(fctx)
	fcancel()
	// Stop lease requests still in flight first: the node refuses them once
	// the job has finished, and they must not retry.
	cw.cancel()
	cw.finishJob()
	cw.close()
}

// finishJob tells the cluster the job ended (its node passes it on to every
// node, which stops the job's workers and frees its objects). When this
// process's own node does not answer, the first other node last seen alive
// that answers passes it on instead, so the job ends everywhere.
func (cw *coreWorker) finishJob() {
	req := &wire.JobFinishRequest{JobID: cw.jobID}
	for _, addr := range append([]string{cw.nodeAddr}, cw.sub.knownPeers()...) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := cw.pool.Call(ctx, addr, wire.MethodJobFinish, req, nil)
		cancel()
		if err == nil {
			return
		}
		cw.logger.Warn("tell a node the job finished", "node", addr, "err", err)
	}
}

func (cw *coreWorker) close() {
	cw.cancel()
	if cw.server != nil {
		cw.server.Close()
	}
	if cw.ln != nil {
		cw.ln.Close()
	}
	cw.pool.Close()
	cw.objects.clear()
	cw.arena.close()
	if cw.stopEmbedded != nil {
		cw.stopEmbedded()
	}
}

func fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// workerRuntimeEnv reads the runtime env vars the node started this worker
// process with (wire.EnvRuntimeEnv; nil when unset).
func workerRuntimeEnv() (map[string]string, error) {
	s := os.Getenv(wire.EnvRuntimeEnv)
	if s == "" {
		return nil, nil
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(s), &env); err != nil {
		return nil, fmt.Errorf("%s: want a JSON object of strings: %w", wire.EnvRuntimeEnv, err)
	}
	return env, nil
}

// workingDirUploadTimeout bounds packing and uploading a runtime env's
// working dir (at most a node's --max-working-dir, 100 MiB by default).
const workingDirUploadTimeout = 5 * time.Minute

// setWorkingDir makes dir (else the job's, wire.EnvWorkingDir, when this
// driver runs as a submitted job with a working dir) the working dir of
// the job's runtime env: uploaded to this process's node, and named by its
// ref in the env vars every lease and actor carries.
func (cw *coreWorker) setWorkingDir(ctx context.Context, dir string) error {
	ref := os.Getenv(wire.EnvWorkingDir)
	if dir != "" {
		uctx, cancel := context.WithTimeout(ctx, workingDirUploadTimeout)
		defer cancel()
		var err error
		if ref, err = cw.uploadWorkingDir(uctx, dir); err != nil {
			return fmt.Errorf("nodeup: JobRuntimeEnv: %w", err)
		}
	} else if ref != "" {
		if _, _, err := wire.ParseWorkingDirRef(ref); err != nil {
			return fmt.Errorf("nodeup: %s: %w", wire.EnvWorkingDir, err)
		}
	}
	if ref == "" {
		return nil
	}
	cw.setEnv(cw.envFor(map[string]string{wire.EnvWorkingDir: ref}))
	return nil
}

// uploadWorkingDir packs dir and uploads to this process's node the chunks
// it lacks and the manifest (wdpack.Upload), and returns the dir's ref,
// held by that node; a dir this process uploaded before is not packed
// again (later edits to it are not seen). Errors name dir.
func (cw *coreWorker) uploadWorkingDir(ctx context.Context, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("working dir %s: %w", dir, err)
	}
	cw.wdMu.Lock()
	defer cw.wdMu.Unlock() // one upload at a time: a second of the same dir waits for the first's ref
	if ref, ok := cw.workingDirs[abs]; ok {
		return ref, nil
	}
	call := func(ctx context.Context, method string, req, resp any) error {
		return cw.pool.Call(ctx, cw.nodeAddr, method, req, resp)
	}
	res, err := wdpack.Upload(ctx, call, abs, nil, true)
	if err != nil {
		return "", fmt.Errorf("working dir %s: %w", dir, err)
	}
	cw.logger.Debug("uploaded working dir", "dir", abs, "bytes", res.Manifest.Size, "chunks", len(res.Manifest.Chunks), "uploaded", res.Uploaded)
	ref := wire.FormatWorkingDirRef(res.Manifest.Hash(), cw.nodeAddr)
	if cw.workingDirs == nil {
		cw.workingDirs = map[string]string{}
	}
	cw.workingDirs[abs] = ref
	return ref, nil
}
