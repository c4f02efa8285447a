package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/worker"
)

// The test binary doubles as the worker binary of the bench's jobs and as the
// echo peer of the round-trip baseline.
func TestMain(m *testing.M) {
	RunIfChild()
	os.Exit(m.Run())
}

// rayNames are the metrics of Ray's microbenchmark the issue asks for.
var rayNames = []string{
	"single_client_tasks_sync", "single_client_tasks_async", "multi_client_tasks_async",
	"1_1_actor_calls_sync", "1_1_actor_calls_async", "1_1_actor_calls_concurrent", "1_n_actor_calls_async",
	"n_n_actor_calls_async", "n_n_actor_calls_with_arg_async", "single_client_put_calls", "multi_client_put_calls",
	"single_client_put_gigabytes", "multi_client_put_gigabytes", "single_client_get_calls",
	"single_client_tasks_and_get_batch", "single_client_get_object_containing_10k_refs", "single_client_wait_1k_refs",
	"placement_group_create/removal",
}

func TestRegistry(t *testing.T) {
	names := map[string]*Metric{}
	for _, m := range Metrics() {
		if m.Name == "" || m.Unit == "" || m.Desc == "" || !slices.Contains(groupOrder, m.Group) {
			t.Errorf("metric %+v: needs a name, unit, description and a known group", m)
		}
		if m.Setup == nil {
			t.Errorf("%s: needs a Setup", m.Name)
		}
		if names[m.Name] != nil {
			t.Errorf("%s registered twice", m.Name)
		}
		names[m.Name] = m
	}
	for _, n := range rayNames {
		if names[n] == nil {
			t.Errorf("Ray's metric %s is not registered", n)
		}
	}
	for _, m := range Metrics() {
		if b := m.Baseline; b != "" && (names[b] == nil || names[b].Group != GroupBaseline) {
			t.Errorf("%s: baseline %q is not a baseline metric", m.Name, b)
		}
	}
}

func TestSelectAddsBaselines(t *testing.T) {
	var got []string
	for _, m := range Select(regexp.MustCompile("^single_client_put_gigabytes$|p99")) {
		got = append(got, m.Name)
	}
	want := []string{BaselineMemcpy, BaselineUnixRTT, "single_client_put_gigabytes", "task_latency_p50"}
	if !slices.Equal(got, want) {
		t.Errorf("Select = %v, want %v", got, want)
	}
}

func TestStats(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3}
	if m := median(v); m != 3 {
		t.Errorf("median = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("even median = %v", m)
	}
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(s, 50); p != 5 {
		t.Errorf("p50 = %v", p)
	}
	if p := percentile(s, 99); p != 10 {
		t.Errorf("p99 = %v", p)
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile of nothing should be NaN")
	}
	for v, want := range map[float64]string{0: "0", 123456.7: "123457", 12.345: "12.35", 1234.5: "1234", 0.012345: "0.01235"} {
		if got := formatValue(v); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestRunInProcess runs a cross-section of the suite in this process with a
// tiny duration, under the race detector in `make test`: the baselines, a
// task, a put, a get of a large object, latency percentiles, the two-node
// pull and a scalability metric; none may be skipped. The whole suite runs
// from the nodeup binary in e2e (TestBench).
func TestRunInProcess(t *testing.T) {
	filter := regexp.MustCompile("^(single_client_tasks_sync|single_client_put_calls|single_client_get_object_containing_10k_refs|" +
		"task_latency_p50|cross_node_object_pull_gigabytes|scalability_100000_queued_tasks|1_1_actor_calls_sync|placement_group_create/removal)$")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, Options{Filter: filter, Duration: time.Millisecond, Runs: 2, Scale: 0.001, Version: "test", Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{BaselineUnixRTT, BaselineLoopback, "single_client_tasks_sync", "single_client_put_calls",
		"single_client_get_object_containing_10k_refs", "1_1_actor_calls_sync", "placement_group_create/removal",
		"cross_node_object_pull_gigabytes", "task_latency_p50", "task_latency_p99", "scalability_100000_queued_tasks"}
	var got []string
	for _, r := range rep.Metrics {
		got = append(got, r.Name)
		switch {
		case r.Error != "":
			t.Errorf("%s failed: %s", r.Name, r.Error)
		case r.Skipped != "":
			t.Errorf("%s skipped: %s", r.Name, r.Skipped)
		case !(r.Value > 0) || r.Runs != 2 || r.Min > r.Median || r.Median > r.Max:
			t.Errorf("%s: value %v, runs %d, min/median/max %v/%v/%v", r.Name, r.Value, r.Runs, r.Min, r.Median, r.Max)
		case r.Baseline != "" && (r.Ratio == nil || !(*r.Ratio > 0)):
			t.Errorf("%s: no ratio to %s", r.Name, r.Baseline)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("metrics %v, want %v", got, want)
	}
	if n := strings.Count(progress.String(), "\n"); n != len(want) {
		t.Errorf("%d progress lines, want %d:\n%s", n, len(want), progress.String())
	}
	var out bytes.Buffer
	if err := rep.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Machine Machine
		Metrics []map[string]any
	}
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Machine.CPUs == 0 || back.Machine.GoVersion == "" || back.Machine.NodeupVersion != "test" {
		t.Errorf("machine facts: %+v", back.Machine)
	}
	sync := back.Metrics[2] // single_client_tasks_sync
	for _, key := range []string{"name", "value", "unit", "baseline", "ratio_to_baseline", "runs", "min", "median", "max"} {
		if _, ok := sync[key]; !ok {
			t.Errorf("JSON metric lacks %q: %v", key, sync)
		}
	}
	out.Reset()
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "placement_group_create/removal") || strings.Contains(out.String(), "skipped") {
		t.Errorf("table lacks the placement metric or skips one:\n%s", out.String())
	}
}

// TestObjectChurn runs object_churn three times: on its 1 GiB store for
// short runs, which measure a throughput, a ratio to memcpy and a peak
// store use within the store; on a 40 MiB store with spilling off, which
// the chain's first result, one Put and one step leave too full for a
// second step or Put once fragmentation leaves no 16 MiB hole (when, varies
// from run to run), so the metric reports object_store_full with what it
// did until then instead of hanging; and on the same store with spilling
// on, where the run completes with the store's use bounded by it.
func TestObjectChurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Filter: regexp.MustCompile("^object_churn$"), Duration: 5 * time.Millisecond, Runs: 2, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Result{}
	for _, r := range rep.Metrics {
		byName[r.Name] = r
	}
	tp, peak, ops := byName["object_churn"], byName["object_churn_peak_store_bytes"], byName["object_churn_operations"]
	if tp.Error != "" || tp.Runs != 2 || !(tp.Value > 0) || tp.Ratio == nil || tp.Baseline != BaselineMemcpy {
		t.Fatalf("object_churn: %+v", tp)
	}
	if peak.Runs != 2 || !(peak.Max > 0) || peak.Max > churnStore || peak.Ratio != nil || !peak.LowerIsBetter {
		t.Errorf("peak store use: %+v", peak)
	}
	if !(ops.Min >= 2) { // at least one Put and one chain step per run
		t.Errorf("operations: %+v", ops)
	}

	e, err := newEnv(ctx, Options{Duration: 500 * time.Millisecond, Runs: 2, Scale: 1, Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	var m Metric
	for _, x := range Metrics() {
		if x.Name == "object_churn" {
			m = *x
		}
	}
	// Reference counting frees what the driver drops: a 40 MiB store, room
	// for two 16 MiB Puts, carries the whole run.
	m.StoreBytes = 40 << 20
	e.noSpill = true
	start := time.Now()
	res := runMetric(ctx, e, &m)
	t.Logf("40 MiB store: %s in %v", res[0].Error, time.Since(start))
	if res[0].Error != "" && (!strings.Contains(res[0].Error, "object_store_full after ") || !strings.Contains(res[0].Error, "peak store use") || !(res[0].Value > 0)) {
		t.Fatalf("a full store: %+v", res[0])
	}
	if p := res[1]; p.Value > 40<<20 {
		t.Errorf("on a 40 MiB store without spilling: peak store use %+v, above the store", p)
	}
	if sp := res[3]; sp.Name != "object_churn_spilled_bytes" || sp.Value != 0 {
		t.Errorf("without spilling, spilled bytes: %+v, want 0", sp)
	}

	e2, err := newEnv(ctx, Options{Duration: 50 * time.Millisecond, Runs: 1, Scale: 1, Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.close()
	res = runMetric(ctx, e2, &m)
	t.Logf("40 MiB store, spilling: %+v", res)
	if res[0].Error != "" || !(res[0].Value > 0) || res[1].Value > 40<<20 || res[2].Value < 2 || res[3].Value < 0 {
		t.Errorf("on a 40 MiB store with spilling: %+v, peak %+v, operations %+v; want no error, peak within 40 MiB, at least a Put and a chain step", res[0], res[1], res[2])
	}
}

// TestWarmJob: a WarmJob metric gets one untimed job first, whose run may
// last warmJobFactor run lengths, then one job per timed run.
func TestWarmJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := newEnv(ctx, Options{Duration: time.Millisecond, Runs: 3, Scale: 1, Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	var jobs []string // the job of each Setup, then the length of each run
	m := &Metric{Name: "warm", Unit: "ops/s", Group: GroupObjects, FreshJob: true, WarmJob: true,
		Setup: func(ctx context.Context, e *Env) (RunFunc, error) {
			nodes, err := worker.Nodes(ctx) // inside a job
			if err != nil || len(nodes) == 0 {
				return nil, fmt.Errorf("Setup outside a job: %v", err)
			}
			jobs = append(jobs, "setup")
			return func(ctx context.Context, d time.Duration) ([]float64, error) {
				jobs = append(jobs, d.String())
				return []float64{1}, nil
			}, nil
		}}
	res := runMetric(ctx, e, m)
	want := []string{"setup", "10ms", "setup", "1ms", "setup", "1ms", "setup", "1ms"}
	if res[0].Error != "" || res[0].Runs != 3 || !slices.Equal(jobs, want) {
		t.Fatalf("runs %d (%s), calls %v; want 3 timed runs after a warm job: %v", res[0].Runs, res[0].Error, jobs, want)
	}
}

// A metric's time limit covers its runs at their length: object_churn's
// 10-minute run (--duration 30s --runs 1) is not cut off at metricTimeout
// (it was, after 5 minutes, as "context deadline exceeded").
func TestTimeLimitCoversTheRuns(t *testing.T) {
	var churn *Metric
	for _, x := range Metrics() {
		if x.Name == "object_churn" {
			churn = x
		}
	}
	if got := timeLimit(churn, 1, 30*time.Second); got < 10*time.Minute+metricTimeout {
		t.Errorf("object_churn, one 30-s run: time limit %v, want at least its 10-minute run plus %v", got, metricTimeout)
	}
	if got := timeLimit(&Metric{}, 5, 500*time.Millisecond); got != metricTimeout+3*time.Second {
		t.Errorf("a plain metric, 5 runs of 500 ms: time limit %v, want %v", got, metricTimeout+3*time.Second)
	}
}
