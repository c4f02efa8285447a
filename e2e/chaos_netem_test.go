package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// netem sets (or, with change, changes) a netem qdisc on every node's link
// in the lab: each packet leaving a node is delayed and lost as given.
func netem(t *testing.T, l *netnsLab, change bool, spec ...string) {
	t.Helper()
	verb := "add"
	if change {
		verb = "change"
	}
	for i := 0; i < l.nodes; i++ {
		args := append([]string{"netns", "exec", l.ns(i), "tc", "qdisc", verb, "dev", "e0", "root", "netem"}, spec...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// TestChaosNetem: five nodes in network namespaces run the workload three
// times, 20 s each, on clean links, then with every link delaying packets
// 100 ms and losing 5%, then losing 30%. Every run must lose nothing and
// end on time (no hang); the impaired runs must show fewer tasks than the
// clean one (the impairment took effect). The lab (namespaces and their
// qdiscs) is removed at the end.
func TestChaosNetem(t *testing.T) {
	chaosLong(t)
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("netem scenario: no tc command (apt-get install -y iproute2)")
	}
	const n = 5
	lab := newNetnsLab(t, n)
	// The kernel must have netem (sch_netem); some sandboxes' kernels lack
	// it: ask on the hub's loopback before starting the cluster.
	if out, err := exec.Command("ip", "netns", "exec", lab.hub, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms").CombinedOutput(); err != nil {
		t.Skipf("netem scenario: this kernel has no netem qdisc (sch_netem): tc: %v: %s", err, strings.TrimSpace(string(out)))
	}
	nodes := lab.startCluster(t.TempDir())
	run := func(what string) chaosSummary {
		began := time.Now()
		d := startChaosDriver(t, lab.socks[2], 20*time.Second, "ip", "netns", "exec", lab.ns(2))
		s := d.finish(t, 3*time.Minute)
		t.Logf("%s: %d tasks, %d actor calls, longest task %d ms, longest actor call %d ms, run took %s", what, s.Tasks, s.ActorCalls,
			s.MaxTaskLatencyMs, s.ActorLongestWaitMs, time.Since(began).Round(100*time.Millisecond))
		return s
	}
	clean := run("clean links")
	netem(t, lab, false, "delay", "100ms", "loss", "5%")
	slow := run("100 ms + 5% loss")
	netem(t, lab, true, "delay", "100ms", "loss", "30%")
	lossy := run("100 ms + 30% loss")
	if slow.Tasks >= clean.Tasks || lossy.Tasks >= clean.Tasks {
		t.Errorf("throughput did not degrade: %d tasks on clean links, %d at 5%% loss, %d at 30%% loss: netem took no effect", clean.Tasks, slow.Tasks, lossy.Tasks)
	}
	netem(t, lab, true, "delay", "0ms", "loss", "0%")
	resourcesBack(t, func() (*statusJSON, error) { return lab.status(2) })
	checkRSS(t, nodes...)
}
