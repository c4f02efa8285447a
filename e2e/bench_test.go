package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// benchReport is the part of `nodeup bench --json` the tests read.
type benchReport struct {
	Machine struct {
		CPUs          int    `json:"cpus"`
		GoVersion     string `json:"go_version"`
		NodeupVersion string `json:"nodeup_version"`
	} `json:"machine"`
	Metrics []struct {
		Name     string   `json:"name"`
		Value    float64  `json:"value"`
		Unit     string   `json:"unit"`
		Baseline string   `json:"baseline"`
		Ratio    *float64 `json:"ratio_to_baseline"`
		Runs     int      `json:"runs"`
		Skipped  string   `json:"skipped"`
		Error    string   `json:"error"`
	} `json:"metrics"`
}

func runBench(t *testing.T, env []string, args ...string) (*benchReport, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeupBin, append([]string{"bench", "--json"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		t.Fatalf("nodeup bench %v: %v\nstderr:\n%s\nstdout:\n%s", args, err, stderr.String(), stdout.String())
	}
	var rep benchReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, stdout.String())
	}
	return &rep, stderr.String()
}

// TestBench runs the whole suite from the nodeup binary with a tiny duration:
// the binary serves as the worker of the bench's jobs (NODEUP_WORKER=1), and
// every metric must return a positive value (none is skipped: the embedded
// cluster has the second node the pull needs). No speed is asserted.
func TestBench(t *testing.T) {
	start := time.Now()
	rep, progress := runBench(t, []string{"NODEUP_ADDRESS="}, "--duration", "1ms", "--runs", "2", "--scale", "0.01")
	t.Logf("nodeup bench: %d metrics in %s", len(rep.Metrics), time.Since(start).Round(time.Millisecond))
	if rep.Machine.CPUs == 0 || rep.Machine.GoVersion == "" || rep.Machine.NodeupVersion == "" {
		t.Errorf("machine facts missing: %+v", rep.Machine)
	}
	// Counts of what may rightly not happen in a run: the churn spills
	// only when reference counting falls behind (CI once saw 0 bytes).
	mayBeZero := map[string]bool{"object_churn_spilled_bytes": true}
	names := map[string]bool{}
	for _, m := range rep.Metrics {
		names[m.Name] = true
		switch {
		case m.Error != "":
			t.Errorf("%s failed: %s", m.Name, m.Error)
		case m.Skipped != "":
			t.Errorf("%s skipped: %s", m.Name, m.Skipped)
		case mayBeZero[m.Name] && m.Value == 0 && m.Runs == 2 && m.Unit != "":
		case !(m.Value > 0) || m.Runs != 2 || m.Unit == "":
			t.Errorf("%s: value %v %s over %d runs", m.Name, m.Value, m.Unit, m.Runs)
		case m.Baseline != "" && (m.Ratio == nil || !(*m.Ratio > 0)):
			t.Errorf("%s: no ratio to its baseline %s", m.Name, m.Baseline)
		}
		if !strings.Contains(progress, m.Name+": ") {
			t.Errorf("no progress line for %s on stderr", m.Name)
		}
	}
	for _, n := range []string{"single_client_tasks_sync", "single_client_tasks_async", "multi_client_tasks_async",
		"1_1_actor_calls_sync", "1_1_actor_calls_async", "1_1_actor_calls_concurrent", "1_n_actor_calls_async",
		"n_n_actor_calls_async", "n_n_actor_calls_with_arg_async", "single_client_put_calls", "multi_client_put_calls",
		"single_client_put_gigabytes", "multi_client_put_gigabytes", "single_client_get_calls",
		"single_client_tasks_and_get_batch", "single_client_get_object_containing_10k_refs", "single_client_wait_1k_refs",
		"placement_group_create/removal", "memcpy_gigabytes", "unix_socket_round_trips", "loopback_tcp_gigabytes",
		"cross_node_object_pull_gigabytes", "task_latency_p50", "task_latency_p99", "idle_node_rss",
		"scalability_10000_args", "scalability_3000_returns", "scalability_get_10000_refs", "scalability_100000_queued_tasks",
		"object_churn", "object_churn_peak_store_bytes", "object_churn_operations"} {
		if !names[n] {
			t.Errorf("metric %s missing from the report", n)
		}
	}
}

// TestBenchAgainstNode runs part of the suite against a node process
// (--address): the node starts nodeup as the job's worker, and the two-node
// metric is skipped with a reason on a one-node cluster.
func TestBenchAgainstNode(t *testing.T) {
	head := startHead(t, t.TempDir())
	rep, _ := runBench(t, nil, "--address", head.sock(), "--duration", "1ms", "--runs", "1",
		"--filter", "^(single_client_tasks_async|single_client_put_gigabytes|cross_node_object_pull_gigabytes)$")
	var got []string
	for _, m := range rep.Metrics {
		got = append(got, m.Name)
		switch m.Name {
		case "cross_node_object_pull_gigabytes":
			if !strings.Contains(m.Skipped, "one alive node") {
				t.Errorf("cross-node pull on one node: skipped %q, error %q", m.Skipped, m.Error)
			}
		default:
			if m.Error != "" || !(m.Value > 0) {
				t.Errorf("%s: value %v, error %q", m.Name, m.Value, m.Error)
			}
		}
	}
	want := []string{"memcpy_gigabytes", "loopback_tcp_gigabytes", "single_client_tasks_async", "single_client_put_gigabytes", "cross_node_object_pull_gigabytes"}
	if !slices.Equal(got, want) {
		t.Errorf("metrics %v, want %v", got, want)
	}
}
