package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
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
