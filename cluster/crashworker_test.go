package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// fakeWorkerVar, among an actor's env vars, makes this test binary, when a
// node starts it as a worker process, a fake worker that registers with
// its node and dies in its actor's constructor.
const fakeWorkerVar = "CLUSTER_TEST_FAKE_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(wire.EnvWorkerMode) == "1" && os.Getenv(fakeWorkerVar) == "crash-in-constructor" {
		os.Exit(crashingWorker())
	}
	os.Exit(m.Run())
}

// crashingWorker serves Actor.Construct by exiting with status 3, as a
// worker process whose constructor brings it down.
func crashingWorker() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 2
	}
	s := rpc.NewServer(slog.New(slog.DiscardHandler), wire.ProtocolVersion)
	rpc.Handle(s, wire.MethodActorConstruct, func(ctx context.Context, r *wire.ActorConstructRequest) (*wire.ActorConstructReply, error) {
		os.Exit(3)
		return nil, nil
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				var pre [1]byte // the node's connection preamble
				if _, err := io.ReadFull(c, pre[:]); err != nil {
					c.Close()
					return
				}
				s.ServeConn(c)
			}()
		}
	}()
	pool := rpc.NewPool([]byte{wire.PreambleRPC}, wire.ProtocolVersion, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &wire.WorkerRegisterRequest{WorkerID: os.Getenv(wire.EnvWorkerID), Addr: ln.Addr().String(), PID: os.Getpid()}
	node := os.Getenv(wire.EnvNodeAddr)
	if sock := os.Getenv(wire.EnvNodeSocket); sock != "" {
		node = sock // a secure node takes its workers' calls on its Unix socket
	}
	if err := pool.Call(ctx, node, wire.MethodWorkerRegister, req, nil); err != nil {
		return 2
	}
	time.Sleep(time.Minute) // the constructor call ends it first
	return 1
}

// A worker process that dies while it runs its actor's constructor (the
// actor's creation task) is worker_crashed to the leader (the SDK's
// ErrWorkerCrashed), not the worker_failed of a worker that never started,
// and the actor's resources are free again.
func TestActorConstructorCrashIsWorkerCrashed(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	n := nodes[0]
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	hash := hex.EncodeToString(sum[:])
	if err := n.workers.cacheLocal(self, hash); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	registerTestJob(t, ctx, n, "c0ffee02") // its workers get the job's token
	_, err = n.actorStart(ctx, &wire.ActorStartRequest{ActorID: "c0ffee01", JobID: "c0ffee02", Class: "C", Constructor: "C",
		Resources: sched.ResourceSet{sched.CPU: sched.QuantityOf(1)}, MaxConcurrency: 1, BinaryHash: hash,
		EnvVars: map[string]string{fakeWorkerVar: "crash-in-constructor"}})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeWorkerCrashed || !strings.Contains(re.Message, "c0ffee01") {
		t.Fatalf("an actor whose worker dies in its constructor: %v, want worker_crashed naming the actor", err)
	}
	testutil.Until(t, 10*time.Second, "the actor's CPU free again", func() error {
		if got, want := n.local.available()[sched.CPU], n.local.totals()[sched.CPU]; got != want {
			return fmt.Errorf("CPU free %s of %s", got, want)
		}
		return nil
	})
}
