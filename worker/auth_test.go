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

// Over TCP, a driver without a token is refused with ErrPermissionDenied
// naming the method and role; with a submit token (Token) it runs tasks.
func TestDriverTokenOverTCP(t *testing.T) {
	tok, err := pki.NewToken("sha256:" + strings.Repeat("cd", 32))
	if err != nil {
		t.Fatal(err)
	}
	nodes := clusterNodes(t, enforceRoles(map[string]pki.Role{tok.String(): pki.RoleSubmit}))
	t.Setenv("NODEUP_TOKEN", "")
	err = Init(context.Background(), Address(nodes[0].RPCAddr()), Logger(testutil.Logger()))
	if err == nil {
		Shutdown()
		t.Fatal("Init without a token succeeded on a node enforcing roles")
	}
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "Job.Register needs role submit") {
		t.Fatalf("Init without a token: %v, want ErrPermissionDenied naming Job.Register and submit", err)
	}
	if err := Init(context.Background(), Address(nodes[0].RPCAddr()), Token(tok.String()), Logger(testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(Shutdown)
	ctx := ctxT(t)
	if got, err := square.Remote(ctx, 6).Get(ctx); err != nil || got != 36 {
		t.Fatalf("square(6) with a submit token: %d, %v", got, err)
	}
}

// clusterNodes starts one node configured by configure, without a driver.
func clusterNodes(t *testing.T, configure func(int, *cluster.Config)) []*cluster.Node {
	t.Helper()
	return clustertest.Start(t, 1, configure)
}
