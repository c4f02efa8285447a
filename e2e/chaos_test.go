package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// The chaos suite (issue 13): process clusters run the chaosload workload
// (testdata/chaosload: tasks with MaxRetries(-1), actors with
// MaxRestarts(-1)) while a fault is injected, then every scenario checks
// the same things: no result lost or wrong, every actor callable, every
// surviving node's resources back once the job ends, and each node's peak
// resident memory under chaosRSSBound. TestChaosShort runs in `make test`;
// the rest need NODEUP_CHAOS=1 (`make chaos`, Linux, root for network
// namespaces). docs/architecture.md's "What survives what" table quotes
// the figures they log.

// chaosRSSBound is the most resident memory a node may reach (VmHWM) in a
// scenario. An idle node holds 16-17 MiB (idle_node_rss in nodeup bench);
// under the workload and hostile traffic the scenarios measured 21-46 MiB
// (docs/chaos.md). The bug this guards against grew nodes to 494 MiB and
// 11 GiB.
const chaosRSSBound = 256 << 20

// chaosSummary is chaosload's JSON summary.
type chaosSummary struct {
	Tasks, TasksOK                 int
	Wrong                          []string
	Failed                         map[string]int
	TasksByNode                    map[string]int
	MaxTaskLatencyMs               int64
	LongestStallMs                 int64
	ActorCalls                     int
	ActorCallsFailed               int
	ActorLongestWaitMs             int64
	Actors, ActorsOK               int
	ActorFinalErrors               []string
	ActorNodesStart, ActorNodesEnd []string
	DetachedID                     string
}

func chaosLong(t *testing.T) {
	t.Helper()
	if os.Getenv("NODEUP_CHAOS") != "1" {
		t.Skip("chaos scenario: set NODEUP_CHAOS=1 (make chaos)")
	}
}

// chaosDriver is a running chaosload.
type chaosDriver struct {
	p       *testutil.Process
	summary string
}

// startChaosDriver runs chaosload for d against the node at addr, under
// prefix (ip netns exec <ns>) when given, and returns once its actors
// answer.
func startChaosDriver(t *testing.T, addr string, d time.Duration, prefix ...string) *chaosDriver {
	t.Helper()
	bin := buildTestdata(t, "chaosload")
	dir := t.TempDir()
	cd := &chaosDriver{summary: filepath.Join(dir, "summary.json")}
	ready := filepath.Join(dir, "ready")
	argv := append(append([]string{}, prefix...), bin, "-duration", d.String(), "-out", cd.summary, "-ready", ready)
	if s, ok := sockets.Load(addr); ok { // a local driver takes its node's socket
		addr = s.(string)
	}
	cd.p = startDriver(t, argv, []string{"NODEUP_ADDRESS=" + addr})
	waitFile(t, cd.p, ready, "the workload's actors answer", 60*time.Second)
	return cd
}

// finish waits for the driver to end (within its duration plus limit) and
// checks its summary: every task answered with its own value, every actor
// call answered, every actor callable at the end.
func (cd *chaosDriver) finish(t *testing.T, limit time.Duration) chaosSummary {
	t.Helper()
	select {
	case <-cd.p.Done():
		if err := cd.p.Wait(); err != nil {
			t.Fatalf("driver: %v\n%s", err, cd.p.Log.String())
		}
	case <-time.After(limit):
		t.Fatalf("driver still running %s after its submissions should have ended", limit)
	}
	b, err := os.ReadFile(cd.summary)
	if err != nil {
		t.Fatal(err)
	}
	var s chaosSummary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("summary: %v: %s", err, b)
	}
	t.Logf("workload: %d tasks (%v), longest stall %d ms, longest task %d ms; %d actor calls, longest %d ms; actors on %v, then %v",
		s.Tasks, s.TasksByNode, s.LongestStallMs, s.MaxTaskLatencyMs, s.ActorCalls, s.ActorLongestWaitMs, s.ActorNodesStart, s.ActorNodesEnd)
	if s.Tasks == 0 || s.TasksOK != s.Tasks || len(s.Wrong) > 0 || len(s.Failed) > 0 {
		t.Errorf("tasks: %d of %d right; wrong %v; failed %v", s.TasksOK, s.Tasks, s.Wrong, s.Failed)
	}
	if s.Actors == 0 || s.ActorsOK != s.Actors || s.ActorCallsFailed > 0 {
		t.Errorf("actors: %d of %d callable at the end (%v); %d of %d calls failed", s.ActorsOK, s.Actors, s.ActorFinalErrors, s.ActorCallsFailed, s.ActorCalls)
	}
	return s
}

// resourcesBack waits until every alive node in the table that status
// returns has all its CPU free again: the job's tasks, leases and actors
// are gone.
func resourcesBack(t *testing.T, status func() (*statusJSON, error)) {
	t.Helper()
	testutil.Until(t, 30*time.Second, "every alive node's CPU free after the job", func() error {
		st, err := status()
		if err != nil {
			return err
		}
		for _, nd := range st.Nodes {
			if nd.Alive && nd.Available["CPU"] != nd.Resources["CPU"] {
				return fmt.Errorf("%s: CPU %v of %v free", nd.NodeName, nd.Available["CPU"], nd.Resources["CPU"])
			}
		}
		return nil
	})
}

// peakRSS returns a process's peak resident memory (VmHWM) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("peak RSS of pid %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// checkRSS checks each running node's peak RSS against chaosRSSBound and
// logs it.
func checkRSS(t *testing.T, nodes ...*proc) {
	t.Helper()
	var figs []string
	for _, p := range nodes {
		select {
		case <-p.done:
			continue
		default:
		}
		rss := peakRSS(t, p.cmd.Process.Pid)
		figs = append(figs, fmt.Sprintf("%s %.1f MiB", p.name, float64(rss)/(1<<20)))
		if rss > chaosRSSBound {
			t.Errorf("%s: peak RSS %d MiB, over the %d MiB bound", p.name, rss>>20, chaosRSSBound>>20)
		}
	}
	t.Logf("peak RSS: %s", strings.Join(figs, ", "))
}

// descendants returns pid's child processes, their children and so on
// (a node's worker processes).
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}

// leaderProc returns the process st names as the leader.
func leaderProc(t *testing.T, st *statusJSON, nodes []*proc) *proc {
	t.Helper()
	for _, p := range nodes {
		if p.name == st.Leader.Name {
			return p
		}
	}
	t.Fatalf("leader %q is none of the nodes", st.Leader.Name)
	return nil
}

// TestChaosShort is the chaos suite's short scenario, in `make test`: on
// three nodes, hostile frames on every port of n1 and 200 idle connections
// to it for the whole run, and n2 killed with SIGKILL five seconds in. The
// workload must lose nothing, n1 must serve on, and no node may grow past
// the memory bound.
func TestChaosShort(t *testing.T) {
	nodes := startThreeNodes(t)
	n0, n1, n2 := nodes[0], nodes[1], nodes[2]
	d := startChaosDriver(t, n0.addr(), 25*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hs := hostileTraffic(ctx, hostileTarget{rpc: n1.addr(), gossip: fmt.Sprintf("127.0.0.1:%d", n1.gossipPort),
		http: fmt.Sprintf("127.0.0.1:%d", n1.httpPort)}, 2, 200, uint64(time.Now().UnixNano()))
	time.Sleep(5 * time.Second) // let the workload run before the fault
	if err := n2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	testutil.Until(t, 30*time.Second, "n2 dead in the table", func() error {
		st, err := status(t, n0.addr())
		if err != nil {
			return err
		}
		if s := states(st); s["n2"] != "dead" {
			return fmt.Errorf("n2 %s", s["n2"])
		}
		return nil
	})
	t.Logf("n2 dead in the table %s after SIGKILL", time.Since(killed).Round(100*time.Millisecond))
	d.finish(t, 3*time.Minute)
	cancel()
	t.Logf("hostile traffic to n1: %d sends, %.1f MB, %d idle connections held", hs.sends.Load(), float64(hs.bytes.Load())/1e6, hs.idle.Load())
	if _, err := status(t, n1.addr()); err != nil {
		t.Fatalf("n1 no longer serves after the hostile traffic: %v", err)
	}
	resourcesBack(t, func() (*statusJSON, error) { return status(t, n0.addr()) })
	checkRSS(t, n0, n1)
}

// nodeStates asks addr for the table's node states by name.
func nodeStates(t *testing.T, addr string) (map[string]string, error) {
	st, err := status(t, addr)
	if err != nil {
		return nil, err
	}
	return states(st), nil
}

// waitState waits until the table (asked through addr) shows each named
// node in state, and returns how long that took.
func waitState(t *testing.T, addr, state string, within time.Duration, names ...string) time.Duration {
	t.Helper()
	return testutil.Until(t, within, fmt.Sprintf("%v %s in the table", names, state), func() error {
		s, err := nodeStates(t, addr)
		if err != nil {
			return err
		}
		for _, n := range names {
			if s[n] != state {
				return fmt.Errorf("%s %s", n, s[n])
			}
		}
		return nil
	})
}

// TestChaosKillLeader: the leader is killed with SIGKILL mid-run and
// restarted 10 s later, as systemd would; the driver is on another node.
func TestChaosKillLeader(t *testing.T) {
	chaosLong(t)
	nodes := startThreeNodes(t)
	st, err := status(t, nodes[0].addr())
	if err != nil {
		t.Fatal(err)
	}
	leader := leaderProc(t, st, nodes)
	var via *proc
	for _, p := range nodes {
		if p != leader {
			via = p
			break
		}
	}
	d := startChaosDriver(t, via.addr(), 40*time.Second)
	time.Sleep(5 * time.Second) // let the workload run before the fault
	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-leader.done
	killed := time.Now()
	took := testutil.Until(t, 30*time.Second, "a new leader", func() error {
		st, err := status(t, via.addr())
		if err != nil {
			return err
		}
		if st.Leader.Name == "" || st.Leader.Name == leader.name {
			return fmt.Errorf("leader %q", st.Leader.Name)
		}
		return nil
	})
	t.Logf("new leader %s after SIGKILL of leader %s", took.Round(100*time.Millisecond), leader.name)
	waitState(t, via.addr(), "dead", 30*time.Second, leader.name)
	time.Sleep(10*time.Second - time.Since(killed)) // an operator's restart delay
	leader.run(t)
	took = waitState(t, via.addr(), "alive", 60*time.Second, leader.name)
	t.Logf("%s alive again %s after its restart", leader.name, took.Round(100*time.Millisecond))
	d.finish(t, 3*time.Minute)
	resourcesBack(t, func() (*statusJSON, error) { return status(t, via.addr()) })
	checkRSS(t, nodes...)
}

// TestChaosFreeze: a node and its worker processes are frozen (SIGSTOP) for
// 30 s mid-run, then thawed. Its tasks are retried and its actor restarted
// elsewhere once it is declared dead; after the thaw it rejoins, and what
// it finishes late is not counted twice.
func TestChaosFreeze(t *testing.T) {
	chaosLong(t)
	nodes := startThreeNodes(t)
	n0, n1 := nodes[0], nodes[1]
	d := startChaosDriver(t, n0.addr(), 50*time.Second)
	time.Sleep(5 * time.Second) // let the workload run before the fault
	frozen := append([]int{n1.cmd.Process.Pid}, descendants(n1.cmd.Process.Pid)...)
	signalAll(t, frozen, syscall.SIGSTOP)
	t.Cleanup(func() { signalAll(t, frozen, syscall.SIGCONT) })
	start := time.Now()
	took := waitState(t, n0.addr(), "dead", 30*time.Second, "n1")
	t.Logf("frozen n1 dead in the table %s after SIGSTOP", took.Round(100*time.Millisecond))
	time.Sleep(30*time.Second - time.Since(start)) // the freeze lasts 30 s
	signalAll(t, frozen, syscall.SIGCONT)
	took = waitState(t, n0.addr(), "alive", 60*time.Second, "n1")
	t.Logf("n1 alive again %s after SIGCONT", took.Round(100*time.Millisecond))
	d.finish(t, 3*time.Minute)
	resourcesBack(t, func() (*statusJSON, error) { return status(t, n0.addr()) })
	checkRSS(t, nodes...)
}

func signalAll(t *testing.T, pids []int, sig syscall.Signal) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
			t.Errorf("signal %v to pid %d: %v", sig, pid, err)
		}
	}
}

// TestChaosPartition: five nodes in network namespaces; the head and n1 are
// cut off (packets dropped) for 35 s, past failure detection, while the
// driver on n2 runs. The majority carries the work; after the heal the two
// rejoin and every node sees five alive.
func TestChaosPartition(t *testing.T) {
	chaosLong(t)
	const n = 5
	lab := newNetnsLab(t, n)
	nodes := lab.startCluster(t.TempDir())
	// The driver on n2's machine takes its node's Unix socket (a secure
	// node's TCP port wants TLS and a token): it used n2's TCP address and
	// was refused as anonymous, so make chaos exited 2.
	d := startChaosDriver(t, lab.socks[2], 60*time.Second, "ip", "netns", "exec", lab.ns(2))
	time.Sleep(5 * time.Second) // let the workload run before the fault
	minority := []int{0, 1}
	cut := time.Now()
	lab.cut(minority...)
	testutil.Until(t, 60*time.Second, "cut-off nodes dead", func() error {
		st, err := lab.status(2)
		if err != nil {
			return err
		}
		if s := states(st); s["n0"] != "dead" || s["n1"] != "dead" {
			return fmt.Errorf("n0 %s, n1 %s", s["n0"], s["n1"])
		}
		return nil
	})
	t.Logf("cut-off nodes dead %s after the cut", time.Since(cut).Round(100*time.Millisecond))
	time.Sleep(35*time.Second - time.Since(cut)) // the partition lasts 35 s
	healed := time.Now()
	lab.heal(minority...)
	testutil.Until(t, 60*time.Second, "every node sees 5 alive", func() error {
		for i := 0; i < n; i++ {
			st, err := lab.status(i)
			if err != nil {
				return err
			}
			if alive(st) != n {
				return fmt.Errorf("n%d sees %d alive", i, alive(st))
			}
		}
		return nil
	})
	t.Logf("every node sees 5 alive %s after the heal", time.Since(healed).Round(100*time.Millisecond))
	d.finish(t, 3*time.Minute)
	resourcesBack(t, func() (*statusJSON, error) { return lab.status(2) })
	checkRSS(t, nodes...)
}

// TestChaosHostile60s: 60 s of hostile frames on every port of every node,
// with 200 idle connections to each, while the workload runs; the figure
// is each node's peak RSS.
func TestChaosHostile60s(t *testing.T) {
	chaosLong(t)
	nodes := startThreeNodes(t)
	d := startChaosDriver(t, nodes[0].addr(), 60*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var all []*hostileStats
	for i, p := range nodes {
		all = append(all, hostileTraffic(ctx, hostileTarget{rpc: p.addr(), gossip: fmt.Sprintf("127.0.0.1:%d", p.gossipPort),
			http: fmt.Sprintf("127.0.0.1:%d", p.httpPort)}, 2, 200, uint64(time.Now().UnixNano())+uint64(i)))
	}
	d.finish(t, 3*time.Minute)
	cancel()
	var sends, bytes int64
	for _, hs := range all {
		sends, bytes = sends+hs.sends.Load(), bytes+hs.bytes.Load()
	}
	t.Logf("hostile traffic: %d sends, %.1f MB to 3 nodes", sends, float64(bytes)/1e6)
	for _, p := range nodes {
		if _, err := status(t, p.addr()); err != nil {
			t.Errorf("%s no longer serves: %v", p.name, err)
		}
	}
	resourcesBack(t, func() (*statusJSON, error) { return status(t, nodes[0].addr()) })
	checkRSS(t, nodes...)
}

// TestChaosFullRestart: every node is killed with SIGKILL at once and all
// are restarted. The detached actor the first run made is callable by the
// second run, under the same ID.
func TestChaosFullRestart(t *testing.T) {
	chaosLong(t)
	nodes := startThreeNodes(t)
	first := startChaosDriver(t, nodes[0].addr(), 5*time.Second).finish(t, 2*time.Minute)
	for _, p := range nodes {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range nodes {
		<-p.done
	}
	restarted := time.Now()
	for _, p := range nodes {
		p.run(t)
	}
	waitFormed(t, nodes[0].addr(), 3)
	t.Logf("cluster formed %s after the restart", time.Since(restarted).Round(100*time.Millisecond))
	second := startChaosDriver(t, nodes[0].addr(), 10*time.Second).finish(t, 3*time.Minute)
	t.Logf("detached actor answered %s after the restart", time.Since(restarted).Round(100*time.Millisecond))
	if second.DetachedID != first.DetachedID {
		t.Errorf("detached actor %s after the restart, want the first run's %s", second.DetachedID, first.DetachedID)
	}
	checkRSS(t, nodes...)
}
