package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// netnsLab is a set of network namespaces, one per node, each with one
// veth into a hub namespace holding two bridges: nodes on br0 reach each
// other; moving a node's hub-side port to br1 cuts it off from br0's nodes
// (packets are silently lost, as in a real partition) while it still reaches
// the others on br1. Nothing is created in the caller's namespace.
type netnsLab struct {
	t      *testing.T
	prefix string // namespace name prefix, unique per run
	hub    string
	nodes  int
	socks  map[int]string // node i's Unix socket, once started: client verbs use it
}

// newNetnsLab sets up n node namespaces with addresses 10.213.0.1..n/24, or
// skips the test when it cannot (not root, no ip command, no netns).
func newNetnsLab(t *testing.T, n int) *netnsLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network-namespace partition test: needs root (ip netns)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network-namespace partition test: no ip command (iproute2)")
	}
	l := &netnsLab{t: t, prefix: fmt.Sprintf("nup%d-", os.Getpid()), nodes: n}
	l.hub = l.prefix + "hub"
	if out, err := exec.Command("ip", "netns", "add", l.hub).CombinedOutput(); err != nil {
		t.Skipf("network-namespace partition test: ip netns add: %v: %s", err, out)
	}
	t.Cleanup(l.close)
	l.ip(l.hub, "link", "set", "lo", "up")
	for _, br := range []string{"br0", "br1"} {
		l.ip(l.hub, "link", "add", br, "type", "bridge")
		l.ip(l.hub, "link", "set", br, "up")
	}
	for i := 0; i < n; i++ {
		ns := l.ns(i)
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
		}
		l.ip(ns, "link", "set", "lo", "up")
		port := fmt.Sprintf("h%d", i)
		l.ip(l.hub, "link", "add", port, "type", "veth", "peer", "name", "e0", "netns", ns)
		l.ip(l.hub, "link", "set", port, "master", "br0", "up")
		l.ip(ns, "addr", "add", l.addr(i)+"/24", "dev", "e0")
		l.ip(ns, "link", "set", "e0", "up")
	}
	return l
}

func (l *netnsLab) ns(i int) string   { return fmt.Sprintf("%sn%d", l.prefix, i) }
func (l *netnsLab) addr(i int) string { return fmt.Sprintf("10.213.0.%d", i+1) }

// ip runs `ip -n ns args...`, failing the test on error.
func (l *netnsLab) ip(ns string, args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip -n %s %s: %v: %s", ns, strings.Join(args, " "), err, out)
	}
}

// cut moves nodes' ports to br1 (cut off from br0's nodes, reaching each
// other); heal moves them back.
func (l *netnsLab) cut(nodes ...int) {
	for _, i := range nodes {
		l.ip(l.hub, "link", "set", fmt.Sprintf("h%d", i), "master", "br1")
	}
}

func (l *netnsLab) heal(nodes ...int) {
	for _, i := range nodes {
		l.ip(l.hub, "link", "set", fmt.Sprintf("h%d", i), "master", "br0")
	}
}

func (l *netnsLab) close() {
	for i := 0; i < l.nodes; i++ {
		_ = exec.Command("ip", "netns", "del", l.ns(i)).Run()
	}
	_ = exec.Command("ip", "netns", "del", l.hub).Run()
}

// start runs `nodeup <verb...>` in node i's namespace on its address and
// the default ports.
func (l *netnsLab) start(root string, i int, verb ...string) *proc {
	l.t.Helper()
	name := fmt.Sprintf("n%d", i)
	p := &proc{name: name, dataDir: filepath.Join(root, name), port: 7370, prefix: []string{"ip", "netns", "exec", l.ns(i)}}
	if l.socks == nil {
		l.socks = map[int]string{}
	}
	l.socks[i] = p.sock()
	p.args = append(append([]string{}, verb...), "--bind", l.addr(i), "--http-port", "-1", "--data-dir", p.dataDir,
		"--node-name", name, "--num-cpus", "2", "--memory", "1GiB", "--raft-voters", "5")
	p.run(l.t)
	return p
}

// nodeup runs a client verb in node i's namespace against its node.
func (l *netnsLab) nodeup(i int, args ...string) (string, string, int) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append([]string{"netns", "exec", l.ns(i), nodeupBin}, args...)
	// Over the node's Unix socket (a path: reachable from any namespace):
	// a secure node refuses plaintext TCP, and the socket trusts its user.
	addr := l.addr(i) + ":7370"
	if sock, ok := l.socks[i]; ok {
		addr = sock
	}
	argv = append(argv, "--address", addr)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		l.t.Fatalf("run nodeup %v in %s: %v", args, l.ns(i), err)
	}
	return stdout.String(), stderr.String(), code
}

func (l *netnsLab) status(i int) (*statusJSON, error) {
	out, errOut, code := l.nodeup(i, "status", "--json", "--timeout", "5s")
	if code != 0 {
		return nil, fmt.Errorf("status via n%d: exit %d: %s", i, code, strings.TrimSpace(errOut))
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("status --json: %v: %s", err, out)
	}
	return &st, nil
}

// startCluster starts a head in namespace 0 and a node joining it in each
// other one (every node a voter), waits until node 2 sees all of them alive
// and voting, and returns the processes.
func (l *netnsLab) startCluster(root string) []*proc {
	l.t.Helper()
	nodes := []*proc{l.start(root, 0, "start", "--head")}
	testutil.Until(l.t, 20*time.Second, "head answers", func() error { _, err := l.status(0); return err })
	for i := 1; i < l.nodes; i++ {
		nodes = append(nodes, l.start(root, i, "join", l.addr(0)+":7370", "--token-file", tokenFile(nodes[0])))
	}
	testutil.Until(l.t, 60*time.Second, fmt.Sprintf("%d alive nodes and %d voters", l.nodes, l.nodes), func() error {
		st, err := l.status(2)
		if err != nil {
			return err
		}
		if alive(st) != l.nodes || voters(st) != l.nodes {
			return fmt.Errorf("%d alive, %d voters", alive(st), voters(st))
		}
		return nil
	})
	return nodes
}

func voters(st *statusJSON) int {
	v := 0
	for _, s := range st.Servers {
		if s.Suffrage == "voter" {
			v++
		}
	}
	return v
}

func states(st *statusJSON) map[string]string {
	out := map[string]string{}
	for _, nd := range st.Nodes {
		out[nd.NodeName] = nd.State
	}
	return out
}

// Issue 13 item 2 with real processes and a real partition: five voters in
// five network namespaces; the head and one other node are cut off (packets
// dropped) for longer than failure detection plus memberlist's 30 s of
// gossip to the dead, the window in which it would heal by itself. The
// majority elects a leader and keeps committing; the two refuse writes.
// After the heal they must be alive in the table, voters again, and take
// writes, with the production reconnect interval (5 s).
func TestNetnsPartitionHeals(t *testing.T) {
	if testing.Short() {
		t.Skip("network-namespace partition test: over a minute; skipped in -short")
	}
	const n = 5
	lab := newNetnsLab(t, n)
	lab.startCluster(t.TempDir())

	minority, majority := []int{0, 1}, []int{2, 3, 4}
	cut := time.Now()
	lab.cut(minority...)
	took := testutil.Until(t, 60*time.Second, "majority leader, cut-off nodes dead, autopilot down to 3 voters", func() error {
		st, err := lab.status(majority[0])
		if err != nil {
			return err
		}
		s := states(st)
		if s["n0"] != "dead" || s["n1"] != "dead" || voters(st) != 3 {
			return fmt.Errorf("n0 %s, n1 %s, %d voters", s["n0"], s["n1"], voters(st))
		}
		return nil
	})
	t.Logf("cut-off nodes dead and removed from Raft %s after the cut", took.Round(time.Millisecond))
	if _, errOut, code := lab.nodeup(minority[1], "kv", "put", "during", "minority"); code == 0 || !strings.Contains(errOut, "no_leader") {
		t.Fatalf("write via a cut-off node: exit %d, %q (want no_leader)", code, errOut)
	}
	// Hold the cut past memberlist's gossip to the dead (30 s after the
	// deaths), the majority committing all along.
	hold := time.NewTimer(40*time.Second - time.Since(cut))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		if _, errOut, code := lab.nodeup(majority[i%len(majority)], "kv", "put", fmt.Sprintf("during/%d", i), "majority"); code != 0 {
			t.Fatalf("write via the majority during the partition: exit %d, %s", code, errOut)
		}
		select {
		case <-tick.C:
			continue
		case <-hold.C:
		}
		break
	}
	t.Logf("partition held %s", time.Since(cut).Round(time.Millisecond))

	healed := time.Now()
	lab.heal(minority...)
	took = testutil.Until(t, 60*time.Second, "cut-off nodes alive in the table", func() error {
		st, err := lab.status(majority[0])
		if err != nil {
			return err
		}
		if s := states(st); s["n0"] != "alive" || s["n1"] != "alive" {
			return fmt.Errorf("n0 %s, n1 %s", s["n0"], s["n1"])
		}
		return nil
	})
	t.Logf("cut-off nodes alive in the table %s after the heal", took.Round(time.Millisecond))
	testutil.Until(t, 60*time.Second, "every node sees 5 alive and 5 voters; the cut-off ones take writes", func() error {
		for i := 0; i < n; i++ {
			st, err := lab.status(i)
			if err != nil {
				return err
			}
			if alive(st) != n || voters(st) != n {
				return fmt.Errorf("n%d sees %d alive, %d voters", i, alive(st), voters(st))
			}
		}
		for _, i := range minority {
			if _, errOut, code := lab.nodeup(i, "kv", "put", "after", fmt.Sprintf("n%d", i)); code != 0 {
				return fmt.Errorf("write via n%d: exit %d, %s", i, code, strings.TrimSpace(errOut))
			}
		}
		return nil
	})
	t.Logf("healed (5 alive, 5 voters, writes via the cut-off nodes) %s after the heal", time.Since(healed).Round(time.Millisecond))
}
