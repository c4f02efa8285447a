package cluster

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/nodeup/nodeup/wire"
)

// workerHost is all the worker pool asks of its node: calls to other nodes
// and to workers, tracked goroutines, the node's lifetime, the local
// scheduler's leases, and what an actor's end means to the rest of the node.
// *Node implements it; workerpool_test.go gives the pool a fake, with a fake
// process starter, so its start, reuse and stop rules are tested without
// processes or a node.
type workerHost interface {
	// callNode calls method on the node at addr.
	callNode(ctx context.Context, addr, method string, req, resp any) error
	// callWorker calls method on this node's worker process at addr
	// (plaintext on this machine: worker processes speak no TLS).
	callWorker(ctx context.Context, addr, method string, req, resp any) error
	// goFunc runs f as a goroutine the node tracks (false: the node is
	// stopping and f did not start).
	goFunc(name string, f func()) bool
	// lifetime ends when the node stops.
	lifetime() context.Context
	log() *slog.Logger
	// releaseWorkerLeases returns to the local scheduler every lease the
	// worker held and says how many there were.
	releaseWorkerLeases(workerID string) int
	// releaseLease returns one lease to the local scheduler.
	releaseLease(id uint64)
	// workerLeases says how many leases the worker holds now.
	workerLeases(workerID string) int
	// actorJobEnded drops an actor incarnation's objects here and, unless
	// the node is stopping, tells the other nodes its job ended.
	actorJobEnded(job string)
	// reportActorDied tells the leader an actor incarnation is gone;
	// it may block while the leader changes.
	reportActorDied(req *wire.ActorDiedRequest)
	// workingDir returns the dir a runtime env's working dir ref
	// (wire.EnvWorkingDir) is unpacked to here, fetching and unpacking it
	// first, pinned until release is called once (workingdir.go).
	workingDir(ctx context.Context, ref string) (dir string, release func(), err error)
}

var _ workerHost = (*Node)(nil)

// workerPoolConfig is what the pool needs to know of its node, fixed once
// the node has started.
type workerPoolConfig struct {
	binDir string // the content-addressed cache of job binaries
	logDir string // where each worker process's output goes
	// logMaxBytes, logBackups and logRetention rotate and sweep the
	// worker logs (0: DefaultWorkerLogMaxBytes, …; workerlogs.go).
	logMaxBytes  int64
	logBackups   int
	logRetention time.Duration
	selfAddr     string // the node's RPC address: a binary "on" it is never fetched
	nodeName     string // for the causes of actor deaths
	// nodeEnv are the node's KEY=VALUE entries every worker gets last
	// (node address, ID, name, bind IP, arena path).
	nodeEnv []string
	// spawn starts a process (nil: execSpawn).
	spawn spawnFunc
	// jobToken returns the job token a worker process of job gets
	// (EnvJobToken), "" for none; an error fails the start. nil: none.
	jobToken func(ctx context.Context, job string) (string, error)
	// python is the interpreter of Python jobs' workers ("": found on
	// first use by defaultPython).
	python string
	// pythonPath returns the directory holding the nodeup Python package
	// that Python workers import (nil: pyembed.Path, extracted from this
	// binary).
	pythonPath func() (string, error)
}

// process is a started worker process, as the pool sees it.
type process interface {
	Pid() int
	// Wait blocks until the process exits and returns why it did.
	Wait() error
	Kill() error
}

// spawnFunc starts the program argv[0] with arguments argv[1:] and env in
// dir ("": the node's own), its output to out.
type spawnFunc func(argv []string, env []string, dir string, out *os.File) (process, error)

// execSpawn starts a real process.
func execSpawn(argv []string, env []string, dir string, out *os.File) (process, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return execProcess{cmd}, nil
}

type execProcess struct{ cmd *exec.Cmd }

func (p execProcess) Pid() int    { return p.cmd.Process.Pid }
func (p execProcess) Wait() error { return p.cmd.Wait() }
func (p execProcess) Kill() error { return p.cmd.Process.Kill() }

func (n *Node) goFunc(name string, f func()) bool { return n.group.goFunc(name, f) }

func (n *Node) callWorker(ctx context.Context, addr, method string, req, resp any) error {
	return n.localPool.Call(ctx, addr, method, req, resp)
}

func (n *Node) releaseWorkerLeases(workerID string) int { return n.local.releaseWorker(workerID) }

func (n *Node) releaseLease(id uint64) { n.local.release(id) }

func (n *Node) workerLeases(workerID string) int { return n.local.workerLeases(workerID) }

func (n *Node) actorJobEnded(job string) {
	n.objects.DropPrefix(job + "/")
	if n.ctx.Err() != nil {
		return // node shutdown: the peers learn it from gossip
	}
	for _, addr := range n.peerAddrs() {
		if addr != n.rpcAddr {
			n.notifyJobFinished(n.ctx, addr, job)
		}
	}
}

// workerPoolConfig is the pool's view of this node; the object store is
// open by now, so the arena path is known.
func (n *Node) workerPoolConfig() workerPoolConfig {
	host, _ := splitHost(n.rpcAddr)
	return workerPoolConfig{
		binDir: n.dir.file("bin"), logDir: n.dir.file("logs"), selfAddr: n.rpcAddr, nodeName: n.cfg.NodeName,
		nodeEnv: []string{wire.EnvNodeAddr + "=" + n.rpcAddr, wire.EnvBindIP + "=" + host, wire.EnvNodeID + "=" + n.id.NodeID,
			wire.EnvNodeName + "=" + n.cfg.NodeName, wire.EnvArenaPath + "=" + n.objects.Path()},
		python:      n.cfg.Python,
		jobToken:    n.jobTokenFor,
		logMaxBytes: n.cfg.WorkerLogMaxBytes, logBackups: n.cfg.WorkerLogBackups, logRetention: n.cfg.WorkerLogRetention,
	}
}
