package e2e

import (
	"fmt"
	"math/rand"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

func TestThreeProcessesFailoverAndRejoin(t *testing.T) {
	procs := startThree(t)
	st, err := status(t, procs[0].addr())
	if err != nil {
		t.Fatal(err)
	}
	if st.Total["CPU"] != 6 || st.Total["TPU-v3"] != 2 || st.Total["node1"] != 2 {
		t.Fatalf("cluster totals %v, want CPU 6, TPU-v3 2, node1 2", st.Total)
	}
	var leader *proc
	var rest []*proc
	for _, p := range procs {
		if p.addr() == st.Leader.Address {
			leader = p
		} else {
			rest = append(rest, p)
		}
	}
	if leader == nil {
		t.Fatalf("leader %s is none of the nodes", st.Leader.Address)
	}
	leaderID := st.Leader.ID

	// kill -9 the leader: a new one within 10 s, the node table intact.
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = leader.wait()
	took := testutil.Until(t, 10*time.Second, "new leader after kill -9", func() error {
		st, err := status(t, rest[0].addr())
		if err != nil {
			return err
		}
		if st.Leader.ID == "" || st.Leader.ID == leaderID {
			return fmt.Errorf("leader is %q", st.Leader.Name)
		}
		return nil
	})
	t.Logf("new leader %s after kill -9 of the leader", took.Round(time.Millisecond))
	took += testutil.Until(t, 20*time.Second, "killed leader dead, others alive", func() error {
		st, err := status(t, rest[1].addr())
		if err != nil {
			return err
		}
		if len(st.Nodes) != 3 {
			return fmt.Errorf("%d nodes in the table", len(st.Nodes))
		}
		for _, nd := range st.Nodes {
			want := "alive"
			if nd.NodeID == leaderID {
				want = "dead"
			}
			if nd.State != want {
				return fmt.Errorf("%s is %s, want %s", nd.NodeName, nd.State, want)
			}
		}
		return nil
	})
	t.Logf("killed leader marked dead in the node table %s after kill -9", took.Round(time.Millisecond))

	// Restarted with its data dir, it rejoins as the same node.
	leader.args[1] = rest[0].addr() // "join <peer>": the old head joins a live member
	leader.args[0] = "join"
	leader.run(t)
	testutil.Until(t, 30*time.Second, "restarted node rejoins as itself", func() error {
		st, err := status(t, rest[0].addr())
		if err != nil {
			return err
		}
		for _, nd := range st.Nodes {
			if nd.NodeID == leaderID {
				if nd.State != "alive" || nd.Incarnation != 2 {
					return fmt.Errorf("restarted node is %s, incarnation %d", nd.State, nd.Incarnation)
				}
				return nil
			}
		}
		return fmt.Errorf("node %s missing", leaderID)
	})
}

func TestSigtermLeavesAndStopCommand(t *testing.T) {
	procs := startThree(t)
	// SIGTERM: exit 0 after a graceful leave; peers mark it left at once.
	signalTerm(procs[1])
	select {
	case <-procs[1].done:
		if err := procs[1].wait(); err != nil {
			t.Fatalf("node exited with %v after SIGTERM", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("node did not exit within 20s of SIGTERM")
	}
	testutil.Until(t, 5*time.Second, "left after SIGTERM", func() error {
		st, err := status(t, procs[0].addr())
		if err != nil {
			return err
		}
		for _, nd := range st.Nodes {
			if nd.NodeName == "n1" && nd.State != "left" {
				return fmt.Errorf("n1 is %s", nd.State)
			}
		}
		return nil
	})
	// nodeup stop --data-dir stops the local node the same way.
	out, errOut, code := nodeup(t, nil, "stop", "--data-dir", procs[2].dataDir)
	if code != 0 || !strings.Contains(out, "stopped node") {
		t.Fatalf("stop: exit %d, %q %q", code, out, errOut)
	}
	if err := procs[2].wait(); err != nil {
		t.Fatalf("stopped node exited with %v", err)
	}
	_, errOut, code = nodeup(t, nil, "stop", "--data-dir", procs[2].dataDir)
	if code == 0 || !strings.Contains(errOut, "no nodeup node is running") {
		t.Fatalf("second stop: exit %d, %q", code, errOut)
	}
}

func TestGarbageOnPortsDoesNotCrash(t *testing.T) {
	head := startHead(t, t.TempDir())
	gossipPort := fmt.Sprint(head.gossipPort)
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 200; i++ {
		junk := make([]byte, rng.Intn(4096)+1)
		rng.Read(junk)
		switch i % 4 {
		case 1:
			junk[0] = 0x01 // RPC protocol byte, then garbage frames
		case 2:
			junk[0] = 0x02 // Raft protocol byte, then garbage
		}
		for _, target := range []string{"tcp:" + head.addr(), "tcp:127.0.0.1:" + gossipPort, "udp:127.0.0.1:" + gossipPort} {
			network, addr, _ := strings.Cut(target, ":")
			c, err := net.DialTimeout(network, addr, time.Second)
			if err != nil {
				continue
			}
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, _ = c.Write(junk)
			c.Close()
		}
	}
	select {
	case <-head.done:
		t.Fatalf("node died on garbage input: %v", head.wait())
	default:
	}
	if _, err := status(t, head.addr()); err != nil {
		t.Fatalf("node stopped answering after garbage: %v", err)
	}
}

func TestBadInputOneLineErrors(t *testing.T) {
	root := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"start"}, "--head"},
		{[]string{"start", "--head", "--resources", "TPU-v3=-1"}, `"-1"`},
		{[]string{"start", "--head", "--resources", "A=0.00001"}, "4 decimal places"},
		{[]string{"start", "--head", "--resources", `{"A": "x"}`}, `"A"`},
		{[]string{"start", "--head", "--num-cpus", "abc"}, `"abc"`},
		{[]string{"start", "--head", "--memory", "lots"}, `"lots"`},
		{[]string{"start", "--head", "--labels", "zone"}, `"zone"`},
		{[]string{"start", "--head", "--raft-voters", "0"}, "--raft-voters 0"},
		{[]string{"start", "--head", "--no-such-flag"}, "no-such-flag"},
		{[]string{"start", "--head", "--port", "notaport"}, "notaport"},
		{[]string{"start", "--head", "--num-gpus", "-1"}, `--num-gpus "-1"`},
		{[]string{"start", "--head", "--num-gpus", "2", "--gpu-memory", "huge"}, `"huge"`},
		{[]string{"start", "--head", "--gpu-interval", "fast"}, `--gpu-interval "fast"`},
		{[]string{"start", "--head", "--resources", "GPU=4"}, `--resources "GPU=4"`},
		{[]string{"join"}, "at least one peer"},
		{[]string{"join", "127.0.0.1:1"}, "pass --token"},
		{[]string{"join", "127.0.0.1:1", "--retry-max", "1", "--token", "nodeup1.0123abcd.0123456789abcdef0123456789abcdef." + strings.Repeat("ab", 32)}, "cannot reach any peer"},
		{[]string{"join", "127.0.0.1:1", "--token", "hunter2"}, "want nodeup1."},
		{[]string{"start", "--head", "--insecure", "--token", "x"}, "--insecure with a token"},
		{[]string{"frobnicate"}, "frobnicate"},
	}
	for _, tc := range cases {
		args := append(append([]string{}, tc.args...), "--data-dir", root+"/bad", "--port", "0", "--gossip-port", "0", "--http-port", "-1", "--bind", "127.0.0.1")
		if tc.args[0] == "frobnicate" {
			args = tc.args
		}
		_, errOut, code := nodeup(t, nil, args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code == 0 || len(lines) != 1 || !strings.Contains(errOut, tc.want) || !strings.HasPrefix(errOut, "nodeup: ") {
			t.Errorf("nodeup %v: exit %d, stderr %q: want one line naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestStatusWaitsForTheCluster: `nodeup status --wait N` started before any
// node waits for the node to come up and the cluster to reach N alive
// nodes (the README's quickstart pastes as one block on it), and says how
// far it got when they do not.
func TestStatusWaitsForTheCluster(t *testing.T) {
	root := t.TempDir()
	env := []string{"TMPDIR=" + root, "NODEUP_ADDRESS=", "NODEUP_TOKEN="}
	done := make(chan struct{})
	var out, errOut string
	var code int
	go func() {
		defer close(done)
		out, errOut, code = nodeupTCP(t, env, "status", "--wait", "1", "--wait-timeout", "40s")
	}()
	head := startHead(t, root)
	<-done
	if code != 0 || !strings.Contains(out, "n0") {
		t.Fatalf("status --wait 1 started before the head: exit %d: %s %s", code, out, errOut)
	}
	_, errOut, code = nodeup(t, env, "status", "--address", head.addr(), "--wait", "2", "--wait-timeout", "2s")
	if code == 0 || !strings.Contains(errOut, "--wait 2: 1 nodes alive") {
		t.Fatalf("status --wait 2 on a 1-node cluster: exit %d: %s", code, errOut)
	}
}
