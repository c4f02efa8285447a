package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/pki"
)

// nodeup status against a node enforcing roles: over TCP it is refused
// without a token (naming the method and role) and answered with a read
// token from --token or --token-file; over the node's Unix socket it needs
// no token.
func TestStatusTokenAndSocket(t *testing.T) {
	tok, err := pki.NewToken("sha256:" + strings.Repeat("ef", 32))
	if err != nil {
		t.Fatal(err)
	}
	nd := clustertest.Start(t, 1, func(_ int, c *cluster.Config) {
		c.SetTokenAuthority(func(token string, _ time.Time) (pki.Role, error) {
			if token == tok.String() {
				return pki.RoleRead, nil
			}
			return "", fmt.Errorf("token unknown")
		})
	})[0]
	t.Setenv("NODEUP_TOKEN", "")
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
	if err == nil || !strings.Contains(err.Error(), "Cluster.Status needs role read") || !strings.Contains(err.Error(), "permission_denied") {
		t.Fatalf("status over TCP without a token: %v, want permission_denied naming Cluster.Status and read", err)
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
