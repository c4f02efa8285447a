package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// enforceRoles makes a node check wire.MethodRoles, knowing tokens.
func enforceRoles(tokens map[string]pki.Role) func(int, *cluster.Config) {
	return func(_ int, cfg *cluster.Config) {
		cfg.SetTokenAuthority(func(token string, _ time.Time) (pki.Role, error) {
			if r, ok := tokens[token]; ok {
				return r, nil
			}
			return "", fmt.Errorf("token unknown")
		})
	}
}

// On a node enforcing roles, a driver on its Unix socket runs tasks with
// no token: it and the worker processes the node starts (which get the
// socket in their environment) are the local principal. Had the workers
// registered over TCP they would be anonymous and refused.
func TestDriverAndWorkersOverUnixSocket(t *testing.T) {
	nodes := clusterNodes(t, enforceRoles(nil))
	if err := Init(context.Background(), Address(nodes[0].SocketAddr()), Logger(testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(Shutdown)
	ctx := ctxT(t)
	if got, err := square.Remote(ctx, 7).Get(ctx); err != nil || got != 49 {
		t.Fatalf("square(7) over the Unix socket: %d, %v", got, err)
	}
}

// Over TCP, on a secure node (the tokens in Raft), a driver without a
// token is refused with ErrPermissionDenied naming the method and role and
// saying the node requires TLS; with a submit token (Token) it dials TLS
// pinned to the token's CA and runs tasks.
func TestDriverTokenOverTCP(t *testing.T) {
	nodes := clusterNodes(t, nil)
	tok := createToken(t, nodes[0], pki.RoleSubmit)
	t.Setenv("NODEUP_TOKEN", "")
	err := Init(context.Background(), Address(nodes[0].RPCAddr()), Logger(testutil.Logger()))
	if err == nil {
		Shutdown()
		t.Fatal("Init without a token succeeded on a node enforcing roles")
	}
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "Job.Register needs role submit") ||
		!strings.Contains(err.Error(), "this node requires TLS") {
		t.Fatalf("Init without a token: %v, want ErrPermissionDenied naming Job.Register and submit, and TLS", err)
	}
	if err := Init(context.Background(), Address(nodes[0].RPCAddr()), Token(tok), Logger(testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(Shutdown)
	ctx := ctxT(t)
	if got, err := square.Remote(ctx, 6).Get(ctx); err != nil || got != 36 {
		t.Fatalf("square(6) with a submit token: %d, %v", got, err)
	}
}

// createToken makes a token of role on nd over its Unix socket (the local
// principal may), as nodeup token create.
func createToken(t *testing.T, nd *cluster.Node, role pki.Role) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var resp wire.TokenCreateResponse
	testutil.Until(t, 20*time.Second, "a "+string(role)+" token", func() error {
		c, err := rpc.Dial(ctx, "unix", strings.TrimPrefix(nd.SocketAddr(), rpc.UnixPrefix), []byte{wire.PreambleRPC}, wire.ProtocolVersion)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Call(ctx, wire.MethodTokenCreate, &wire.TokenCreateRequest{Role: string(role), TTLNanos: int64(time.Hour)}, &resp)
	})
	return resp.Token
}

// clusterNodes starts one node configured by configure, without a driver.
func clusterNodes(t *testing.T, configure func(int, *cluster.Config)) []*cluster.Node {
	t.Helper()
	return clustertest.Start(t, 1, configure)
}
