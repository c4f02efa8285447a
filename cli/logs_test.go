package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
	"github.com/nodeup/nodeup/worker"
)

// TestMain lets this test binary serve as a Go job's worker process (the
// node starts it again in worker mode) for the logs test's tasks.
func TestMain(m *testing.M) {
	if os.Getenv(wire.EnvWorkerMode) == "1" {
		_ = worker.Init(context.Background())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// printLine prints its argument to the worker's stdout, as a user's task.
var printLine = worker.Register1(func(ctx context.Context, s string) (int, error) {
	fmt.Println(s)
	return len(s), nil
})

func runLogs(args ...string) (string, string, error) {
	app := App()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.RunContext(context.Background(), append([]string{"nodeup", "logs"}, args...))
	return out.String(), errOut.String(), err
}

// A task's fmt.Println on another node is readable through one node with
// `nodeup logs --job`, prefixed with task, pid and node; without --job the
// file is listed with its node and job.
func TestLogsShowsRemoteTaskOutput(t *testing.T) {
	nodes := clustertest.Start(t, 2, func(i int, c *cluster.Config) {
		c.Insecure = true
		c.Resources[fmt.Sprintf("node%d", i)] = sched.QuantityOf(1)
	})
	if err := worker.Init(context.Background(), worker.Address(nodes[0].SocketAddr()), worker.Logger(testutil.Logger()), worker.LogToDriver(false)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := worker.Must(printLine.Options(worker.Resources(map[string]float64{"node1": 1}))).Remote(ctx, "hello from node one").Get(ctx); err != nil {
		t.Fatal(err)
	}
	addr := nodes[0].RPCAddr()
	// The one job's ID, from node 1's listing of its worker's file.
	var job string
	testutil.Until(t, 30*time.Second, "node 1's worker log listed", func() error {
		out, _, err := runLogs("--address", addr, "--node", nodes[1].Name())
		if err != nil {
			return err
		}
		m := regexp.MustCompile(`worker-(\S+)-[0-9a-f]{16}-[0-9]+\.log`).FindStringSubmatch(out)
		if m == nil {
			return fmt.Errorf("listing %q holds no worker log", out)
		}
		job = m[1]
		return nil
	})
	want := fmt.Sprintf("node=%s) hello from node one", nodes[1].Name())
	testutil.Until(t, 30*time.Second, "the task's line through nodeup logs --job", func() error {
		out, _, err := runLogs("--address", addr, "--job", job)
		if err != nil {
			return err
		}
		if !strings.Contains(out, want) || !strings.Contains(out, "(task pid=") {
			return fmt.Errorf("output %q; want a line ending %q prefixed (task pid=…", out, want)
		}
		return nil
	})
	out, _, err := runLogs("--address", addr, "--node", nodes[1].Name())
	if err != nil || !strings.Contains(out, "worker-"+job+"-") || !strings.Contains(out, nodes[1].Name()) {
		t.Fatalf("listing: %v\n%s", err, out)
	}
	if out, _, err := runLogs("--address", addr, "--job", job, "--node", nodes[0].Name()); err != nil || strings.Contains(out, "hello") {
		t.Fatalf("node 0's files only: %v\n%s", err, out)
	}
	if _, _, err := runLogs("--address", addr, "--job", "../x"); err == nil || !strings.Contains(err.Error(), "../x") {
		t.Fatalf("--job ../x: %v; want an error naming it", err)
	}
}
