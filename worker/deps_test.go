package worker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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

// Driver size bounds (issue 26, item 7), in MB of 10^6 bytes: a
// hello-world driver that imports only the SDK is at most driverMaxMB
// unstripped and driverMaxStrippedMB with -ldflags '-s -w', and, stripped,
// at most driverOverFloorMB over a program that only opens a TLS 1.3 client
// connection, built in the same run with the same toolchain (every driver
// speaks mutual TLS to other core workers, so crypto/tls and x509 are a
// floor no SDK change can go under).
const (
	driverMaxMB         = 10.0
	driverMaxStrippedMB = 7.0
	driverOverFloorMB   = 3.0
)

func TestDriverSizeBound(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds four programs")
	}
	dir := t.TempDir()
	build := func(pkg string, strip bool) float64 {
		t.Helper()
		out := filepath.Join(dir, filepath.Base(pkg))
		args := []string{"build", "-o", out}
		if strip {
			out += ".stripped"
			args = []string{"build", "-ldflags", "-s -w", "-o", out}
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as drivers are deployed
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, b)
		}
		st, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		return float64(st.Size()) / 1e6
	}
	const hello, floor = "./testdata/driversize/hello", "./testdata/driversize/tlsfloor"
	full, stripped := build(hello, false), build(hello, true)
	floorFull, floorStripped := build(floor, false), build(floor, true)
	t.Logf("hello-world driver: %.2f MB (%.2f MB stripped); TLS 1.3 client floor: %.2f MB (%.2f MB stripped); over the floor: %.2f MB (%.2f MB stripped)",
		full, stripped, floorFull, floorStripped, full-floorFull, stripped-floorStripped)
	if full > driverMaxMB {
		t.Errorf("hello-world driver is %.2f MB, over the bound of %.0f MB", full, driverMaxMB)
	}
	if stripped > driverMaxStrippedMB {
		t.Errorf("stripped hello-world driver is %.2f MB, over the bound of %.0f MB", stripped, driverMaxStrippedMB)
	}
	if over := stripped - floorStripped; over > driverOverFloorMB {
		t.Errorf("stripped hello-world driver is %.2f MB over the TLS client floor (%.2f MB), over the bound of %.0f MB", over, floorStripped, driverOverFloorMB)
	}
}
