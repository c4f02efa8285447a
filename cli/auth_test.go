package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// nodeup status against a secure node (tokens in Raft): over TCP it is
// refused without a token (naming the method and role, and that the node
// requires TLS) and answered with a read token from --token or
// --token-file, over TLS pinned to the token's CA; over the node's Unix
// socket it needs no token. A token of another cluster fails the pin.
func TestStatusTokenAndSocket(t *testing.T) {
	nd := clustertest.Start(t, 1, nil)[0]
	t.Setenv("NODEUP_TOKEN", "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var made wire.TokenCreateResponse
	testutil.Until(t, 20*time.Second, "a read token", func() error {
		c, err := rpc.Dial(ctx, "unix", strings.TrimPrefix(nd.SocketAddr(), rpc.UnixPrefix), []byte{wire.PreambleRPC}, wire.ProtocolVersion)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Call(ctx, wire.MethodTokenCreate, &wire.TokenCreateRequest{Role: "read", TTLNanos: int64(time.Hour)}, &made)
	})
	tok, err := pki.ParseToken(made.Token)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tok.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	status := func(args ...string) (string, error) {
		app := App()
		var out bytes.Buffer
		app.Writer, app.ErrWriter = &out, &out
		err := app.RunContext(context.Background(), append([]string{"nodeup", "status"}, args...))
		return out.String(), err
	}
	_, err = status("--address", nd.RPCAddr())
	if err == nil || !strings.Contains(err.Error(), "Cluster.Status needs role read") || !strings.Contains(err.Error(), "permission_denied") ||
		!strings.Contains(err.Error(), "this node requires TLS") {
		t.Fatalf("status over TCP without a token: %v, want permission_denied naming Cluster.Status and read, and TLS", err)
	}
	other, _ := pki.NewToken("sha256:" + strings.Repeat("ef", 32))
	if _, err := status("--address", nd.RPCAddr(), "--token", other.String()); err == nil || !strings.Contains(err.Error(), "not the cluster the token was made for") {
		t.Fatalf("status with another cluster's token: %v, want the pin refused", err)
	}
	for _, args := range [][]string{
		{"--address", nd.RPCAddr(), "--token", tok.String()},
		{"--address", nd.RPCAddr(), "--token-file", tokenFile},
		{"--address", nd.SocketAddr()},
	} {
		out, err := status(args...)
		if err != nil || !strings.Contains(out, nd.Name()) {
			t.Errorf("status %q: %v\n%s", args, err, out)
		}
	}
}
