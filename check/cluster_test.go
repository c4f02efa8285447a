package check

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
)

// nodeSpec is the shape of node i of every test cluster: 2 CPUs, a scarce
// custom resource, a zone label, and declared GPUs on some nodes.
type nodeSpec struct {
	slot int64
	zone string
	gpus int
}

var specs = []nodeSpec{{slot: 1, zone: "a", gpus: 2}, {slot: 1, zone: "b", gpus: 0}, {slot: 2, zone: "b", gpus: 2}}

// startInProcess starts n cluster.Node values on 127.0.0.1 in this process
// and returns the head's address for a local driver: its Unix socket (a
// secure node refuses plaintext TCP).
func startInProcess(t testing.TB, n int) string {
	t.Helper()
	nodes := clustertest.Start(t, n, func(i int, cfg *cluster.Config) {
		sp := specs[i]
		cfg.Resources[Slot] = sched.QuantityOf(sp.slot)
		cfg.Labels = map[string]string{"zone": sp.zone}
		cfg.GPUs = cluster.GPUConfig{Declare: true, Count: sp.gpus}
	})
	return nodes[0].SocketAddr()
}

var (
	buildOnce sync.Once
	nodeupBin string
	buildErr  error
)

// buildNodeup builds nodeup (CGO_ENABLED=0) into a temporary directory
// once per test binary.
func buildNodeup(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodeup-check-bin-")
		if err != nil {
			buildErr = err
			return
		}
		nodeupBin, buildErr = testutil.BuildNodeup(dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return nodeupBin
}

// startProcesses starts n `nodeup` processes on 127.0.0.1 (a head, then
// joiners once it answers) and returns the head's RPC address and a
// function returning the tail of each node's log.
func startProcesses(t testing.TB, n int) (string, func() string) {
	t.Helper()
	bin := buildNodeup(t)
	root := t.TempDir()
	var head string
	var logs []func() string
	for i := 0; i < n; i++ {
		sp := specs[i]
		port := testutil.FreePort(t)
		verb := []string{"start", "--head"}
		if i > 0 {
			tok := filepath.Join(root, "n0", "tls", "initial-join-token")
			testutil.Until(t, 30*time.Second, "the head's join token", func() error { _, err := os.Stat(tok); return err })
			verb = []string{"join", head, "--token-file", tok}
		}
		args := append(verb, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--gossip-port", strconv.Itoa(testutil.FreePort(t)),
			"--http-port", "-1", "--data-dir", filepath.Join(root, fmt.Sprintf("n%d", i)), "--node-name", fmt.Sprintf("n%d", i),
			"--num-cpus", "2", "--memory", "1GiB", "--resources", fmt.Sprintf("%s=%d", Slot, sp.slot), "--labels", "zone="+sp.zone,
			"--num-gpus", strconv.Itoa(sp.gpus))
		logs = append(logs, startProcess(t, bin, root, fmt.Sprintf("n%d", i), args))
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if i == 0 {
			head = addr
			waitListening(t, addr, 30*time.Second)
		}
	}
	// The driver takes the head's Unix socket: its TCP port wants TLS and
	// a token.
	return rpc.UnixPrefix + filepath.Join(root, "n0", cluster.SocketFile), func() string {
		var b bytes.Buffer
		for _, l := range logs {
			b.WriteString(l())
		}
		return b.String()
	}
}

// startProcess runs one node process and stops it at cleanup (SIGTERM,
// then SIGKILL after 15 s); the returned function gives its log's tail.
func startProcess(t testing.TB, bin, root, name string, args []string) func() string {
	t.Helper()
	p := testutil.StartProcess(t, append([]string{bin}, args...), []string{"TMPDIR=" + root})
	return func() string {
		return fmt.Sprintf("--- log of node %s ---\n%s\n", name, testutil.Tail(p.Log.String(), 4000))
	}
}

// waitListening polls addr until it accepts TCP connections.
func waitListening(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	testutil.Until(t, within, "node at "+addr+" listening", func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
}
