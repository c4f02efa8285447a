package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// nodeupBin is the binary under test, built once by TestMain.
var nodeupBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nodeup-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if nodeupBin, err = testutil.BuildNodeup(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one node process.
type proc struct {
	name    string
	dataDir string
	port    int
	// gossipPort and httpPort are the node's memberlist and HTTP ports
	// (startNode's nodes only).
	gossipPort, httpPort int
	args                 []string
	prefix               []string // a command nodeup runs under (ip netns exec <ns>), if any
	cmd                  *exec.Cmd
	log                  *testutil.SyncBuffer
	done                 <-chan struct{} // closed when the process has exited
	ps                   *testutil.Process
}

// wait returns the process's exit status once it has exited.
func (p *proc) wait() error {
	return p.ps.Wait()
}

func (p *proc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// sock is the node's Unix socket as an address: local drivers and the CLI
// reach a secure node there (its TCP port wants TLS and a token).
func (p *proc) sock() string { return "unix://" + filepath.Join(p.dataDir, "nodeup.sock") }

// sockets maps a started node's TCP address to its socket (proc.sock), so
// that nodeup's --address host:port goes over the socket, as a local user
// would; nodeupTCP keeps the TCP address.
var sockets sync.Map

// startNode runs `nodeup <verb...> <node flags>` in the background.
func startNode(t *testing.T, root, name string, verb []string, extra ...string) *proc {
	t.Helper()
	p := &proc{name: name, dataDir: filepath.Join(root, name), port: testutil.FreePort(t), gossipPort: testutil.FreePort(t), httpPort: testutil.FreePort(t)}
	p.args = append(append([]string{}, verb...),
		"--bind", "127.0.0.1", "--port", strconv.Itoa(p.port), "--gossip-port", strconv.Itoa(p.gossipPort),
		"--http-port", strconv.Itoa(p.httpPort), "--data-dir", p.dataDir, "--node-name", name, "--num-cpus", "2", "--memory", "1GiB")
	p.args = append(p.args, extra...)
	sockets.Store(p.addr(), p.sock())
	p.run(t)
	return p
}

func (p *proc) run(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- log of %s ---\n%s", p.name, testutil.Tail(p.log.String(), 12000))
		}
	})
	argv := append(append(append([]string{}, p.prefix...), nodeupBin), p.args...)
	p.ps = testutil.StartProcess(t, argv, []string{"TMPDIR=" + filepath.Dir(p.dataDir)})
	p.cmd, p.log, p.done = p.ps.Cmd, p.ps.Log, p.ps.Done()
}

// nodeup runs a client verb and returns stdout, stderr and the exit code;
// an --address of a node this test started is its Unix socket.
func nodeup(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	args = append([]string(nil), args...)
	for i := 1; i < len(args); i++ {
		if args[i-1] == "--address" {
			if s, ok := sockets.Load(args[i]); ok {
				args[i] = s.(string)
			}
		}
	}
	return nodeupTCP(t, env, args...)
}

// nodeupTCP is nodeup with --address left as given.
func nodeupTCP(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeupBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), env...)
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run nodeup %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

type statusJSON struct {
	ClusterName string `json:"cluster_name"`
	Leader      struct {
		ID, Name, Address string
	} `json:"leader"`
	Servers []struct {
		ID, Suffrage string
	} `json:"raft_servers"`
	Nodes []struct {
		NodeID, NodeName, State string
		Alive                   bool
		Incarnation             uint64
		Resources               map[string]float64
		Available               map[string]float64 `json:"AvailableResources"`
	} `json:"nodes"`
	Total map[string]float64 `json:"total_resources"`
	// Pending is the cluster's pending demand (work waiting for resources).
	Pending []struct {
		Resources map[string]float64
		Count     int
		Reason    string
	} `json:"pending_demands"`
	Insecure bool   `json:"insecure"`
	CAHash   string `json:"ca_hash"`
}

func status(t *testing.T, addr string) (*statusJSON, error) {
	out, errOut, code := nodeup(t, nil, "status", "--json", "--address", addr, "--timeout", "3s")
	if code != 0 {
		return nil, fmt.Errorf("status exit %d: %s", code, strings.TrimSpace(errOut))
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("status --json: %v: %s", err, out)
	}
	return &st, nil
}

func alive(st *statusJSON) int {
	n := 0
	for _, nd := range st.Nodes {
		if nd.State == "alive" {
			n++
		}
	}
	return n
}

// startHead starts node n0 under root as a head, with extra flags, and
// waits until it answers.
func startHead(t *testing.T, root string, extra ...string) *proc {
	t.Helper()
	head := startNode(t, root, "n0", []string{"start", "--head"}, extra...)
	testutil.Until(t, 20*time.Second, "head answers", func() error { _, err := status(t, head.addr()); return err })
	return head
}

// tokenFile is the first join token the head p wrote in its data dir.
func tokenFile(p *proc) string { return filepath.Join(p.dataDir, "tls", "initial-join-token") }

// startThreeNodes starts a head n0 and two nodes n1 and n2 that join it,
// node i with the extra flags flags[i] (if given), and waits until status
// through n2 shows all three alive with three Raft voters.
func startThreeNodes(t *testing.T, flags ...[]string) []*proc {
	t.Helper()
	extra := func(i int) []string {
		if i < len(flags) {
			return flags[i]
		}
		return nil
	}
	root := t.TempDir()
	procs := []*proc{startHead(t, root, extra(0)...)}
	for i := 1; i < 3; i++ {
		procs = append(procs, startNode(t, root, fmt.Sprintf("n%d", i), []string{"join", procs[0].addr(), "--token-file", tokenFile(procs[0])}, extra(i)...))
	}
	took := waitFormed(t, procs[2].addr(), 3)
	t.Logf("3-node cluster formed %s after the joiners started", took.Round(time.Millisecond))
	return procs
}

// startThree starts a head (with node0=2, TPU-v3=2) and two nodes that join
// it (node1=2, node2=2, each declaring 4 H100 GPUs, so GPU work spills from
// the head), and waits until all three are alive Raft voters.
func startThree(t *testing.T) []*proc {
	t.Helper()
	gpus := []string{"--num-gpus", "4", "--gpu-model", "H100"}
	return startThreeNodes(t, []string{"--resources", "node0=2,TPU-v3=2"},
		append([]string{"--resources", `{"node1": 2}`}, gpus...),
		append([]string{"--resources", "node2=2"}, gpus...))
}

// waitFormed polls status at addr until n nodes are alive, n are Raft
// voters and there is a leader, and returns how long that took.
func waitFormed(t *testing.T, addr string, n int) time.Duration {
	t.Helper()
	return testutil.Until(t, 30*time.Second, fmt.Sprintf("%d-node cluster forms", n), func() error {
		st, err := status(t, addr)
		if err != nil {
			return err
		}
		if alive(st) != n || voters(st) != n || st.Leader.ID == "" {
			return fmt.Errorf("%d alive, %d voters, leader %q; node states %v; %d Raft servers", alive(st), voters(st), st.Leader.Name, states(st), len(st.Servers))
		}
		return nil
	})
}

// buildExamples builds ./examples/<name> for each name into a temporary
// directory and returns it.
func buildExamples(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	var pkgs []string
	for _, n := range names {
		pkgs = append(pkgs, "./examples/"+n)
	}
	if err := testutil.GoBuild(dir+"/", pkgs...); err != nil {
		t.Fatal(err)
	}
	return dir
}

func signalTerm(p *proc) { _ = p.cmd.Process.Signal(syscall.SIGTERM) }

// startDriver runs a test's driver program, argv with env appended to this
// process's environment; its output is logged if the test fails, and it is
// stopped when the test ends.
func startDriver(t *testing.T, argv, env []string) *testutil.Process {
	t.Helper()
	p := testutil.StartProcess(t, argv, env)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- driver output ---\n%s", p.Log.String())
		}
	})
	return p
}

// waitFile waits until the driver d has written something to path, and
// returns it; it fails t if d exits first or within passes. A driver that
// passes data this way writes it whole (or renames it into place).
func waitFile(t *testing.T, d *testutil.Process, path, what string, within time.Duration) []byte {
	t.Helper()
	var b []byte
	testutil.Until(t, within, what, func() error {
		select {
		case <-d.Done():
			t.Fatalf("driver ended before %s: %v\n%s", what, d.Wait(), d.Log.String())
		default:
		}
		var err error
		if b, err = os.ReadFile(path); err == nil && len(b) == 0 {
			err = fmt.Errorf("%s empty", path)
		}
		return err
	})
	return b
}
