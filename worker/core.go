package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// coreWorker is the per-process runtime (Ray's CoreWorker): it owns the
// objects this process creates, submits tasks through worker leases, and in
// a worker process runs the tasks pushed to it.
type coreWorker struct {
	logger *slog.Logger
	// dialer is the pool's: TLS to nodes' ports with this process's
	// credential (nodedial.go), plain to everything else.
	dialer    nodeDialer
	isWorker  bool
	jobID     string
	namespace string // for named actors: JobNamespace, default "default"
	// workerEnv is the environment this job's task worker processes get
	// (the namespace, unless the default), sent with every lease request.
	// Set once in Init.
	workerEnv []string
	ownerID   string // unique per process: prefixes task and object IDs
	binHash   string
	// stopSignals uninstalls the driver's SIGINT/SIGTERM handler
	// (signals.go); nil when none was installed.
	stopSignals func()
	// logs streams the job's worker output to stdout (LogToDriver); nil
	// in a worker process or with LogToDriver(false).
	logs *logStreamer
	// envVars are this process's effective runtime env vars (the job's in
	// a driver, the node-given ones in a worker), which the work it submits
	// inherits. Set once in Init.
	envVars map[string]string
	// workingDirs are the refs of the working dirs this process uploaded
	// (uploadWorkingDir), by absolute path: each dir is packed once per
	// process, as Ray packs a working_dir once per job.
	wdMu        sync.Mutex
	workingDirs map[string]string

	// jobToken is the job's token (JobRegisterReply.JobToken, or
	// EnvJobToken in a worker process), presented on every connection
	// this process opens and required of every connection to its port
	// (jobauth.go); "" on an --insecure cluster, where the port is open.
	jobToken string
	// userToken is the token the program gave (Token, NODEUP_TOKEN): it
	// is presented to this process's own node, for which it may hold more
	// than the job token's role.
	userToken string

	nodeAddr string // the local node's RPC address
	nodeID   string
	nodeName string
	addr     string // this process's RPC address (owner address)

	pool   *rpc.Pool
	server *rpc.Server
	ln     net.Listener
	// tls is this process's TLS with other core workers (workertls.go);
	// nil on an --insecure cluster.
	tls     *workerTLS
	objects *objectTable
	sub     *submitter
	events  *taskEvents                   // task state changes for the node (taskevents.go); nil in tests' bare core workers
	actors  *actorCaller                  // method calls this process makes
	actor   atomic.Pointer[actorInstance] // in an actor's worker: the actor it runs
	counter atomic.Uint64
	arena   arena
	// freeOnce hands objects the deletes of freed stored copies
	// (refcount.go), which frees batches and sends.
	freeOnce sync.Once
	// storedSinceGC and collecting pace the garbage collector by the
	// store bytes this process came to own (noteStored).
	storedSinceGC atomic.Int64
	collecting    atomic.Bool
	frees         batchQueue      // Obj.Free per node
	borrows       borrowTable     // objects of other processes this one holds refs to
	refRemoved    refRemovedQueue // Object.RefRemoved per owner
	gcPending     atomic.Bool     // collectSoon's collection is scheduled
	// stopEmbedded stops the node Init started in this process (nil when
	// it connected to a running one).
	stopEmbedded func()

	ctx    context.Context
	cancel context.CancelFunc
}

var (
	currentMu sync.RWMutex
	currentCW *coreWorker
)

func current() (*coreWorker, error) {
	currentMu.RLock()
	defer currentMu.RUnlock()
	if currentCW == nil {
		return nil, ErrNotInitialized
	}
	return currentCW, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (cw *coreWorker) newTaskID() string {
	return cw.ownerID + "-" + strconv.FormatUint(cw.counter.Add(1), 36)
}

func (cw *coreWorker) newObjectID(kind string) string {
	return cw.ownerID + "-" + kind + strconv.FormatUint(cw.counter.Add(1), 36)
}

func returnID(taskID string, i int) string { return taskID + "." + strconv.Itoa(i) }

// serve starts this process's RPC server on ip:0.
func (cw *coreWorker) serve(ip string) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return fmt.Errorf("listen for object and task RPCs on %s: %w", ip, err)
	}
	cw.ln = ln
	cw.addr = ln.Addr().String()
	if host, _, err := net.SplitHostPort(cw.addr); err == nil {
		cw.dialer.selfHost.Store(&host)
	}
	cw.server = rpc.NewServer(cw.logger.With("component", "rpc"), wire.ProtocolVersion)
	if cw.jobToken != "" {
		cw.server.SetAuth(newJobAuth(cw, cw.jobToken).auth())
	}
	cw.registerMethods(cw.server)
	go func() { _ = cw.server.Serve(&sniffListener{Listener: ln, tls: cw.tls}) }()
	return nil
}

// registerMethods registers the core worker's methods on s: object gets
// for every process, task and actor execution for worker processes. Each
// has a role in wire.MethodRoles (TestCoreWorkerMethodsHaveRoles).
func (cw *coreWorker) registerMethods(s *rpc.Server) {
	rpc.Handle(s, wire.MethodObjectGet, cw.handleObjectGet)
	rpc.Handle(s, wire.MethodObjectGetMany, cw.handleObjectGetMany)
	rpc.Handle(s, wire.MethodObjectRefRemoved, cw.handleRefRemoved)
	rpc.Handle(s, wire.MethodObjectBorrowed, cw.handleBorrowed)
	rpc.Handle(s, wire.MethodObjectRecover, cw.handleObjectRecover)
	rpc.Handle(s, wire.MethodObjectRefs, cw.handleObjectRefs)
	rpc.Handle(s, wire.MethodOwnerCancel, cw.handleOwnerCancel)
	if cw.isWorker {
		rpc.Handle(s, wire.MethodPushTask, cw.handlePushTask)
		rpc.Handle(s, wire.MethodLeaseRevoke, cw.handleLeaseRevoke)
		rpc.Handle(s, wire.MethodTaskCancel, cw.handleTaskCancel)
		rpc.Handle(s, wire.MethodActorConstruct, cw.handleActorConstruct)
		rpc.Handle(s, wire.MethodActorCall, cw.handleActorCall)
	}
}

// useJobToken makes this process present the job token tok on every
// connection it opens from now on, except to its own node when the
// program gave a token of its own; "" changes nothing. Call it before
// serve.
func (cw *coreWorker) useJobToken(tok string) error {
	if tok == "" {
		return nil
	}
	if len(tok) > rpc.MaxTokenSize {
		return fmt.Errorf("job token of %d bytes: the most a hello carries is %d", len(tok), rpc.MaxTokenSize)
	}
	cw.jobToken = tok
	user, node := cw.userToken, cw.nodeAddr
	cw.pool.SetTokenFunc(func(addr string) string {
		if addr == node && user != "" {
			return user
		}
		return tok
	})
	return nil
}

// preambleConn consumes and checks the one-byte protocol preamble that
// rpc.Dial and rpc.Pool clients send (node ports multiplex on it; ours
// only speaks RPC) before its first Read, on the server goroutine serving
// it, so that a peer that sends nothing delays no other connection (the
// server's idle timeout and connection cap apply to it as to any).
type preambleConn struct {
	net.Conn
	checked bool // only the server's read loop reads
}

func (c *preambleConn) Read(p []byte) (int, error) {
	if !c.checked {
		var b [1]byte
		if _, err := io.ReadFull(c.Conn, b[:]); err != nil {
			return 0, err
		}
		if b[0] != wire.PreambleRPC {
			return 0, fmt.Errorf("protocol preamble byte 0x%02x, want 0x%02x", b[0], wire.PreambleRPC)
		}
		c.checked = true
	}
	return c.Conn.Read(p)
}

// getValue returns an object's msgpack value, waiting for it: from this
// process's table, else fetched from its owner (see prefetch). A large
// object's value is a view of the node's arena, valid until release is
// called (readLarge); release is never nil.
func (cw *coreWorker) getValue(ctx context.Context, id, owner string) (b []byte, release func(), err error) {
	b, release, err = cw.getValueView(ctx, id, owner)
	if release == nil {
		release = func() {}
	}
	return b, release, err
}

func (cw *coreWorker) getValueView(ctx context.Context, id, owner string) ([]byte, func(), error) {
	o := cw.objects.get(id)
	if o == nil {
		if owner == cw.addr || owner == "" {
			if why := cw.objects.freedReason(id); why != "" {
				return nil, nil, &ObjectFreedError{ObjectID: id, Owner: cw.addr, Reason: why}
			}
			return nil, nil, &ObjectLostError{ObjectID: id, Owner: cw.addr, Reason: "this process owns no object with that ID"}
		}
		cw.prefetch(1, func(int) (string, string) { return id, owner })
		if o = cw.objects.get(id); o == nil {
			return nil, nil, &ObjectLostError{ObjectID: id, Reason: "dropped while being fetched (the job ended)"}
		}
	}
	if !o.ready() {
		unblock := cw.blocked(ctx)
		err := o.wait(ctx)
		unblock()
		if err != nil {
			return nil, nil, fmt.Errorf("get %s: %w", id, err)
		}
	}
	if o.loc != nil && o.err == nil {
		b, release, err := cw.readLarge(ctx, o.loc)
		switch {
		case err == nil:
		case owner == cw.addr || owner == "":
			// Ours, and its copy is gone: rebuilt from its lineage.
			return cw.lostRead(ctx, id, o.loc, err)
		default:
			// Borrowed: its owner rebuilds it.
			return cw.recoverBorrowed(ctx, id, owner, o.loc, err)
		}
		return b, release, err
	}
	return o.value, nil, o.err
}

// handleObjectGet serves a borrower's Get of an object this process owns.
func (cw *coreWorker) handleObjectGet(ctx context.Context, req *wire.ObjectGetRequest) (*wire.ObjectGetReply, error) {
	o := cw.objects.get(req.ID)
	if o == nil {
		rep := cw.unknownReply(req.ID)
		return &rep, nil
	}
	if req.WaitMillis > 0 {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(req.WaitMillis)*time.Millisecond)
		_ = o.wait(wctx)
		cancel()
	}
	if !o.ready() {
		return &wire.ObjectGetReply{NotReady: true}, nil
	}
	rep := o.reply()
	return &rep, nil
}

// unknownToOwner is an owner's Lost reason for an object it does not know.
const unknownToOwner = "its owner does not know it (freed, or never created)"

// unknownReply answers a borrower's get of an object not in the table:
// freed (Freed, with why) or unknown.
func (cw *coreWorker) unknownReply(id string) wire.ObjectGetReply {
	if why := cw.objects.freedReason(id); why != "" {
		return wire.ObjectGetReply{Lost: why, Freed: true}
	}
	return wire.ObjectGetReply{Lost: unknownToOwner}
}

// reply is a ready object as Object.Get and Object.GetMany answer it.
func (o *object) reply() wire.ObjectGetReply {
	rep := wire.ObjectGetReply{Value: o.value, Loc: o.loc}
	if o.err != nil {
		rep.Error, rep.TaskName = failureOf(o.err)
	}
	return rep
}

// failureOf flattens a stored error for the wire.
func failureOf(err error) (*wire.TaskFailure, string) {
	var te *TaskError
	if errors.As(err, &te) {
		return &wire.TaskFailure{Message: te.Message, Stack: te.Stack, Panic: te.Panic, NodeID: te.NodeID, NodeName: te.NodeName, PID: te.PID}, te.TaskName
	}
	return &wire.TaskFailure{Message: err.Error()}, ""
}

func taskErrorFrom(name string, f *wire.TaskFailure) *TaskError {
	return &TaskError{TaskName: name, NodeID: f.NodeID, NodeName: f.NodeName, PID: f.PID, Message: f.Message, Panic: f.Panic, Stack: f.Stack}
}

// setEnv records the process's effective runtime env vars (Init only).
func (cw *coreWorker) setEnv(vars map[string]string) {
	cw.envVars = nil
	if len(vars) > 0 {
		cw.envVars = maps.Clone(vars)
	}
}

// envFor is the effective runtime env of work submitted from this process
// with its own vars: this process's env updated with own (Ray's dict
// update). Without own vars it is the process's, allocating nothing.
func (cw *coreWorker) envFor(own map[string]string) map[string]string {
	if len(own) == 0 {
		return cw.envVars
	}
	m := maps.Clone(cw.envVars)
	if m == nil {
		m = make(map[string]string, len(own))
	}
	maps.Copy(m, own)
	return m
}
