package cluster

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/wire"
)

// TestGrafanaDashboardSeries: docs/grafana-dashboard.json is valid JSON and
// every ray_* and nodeup_* series its queries use is one the node describes
// (or Raft's and memberlist's own, nodeup_raft_* and nodeup_memberlist_*),
// so a renamed metric cannot leave the dashboard silently empty.
func TestGrafanaDashboardSeries(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	described := map[string]bool{}
	ch := make(chan *prometheus.Desc, 100)
	(&rayCollector{}).Describe(ch)
	(&nodeCollector{}).Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			described[m[1]] = true
		}
	}
	name := regexp.MustCompile(`\b(?:ray|nodeup)_[A-Za-z_]+`)
	used := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				used++
				if described[n] {
					continue
				}
				if n != "nodeup_raft_leader" && (strings.HasPrefix(n, "nodeup_raft_") || strings.HasPrefix(n, "nodeup_memberlist_")) {
					continue
				}
				t.Errorf("panel %q uses %s, which no collector describes", p.Title, n)
			}
		}
	}
	if used == 0 || !described["ray_actors"] {
		t.Fatalf("found %d series in the dashboard, described %v", used, described)
	}
}

// gathered returns each series of nd's /metrics registry as
// `name{label="v",...}` → value.
func gathered(t *testing.T, nd *Node) map[string]float64 {
	t.Helper()
	mfs, err := nd.metricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+`="`+lp.GetValue()+`"`)
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

// TestGPUMetrics: a node with two declared GPUs exports one healthy series
// per device and ray_resources for GPU; a device marked broken (as an Xid
// does) turns its series to 0 and the GPU total down by one.
func TestGPUMetrics(t *testing.T) {
	nd := testCluster(t, 1, func(_ int, c *Config) {
		c.GPUs = GPUConfig{Declare: true, Count: 2, Model: "H100", MemoryBytes: 80 << 30}
	})[0]
	m := gathered(t, nd)
	for _, k := range []string{`nodeup_gpu_healthy{GpuDeviceName="H100",GpuIndex="0"}`, `nodeup_gpu_healthy{GpuDeviceName="H100",GpuIndex="1"}`} {
		if m[k] != 1 {
			t.Errorf("%s = %v, want 1 (all: %v)", k, m[k], m)
		}
	}
	if k := `ray_resources{Name="GPU",State="TOTAL"}`; m[k] != 2 {
		t.Errorf("%s = %v, want 2", k, m[k])
	}
	if k := `nodeup_gpu_memory_total_bytes{GpuDeviceName="H100",GpuIndex="1"}`; m[k] != 80<<30 {
		t.Errorf("%s = %v, want %d", k, m[k], 80<<30)
	}
	nd.gpus.sup.Allocator().SetHealth(1, false, "Xid 79 (critical)")
	nd.onGPUHealth(gpu.HealthEvent{Index: 1, Reason: "Xid 79 (critical)"})
	m = gathered(t, nd)
	if k := `nodeup_gpu_healthy{GpuDeviceName="H100",GpuIndex="1"}`; m[k] != 0 {
		t.Errorf("%s = %v after an Xid, want 0", k, m[k])
	}
	if k := `ray_resources{Name="GPU",State="TOTAL"}`; m[k] != 1 {
		t.Errorf("%s = %v after an Xid, want 1", k, m[k])
	}
}

// TestRPCMetricsPerMethod: each RPC a node serves is timed per method, and
// an error answer counted by method and code; a method nobody registered
// adds no series.
func TestRPCMetricsPerMethod(t *testing.T) {
	nd := testCluster(t, 1, nil)[0]
	nd.metricsRegistry() // installs the observer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var st wire.StatusResponse
	if err := nd.pool.Call(ctx, nd.RPCAddr(), wire.MethodStatus, &wire.Empty{}, &st); err != nil {
		t.Fatal(err)
	}
	_ = nd.pool.Call(ctx, nd.RPCAddr(), wire.MethodActorGet, &wire.ActorGetRequest{ActorID: "no-such-actor"}, &wire.ActorInfo{})
	_ = nd.pool.Call(ctx, nd.RPCAddr(), "No.Such", &wire.Empty{}, nil)
	mfs, err := nd.metricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts, errs := map[string]uint64{}, map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			switch mf.GetName() {
			case "nodeup_rpc_server_duration_seconds":
				counts[labels["method"]] = m.GetHistogram().GetSampleCount()
			case "nodeup_rpc_server_errors_total":
				errs[labels["method"]+"/"+labels["code"]] = m.GetCounter().GetValue()
			}
		}
	}
	if counts[wire.MethodStatus] < 1 {
		t.Errorf("no Cluster.Status in nodeup_rpc_server_duration_seconds: %v", counts)
	}
	if errs[wire.MethodActorGet+"/"+wire.CodeNotFound] < 1 {
		t.Errorf("no Actor.Get/not_found in nodeup_rpc_server_errors_total: %v", errs)
	}
	if _, ok := counts["No.Such"]; ok {
		t.Errorf("an unregistered method got a series: %v", counts)
	}
}
