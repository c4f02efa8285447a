package worker

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/internal/testutil"
)

// The SDK must stand alone: a program that imports only worker links
// neither the node daemon nor its heavy dependencies (issue 14). The
// embedded node is opt-in, through package embedded.
func TestSDKDoesNotLinkTheNode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/nodeup/nodeup/worker").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/nodeup/nodeup/cluster", "github.com/nodeup/nodeup/store",
		"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "go.etcd.io/bbolt",
		"github.com/prometheus/", "github.com/hashicorp/raft-autopilot",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f) {
				t.Errorf("worker depends on %s (forbidden: %s); only package embedded may link the node", dep, f)
			}
		}
	}
}

// Without a node to reach and without package embedded, Init says what to
// do instead of failing on a dial.
func TestInitWithoutNodeOrEmbeddedIsErrNoNode(t *testing.T) {
	t.Setenv("NODEUP_ADDRESS", "")
	t.Setenv("TMPDIR", t.TempDir()) // no node recorded as started on this machine
	if registeredStarter() != nil {
		t.Skip("an embedded starter is linked into this test binary")
	}
	err := Init(context.Background(), Logger(testutil.Logger()))
	if err == nil {
		Shutdown()
		t.Fatal("Init found a node")
	}
	if !errors.Is(err, ErrNoNode) || !strings.Contains(err.Error(), "nodeup/embedded") {
		t.Fatalf("Init = %v; want ErrNoNode naming the embedded package", err)
	}
}
