package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// ownAddr returns the core worker address of the process running it.
var ownAddr = Register0(func(ctx context.Context) (string, error) {
	cw, err := current()
	if err != nil {
		return "", err
	}
	return cw.addr, nil
})

// callCoreWorker dials a core worker's port as a stranger would, presenting
// token ("" for none), and makes one call.
func callCoreWorker(ctx context.Context, addr, token, method string, req, resp any) error {
	var opts []rpc.DialOption
	if token != "" {
		opts = append(opts, rpc.WithToken(token))
	}
	c, err := rpc.Dial(ctx, "tcp", addr, []byte{wire.PreambleRPC}, wire.ProtocolVersion, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, method, req, resp)
}

// wantDenied fails unless err is permission_denied naming method and want.
func wantDenied(t *testing.T, what string, err error, method, want string) {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodePermissionDenied || !strings.Contains(re.Message, method) || !strings.Contains(re.Message, want) {
		t.Fatalf("%s: got %v, want permission_denied naming %s and %q", what, err, method, want)
	}
}

// A core worker's port (issue 15, item 4) takes only connections presenting
// a job token. Before, anyone reaching it could push a task (run any
// registered function with their arguments) or read any object.
func TestCoreWorkerPortNeedsAJobToken(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	drv, err := current()
	if err != nil {
		t.Fatal(err)
	}
	if drv.jobToken == "" {
		t.Fatal("the driver got no job token from a secure cluster")
	}
	// The job's own traffic works: a task, and a worker reading the
	// driver's object (Object.Get from the worker to the driver).
	big, err := Put(ctx, strings.Repeat("x", 1000))
	if err != nil {
		t.Fatal(err)
	}
	wAddr, err := ownAddr.Remote(ctx).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := strLen.Remote(ctx, []Ref[string]{big}).Get(ctx); err != nil || n != 1000 {
		t.Fatalf("a worker reading the driver's object: %d, %v", n, err)
	}
	push := &wire.PushTaskRequest{LeaseID: 1, Spec: wire.TaskSpec{TaskID: "stranger-1", JobID: drv.jobID, Function: square.name, NumReturns: 1}}
	get := &wire.ObjectGetRequest{ID: big.ID()}

	// A stranger without a token.
	wantDenied(t, "Task.Push without a token", callCoreWorker(ctx, wAddr, "", wire.MethodPushTask, push, &wire.PushTaskReply{}), "Task.Push", "no token presented")
	wantDenied(t, "Object.Get without a token", callCoreWorker(ctx, drv.addr, "", wire.MethodObjectGet, get, &wire.ObjectGetReply{}), "Object.Get", "anonymous")
	// A token that is not the cluster's.
	wantDenied(t, "Object.Get with a made-up token", callCoreWorker(ctx, drv.addr, "nodeup1.0badc0de.x.y", wire.MethodObjectGet, get, &wire.ObjectGetReply{}), "Object.Get", "0badc0de")

	// Another job's token: actor calls and object reads, no code.
	pool := rpc.NewPool([]byte{wire.PreambleRPC}, wire.ProtocolVersion, 5*time.Second)
	defer pool.Close()
	pool.SetRoute(nodes[0].RPCAddr(), nodes[0].SocketAddr())
	var other wire.TokenCreateResponse
	if err := pool.Call(ctx, nodes[0].RPCAddr(), wire.MethodTokenCreate, &wire.TokenCreateRequest{Role: "submit", Job: "otherjob"}, &other); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, "Task.Push with another job's token", callCoreWorker(ctx, wAddr, other.Token, wire.MethodPushTask, push, &wire.PushTaskReply{}), "Task.Push", "this job's token")
	var rep wire.ObjectGetReply
	if err := callCoreWorker(ctx, drv.addr, other.Token, wire.MethodObjectGet, get, &rep); err != nil || len(rep.Value) == 0 {
		t.Fatalf("Object.Get with another live job's token: %+v, %v; want the value", rep, err)
	}
	// A plain submit token is no job token.
	var plain wire.TokenCreateResponse
	if err := pool.Call(ctx, nodes[0].RPCAddr(), wire.MethodTokenCreate, &wire.TokenCreateRequest{Role: "submit"}, &plain); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, "Object.Get with a plain submit token", callCoreWorker(ctx, drv.addr, plain.Token, wire.MethodObjectGet, get, &rep), "Object.Get", "not a job token")

	// The job's own token may push.
	var prep wire.PushTaskReply
	if err := callCoreWorker(ctx, wAddr, drv.jobToken, wire.MethodPushTask, push, &prep); errors.Is(err, ErrPermissionDenied) || isDenied(err) {
		t.Fatalf("Task.Push with the job's token: %v, want it past authentication", err)
	}

	// When the job ends its token is revoked: the next job's driver refuses it.
	old := drv.jobToken
	Shutdown()
	if err := Init(context.Background(), Address(nodes[0].SocketAddr()), Logger(testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	drv2, err := current()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 20*time.Second, "the ended job's token refused", func() error {
		err := callCoreWorker(ctx, drv2.addr, old, wire.MethodObjectGet, &wire.ObjectGetRequest{ID: "x"}, &wire.ObjectGetReply{})
		if isDenied(err) && strings.Contains(err.Error(), "unknown to this cluster") {
			return nil
		}
		return errors.New("Object.Get with the ended job's token: " + errText(err))
	})
}

// strLen reads a string through its ref: from its owner when small.
var strLen = Register1(func(ctx context.Context, refs []Ref[string]) (int, error) {
	s, err := refs[0].Get(ctx)
	return len(s), err
})

func isDenied(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == rpc.CodePermissionDenied
}

func errText(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}
