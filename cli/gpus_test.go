package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

func gpuContext(t *testing.T, args ...string) *ucli.Context {
	t.Helper()
	return flagContext(t, gpuFlags(), args...)
}

// flagContext parses args against flags, as start would.
func flagContext(t *testing.T, flags []ucli.Flag, args ...string) *ucli.Context {
	t.Helper()
	set := flag.NewFlagSet("start", flag.ContinueOnError)
	for _, f := range flags {
		if err := f.Apply(set); err != nil {
			t.Fatal(err)
		}
	}
	if err := set.Parse(args); err != nil {
		t.Fatal(err)
	}
	return ucli.NewContext(App(), set, nil)
}

func TestGPUFlags(t *testing.T) {
	t.Parallel()
	g, err := gpuConfig(gpuContext(t, "--num-gpus", "4", "--gpu-model", "H100", "--gpu-memory", "80GiB", "--gpu-interval", "2s"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (cluster.GPUConfig{Declare: true, Count: 4, Model: "H100", MemoryBytes: 80 << 30, Interval: 2 * time.Second}); g != want {
		t.Errorf("gpuConfig = %+v, want %+v", g, want)
	}
	if g, err := gpuConfig(gpuContext(t)); err != nil || g.Declare {
		t.Errorf("no flags: %+v, %v; want detection", g, err)
	}
	if g, err := gpuConfig(gpuContext(t, "--num-gpus", "0")); err != nil || !g.Declare || g.Count != 0 {
		t.Errorf("--num-gpus 0: %+v, %v; want declared none", g, err)
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--num-gpus", "-1"}, `--num-gpus "-1": must be a whole number, 0 or more`},
		{[]string{"--num-gpus", "1.5"}, `--num-gpus "1.5"`},
		{[]string{"--num-gpus", "four"}, `--num-gpus "four"`},
		{[]string{"--gpu-model", "H100"}, `--gpu-model "H100" / --gpu-memory "" need --num-gpus N`},
		{[]string{"--num-gpus", "2", "--gpu-memory", "80XB"}, `--gpu-memory: invalid size "80XB"`},
		{[]string{"--gpu-interval", "5"}, `--gpu-interval "5": must be a duration of at least 100ms`},
		{[]string{"--gpu-interval", "1ms"}, `--gpu-interval "1ms"`},
	}
	for _, b := range bad {
		_, err := gpuConfig(gpuContext(t, b.args...))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("gpuConfig(%q) = %v, want an error containing %q", b.args, err, b.want)
		}
	}
}

// TestNodeConfigRefusesReservedResources: --resources may not name what the
// node sets itself, and the error says which flag sets it.
func TestNodeConfigRefusesReservedResources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ res, want string }{
		{"GPU=2", `--resources "GPU=2": GPU is not a custom resource; declare GPUs with --num-gpus`},
		{"gpu_memory=8", `gpu_memory is not a custom resource; declare GPUs with --num-gpus`},
		{"CPU=4", `CPU is not a custom resource; set it with --num-cpus`},
		{"memory=4", `memory is not a custom resource; set it with --memory`},
		{"object_store_memory=4", `object_store_memory is not a custom resource; set it with --object-store-memory`},
	} {
		_, err := nodeConfig(flagContext(t, nodeFlags(), "--data-dir", t.TempDir(), "--resources", tc.res), true, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--resources %s: %v, want an error containing %q", tc.res, err, tc.want)
		}
	}
}

func TestGPUModelValidatedByNodeConfig(t *testing.T) {
	t.Parallel()
	g := cluster.GPUConfig{Declare: true, Count: 1, Model: "!!!"}
	err := (cluster.Config{Head: true, DataDir: "/tmp/x", BindAddr: "127.0.0.1", RaftVoters: 1, Server: true, ObjectStoreMemory: 1 << 20, GPUs: g}).Validate()
	if err == nil || !strings.Contains(err.Error(), `--gpu-model "!!!": no model name in it`) {
		t.Errorf("Validate = %v, want it to name the model", err)
	}
}

func TestStatusGPUsTable(t *testing.T) {
	at := time.Now()
	st := &wire.StatusResponse{Nodes: []wire.NodeView{
		{Node: store.Node{ID: "a", Name: "n0"}},
		{Node: store.Node{ID: "b", Name: "n1"}, GPUs: &gpu.Status{Source: gpu.SourceNVML, Devices: []gpu.DeviceStatus{
			{Device: gpu.Device{Index: 0, Model: "H100", MemoryBytes: 80 << 30}, Healthy: true, GPU: sched.Unit / 4, Leases: 1,
				Sample: &gpu.Sample{At: at, UtilizationPercent: 37, MemoryUsedBytes: 10 << 30, MemoryTotalBytes: 80 << 30, TemperatureC: 55, PowerWatts: 210.4,
					Processes: []gpu.Process{{PID: 10}, {PID: 4242, Foreign: true}}}},
			{Device: gpu.Device{Index: 1, Model: "H100"}, Healthy: false, Reason: "Xid 79 (critical)"},
		}}},
	}}
	var b bytes.Buffer
	printGPUs(&b, st)
	out := b.String()
	for _, want := range []string{"n1    0    H100", "nvml", "0.25", "37%", "10.0GiB/80.0GiB", "55C", "210W", "1 (4242)", "UNHEALTHY: Xid 79 (critical)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status --gpus lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "n0") {
		t.Errorf("a node without GPUs is listed:\n%s", out)
	}
	b.Reset()
	printGPUs(&b, &wire.StatusResponse{})
	if !strings.Contains(b.String(), "(no node reported GPUs)") {
		t.Errorf("empty: %q", b.String())
	}
}

// TestNodeConfigObjectStorePrefault: --object-store-prefault reaches the
// node's config; without it the store is not populated at start.
func TestNodeConfigObjectStorePrefault(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		args := []string{"--data-dir", t.TempDir()}
		if on {
			args = append(args, "--object-store-prefault")
		}
		cfg, err := nodeConfig(flagContext(t, nodeFlags(), args...), true, nil)
		if err != nil || cfg.ObjectStorePrefault != on {
			t.Errorf("flags %v: ObjectStorePrefault = %v, %v; want %v", args, cfg.ObjectStorePrefault, err, on)
		}
	}
}
