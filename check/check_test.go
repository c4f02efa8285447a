package check

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/wire"
	"github.com/nodeup/nodeup/worker"
)

// TestMain doubles as the workload's worker process: nodes re-execute this
// test binary with NODEUP_WORKER=1 to run its tasks and actors.
func TestMain(m *testing.M) {
	if os.Getenv(wire.EnvWorkerMode) == "1" {
		_ = worker.Init(context.Background())
		os.Exit(0)
	}
	code := m.Run()
	if nodeupBin != "" {
		os.RemoveAll(filepath.Dir(nodeupBin))
	}
	os.Exit(code)
}

// clusterKind is a cluster the workload runs against: nodes in this
// process, or nodeup processes.
type clusterKind struct {
	name  string
	nodes int
	procs bool
}

func inproc(n int) clusterKind { return clusterKind{name: fmt.Sprintf("inproc-%d", n), nodes: n} }
func procs(n int) clusterKind {
	return clusterKind{name: fmt.Sprintf("procs-%d", n), nodes: n, procs: true}
}

// start starts the cluster and returns the address to connect to and a
// function returning the nodes' logs (processes only; in-process nodes
// log to stderr with NODEUP_TEST_LOG=1).
func (k clusterKind) start(t testing.TB) (string, func() string) {
	if k.procs {
		return startProcesses(t, k.nodes)
	}
	return startInProcess(t, k.nodes), func() string { return "" }
}

// config is the checker's tolerance for the kind: node processes
// heartbeat every second (in-process test nodes every 100 ms), so their
// views of each other are older and the bounds wider.
func (k clusterKind) config(nodes []Node) Config {
	c := Config{Nodes: nodes, WorkBound: 1500 * time.Millisecond, MakespanSlack: 2 * time.Second}
	if k.procs {
		c.WorkBound, c.MakespanSlack = 2500*time.Millisecond, 3*time.Second
	}
	return c
}

// seedFromEnv returns $NODEUP_CHECK_SEED, or a fresh random seed.
func seedFromEnv(t testing.TB) int64 {
	s := os.Getenv("NODEUP_CHECK_SEED")
	if s == "" {
		return rand.Int64N(1 << 31)
	}
	seed, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("NODEUP_CHECK_SEED=%q: not an integer", s)
	}
	return seed
}

// TestShort runs the short seeded workload on an in-process cluster of 1
// and of 3 nodes and on 1 to 3 nodeup processes (chosen by the seed), and
// checks every invariant on each history.
func TestShort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the checker workload starts clusters")
	}
	seed := seedFromEnv(t)
	t.Logf("seed %d (replay: NODEUP_CHECK_SEED=%d go test -count=1 -run TestShort ./check)", seed, seed)
	for _, k := range []clusterKind{inproc(1), inproc(3), procs(1 + int(seed%3))} {
		t.Run(k.name, func(t *testing.T) {
			runAndCheck(t, k, seed, ShortScale, fmt.Sprintf("NODEUP_CHECK_SEED=%d go test -count=1 -run 'TestShort/%s$' ./check", seed, k.name))
		})
	}
}

// TestLong runs seeded workloads for $NODEUP_CHECK_DURATION (make
// check-long), cycling through cluster kinds (or only
// $NODEUP_CHECK_CLUSTER, e.g. procs-2) with seeds counting up from
// $NODEUP_CHECK_SEED.
func TestLong(t *testing.T) {
	d := os.Getenv("NODEUP_CHECK_DURATION")
	if d == "" {
		t.Skip("set NODEUP_CHECK_DURATION (e.g. 5m) to run the long checker workload (make check-long)")
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		t.Fatalf("NODEUP_CHECK_DURATION=%q: %v", d, err)
	}
	kinds := []clusterKind{inproc(1), inproc(3), procs(1), procs(2), procs(3), inproc(2)}
	if only := os.Getenv("NODEUP_CHECK_CLUSTER"); only != "" {
		kinds = filterKinds(t, kinds, only)
	}
	base := seedFromEnv(t)
	deadline := time.Now().Add(dur)
	for i := 0; i == 0 || time.Now().Before(deadline); i++ {
		k, seed := kinds[i%len(kinds)], base+int64(i)
		replay := fmt.Sprintf("NODEUP_CHECK_SEED=%d NODEUP_CHECK_CLUSTER=%s NODEUP_CHECK_DURATION=1s go test -count=1 -timeout 30m -run TestLong ./check", seed, k.name)
		t.Run(fmt.Sprintf("%s/seed-%d", k.name, seed), func(t *testing.T) { runAndCheck(t, k, seed, LongScale, replay) })
	}
}

func filterKinds(t *testing.T, kinds []clusterKind, name string) []clusterKind {
	for _, k := range kinds {
		if k.name == name {
			return []clusterKind{k}
		}
	}
	t.Fatalf("NODEUP_CHECK_CLUSTER=%q: use inproc-1..3 or procs-1..3", name)
	return nil
}

// runAndCheck starts a cluster of kind k, runs the workload for seed on
// it and fails with every invariant violation found, keeping the trace.
func runAndCheck(t *testing.T, k clusterKind, seed int64, sc Scale, replay string) {
	began := time.Now()
	addr, logs := k.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	idle := 10 * time.Second
	if k.procs {
		idle = 15 * time.Second
	}
	out, err := Run(ctx, RunConfig{Address: addr, WantNodes: k.nodes, Seed: seed, Scale: sc, Dir: t.TempDir(), Logger: testutil.Logger(), IdleTimeout: idle})
	if out == nil {
		t.Fatalf("seed %d on %s: %v\n%s", seed, k.name, err, logs())
	}
	if err != nil {
		t.Errorf("seed %d on %s: run: %v\n%s", seed, k.name, err, logs())
	}
	vs := Check(out.History, k.config(out.Nodes))
	t.Logf("seed %d on %s: %d events, %d phases, %d violation(s), %s", seed, k.name, len(out.History), len(out.Plan.Phases), len(vs),
		time.Since(began).Round(time.Millisecond))
	if len(vs) == 0 {
		return
	}
	t.Errorf("seed %d on %s: %d invariant violation(s):\n%s\ntrace: %s\nreplay: %s", seed, k.name, len(vs), Summary(vs, 4),
		keepTrace(t, out.Trace, seed, k.name), replay)
}

// keepTrace copies a failing run's trace out of the test's temporary
// directory and returns its path.
func keepTrace(t *testing.T, trace string, seed int64, name string) string {
	b, err := os.ReadFile(trace)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	p := filepath.Join(os.TempDir(), fmt.Sprintf("nodeup-check-%s-seed%d.jsonl", name, seed))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return fmt.Sprintf("(not kept: %v)", err)
	}
	return p
}

// TestRecheck checks a kept trace again ($NODEUP_CHECK_TRACE_FILE; its
// Cluster event names the nodes) with the in-process tolerances, or the
// process ones with NODEUP_CHECK_CLUSTER=procs-N.
func TestRecheck(t *testing.T) {
	path := os.Getenv("NODEUP_CHECK_TRACE_FILE")
	if path == "" {
		t.Skip("set NODEUP_CHECK_TRACE_FILE to a trace to check it again")
	}
	h, err := ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	k := inproc(1)
	if strings.HasPrefix(os.Getenv("NODEUP_CHECK_CLUSTER"), "procs") {
		k = procs(1)
	}
	if vs := Check(h, k.config(nil)); len(vs) > 0 {
		t.Errorf("%s: %d invariant violation(s):\n%s", path, len(vs), Summary(vs, 20))
	}
}
