package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
)

// gpuReport is what a task or actor saw of its GPUs.
type gpuReport struct {
	CUDA    string // CUDA_VISIBLE_DEVICES
	CUDASet bool   // whether it was set at all
	NVIDIA  string // NVIDIA_VISIBLE_DEVICES
	IDs     []int  // GPUIDs
	PID     int
}

func reportGPUs(ctx context.Context) (gpuReport, error) {
	cuda, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	ids, err := GPUIDs(ctx)
	return gpuReport{CUDA: cuda, CUDASet: set, NVIDIA: os.Getenv("NVIDIA_VISIBLE_DEVICES"), IDs: ids, PID: os.Getpid()}, err
}

// rendezvous writes one file into dir and waits (at most 15 s) until dir
// holds n files: n callers that all return passed it at the same time.
func rendezvous(dir string, n int) error {
	f, err := os.CreateTemp(dir, "in-")
	if err != nil {
		return err
	}
	f.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		if len(ents) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rendezvous: %d of %d arrived within 15s: they could not run at once", len(ents), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var (
	gpuProbe = Register2(func(ctx context.Context, dir string, n int) (gpuReport, error) {
		if n > 0 {
			if err := rendezvous(dir, n); err != nil {
				return gpuReport{}, err
			}
		}
		return reportGPUs(ctx)
	})
	gpuActor      = RegisterActor0(func(ctx context.Context) (*gpuHolder, error) { return &gpuHolder{}, nil })
	gpuActorProbe = RegisterMethod0((*gpuHolder).Report)
)

type gpuHolder struct{}

func (*gpuHolder) Report(ctx context.Context) (gpuReport, error) { return reportGPUs(ctx) }

// startGPUCluster starts one in-process node per entry of gpus, node i
// declaring gpus[i] H100s of 80 GiB each, and connects the driver to node 0.
func startGPUCluster(t *testing.T, gpus ...int) []*cluster.Node {
	t.Helper()
	return startClusterInit(t, len(gpus), func(i int, cfg *cluster.Config) {
		cfg.GPUs = cluster.GPUConfig{Declare: true, Count: gpus[i], Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30}
	})
}

// waitGPUs polls nd's devices until ok accepts them (at most 10 s).
func waitGPUs(t *testing.T, nd *cluster.Node, what string, ok func([]gpu.DeviceStatus) bool) {
	t.Helper()
	testutil.Until(t, 10*time.Second, what, func() error {
		if devs := nd.GPUStatus().Devices; !ok(devs) {
			return fmt.Errorf("devices now %+v", devs)
		}
		return nil
	})
}

func allFree(devs []gpu.DeviceStatus) bool {
	for _, d := range devs {
		if d.GPU != 0 || d.Leases != 0 || d.MemoryBytes != 0 {
			return false
		}
	}
	return true
}

func TestGPUTasksSeeExactlyTheirDevices(t *testing.T) {
	nodes := startGPUCluster(t, 2)
	ctx := ctxT(t)
	if st := nodes[0].GPUStatus(); st.Source != gpu.SourceDeclared || len(st.Devices) != 2 {
		t.Fatalf("GPU status %+v, want 2 declared devices", st)
	}
	if r := nodes[0].Resources(); r[sched.GPU] != sched.QuantityOf(2) || r["accelerator_type:H100"] != sched.Unit || r[gpu.MemoryResource] != sched.QuantityOf(160<<30) {
		t.Fatalf("node resources %v, want GPU 2, accelerator_type:H100 1, gpu_memory 160 GiB", r)
	}

	// A CPU task: the device lists are set, and empty.
	cpu, err := gpuProbe.Remote(ctx, "", 0).Get(ctx)
	if err != nil || !cpu.CUDASet || cpu.CUDA != "" || cpu.NVIDIA != "" || len(cpu.IDs) != 0 {
		t.Fatalf("CPU task saw %+v, %v; want CUDA_VISIBLE_DEVICES set and empty", cpu, err)
	}

	// One GPU: one device, held while the task runs and given back after.
	hold := t.TempDir()
	ref := Must(gpuProbe.Options(GPUs(1))).Remote(ctx, hold, 2)
	waitGPUs(t, nodes[0], "a running 1-GPU task holds one device", func(d []gpu.DeviceStatus) bool {
		return len(d) == 2 && d[0].GPU+d[1].GPU == sched.Unit && d[0].Leases+d[1].Leases == 1
	})
	if err := os.WriteFile(filepath.Join(hold, "test"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	one, err := ref.Get(ctx)
	if err != nil || (one.CUDA != "0" && one.CUDA != "1") || one.NVIDIA != one.CUDA || !slices.Equal(one.IDs, []int{atoi(one.CUDA)}) {
		t.Fatalf("1-GPU task saw %+v, %v; want exactly one device", one, err)
	}
	if one.PID == cpu.PID {
		t.Errorf("the GPU task ran in the CPU worker process %d", cpu.PID)
	}
	waitGPUs(t, nodes[0], "devices free after the task", allFree)

	// Two whole-GPU tasks at once: distinct devices.
	both := t.TempDir()
	r1, r2 := Must(gpuProbe.Options(GPUs(1))).Remote(ctx, both, 2), Must(gpuProbe.Options(GPUs(1))).Remote(ctx, both, 2)
	a, errA := r1.Get(ctx)
	b, errB := r2.Get(ctx)
	if errA != nil || errB != nil {
		t.Fatalf("two 1-GPU tasks at once: %v, %v", errA, errB)
	}
	got := []string{a.CUDA, b.CUDA}
	slices.Sort(got)
	if !slices.Equal(got, []string{"0", "1"}) {
		t.Fatalf("two 1-GPU tasks at once saw devices %q and %q, want 0 and 1", a.CUDA, b.CUDA)
	}

	// Four 0.25-GPU tasks at once share one device (and its worker process).
	quarter := t.TempDir()
	var refs []Ref[gpuReport]
	for i := 0; i < 4; i++ {
		refs = append(refs, Must(gpuProbe.Options(GPUs(0.25), CPUs(0))).Remote(ctx, quarter, 4))
	}
	qs, err := GetAll(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.CUDA != qs[0].CUDA || q.PID != qs[0].PID || len(q.IDs) != 1 {
			t.Fatalf("four 0.25-GPU tasks saw %+v, want one shared device and process", qs)
		}
	}

	// Two GPUs in one task.
	two, err := Must(gpuProbe.Options(GPUs(2))).Remote(ctx, "", 0).Get(ctx)
	if err != nil || two.CUDA != "0,1" || !slices.Equal(two.IDs, []int{0, 1}) {
		t.Fatalf("2-GPU task saw %+v, %v", two, err)
	}
	waitGPUs(t, nodes[0], "devices free after every task", allFree)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func TestGPUActorHoldsItsDeviceUntilItDies(t *testing.T) {
	nodes := startGPUCluster(t, 2)
	ctx := ctxT(t)
	h, err := Must(gpuActor.Options(GPUs(1))).Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := gpuActorProbe.Remote(ctx, h).Get(ctx)
	if err != nil || len(got.IDs) != 1 || got.CUDA != strconv.Itoa(got.IDs[0]) {
		t.Fatalf("GPU actor saw %+v, %v; want one device", got, err)
	}
	mine := got.IDs[0]
	// While it lives, tasks get the other device only.
	for i := 0; i < 3; i++ {
		r, err := Must(gpuProbe.Options(GPUs(1))).Remote(ctx, "", 0).Get(ctx)
		if err != nil || r.CUDA != strconv.Itoa(1-mine) {
			t.Fatalf("task next to the GPU actor saw %+v, %v; want device %d", r, err, 1-mine)
		}
	}
	waitGPUs(t, nodes[0], "only the actor's device reserved", func(d []gpu.DeviceStatus) bool {
		return d[mine].GPU == sched.Unit && d[mine].Leases == 1 && d[1-mine].Leases == 0
	})
	if err := Kill(ctx, h, true); err != nil {
		t.Fatal(err)
	}
	waitGPUs(t, nodes[0], "the actor's device free after it died", allFree)
}

func TestGPURequestErrors(t *testing.T) {
	startGPUCluster(t, 2)
	ctx := ctxT(t)
	_, err := gpuProbe.Options(GPUs(1.5))
	if err == nil || !strings.Contains(err.Error(), "option GPUs 1.5: above 1, GPUs must be a whole number") {
		t.Errorf("GPUs(1.5): %v", err)
	}
	_, err = gpuProbe.Options(GPUMemory(-1))
	if err == nil || !strings.Contains(err.Error(), "option GPUMemory -1") {
		t.Errorf("GPUMemory(-1): %v", err)
	}
	var ie *InfeasibleError
	_, err = Must(gpuProbe.Options(GPUs(3), FailIfInfeasible())).Remote(ctx, "", 0).Get(ctx)
	if !errors.As(err, &ie) || !strings.Contains(ie.Reason, "GPU") {
		t.Errorf("GPUs(3) on a 2-GPU node: %v, want *InfeasibleError naming GPU", err)
	}
	// 100 GiB fits the node's gpu_memory total but no single 80 GiB device.
	_, err = Must(gpuProbe.Options(GPUMemory(100<<30), FailIfInfeasible())).Remote(ctx, "", 0).Get(ctx)
	if !errors.As(err, &ie) || !strings.Contains(ie.Reason, "no healthy device can hold") {
		t.Errorf("GPUMemory(100GiB) on 80 GiB devices: %v, want *InfeasibleError from the device layout", err)
	}
	// 40 GiB lands on one device and reserves half of it.
	r, err := Must(gpuProbe.Options(GPUMemory(40<<30))).Remote(ctx, "", 0).Get(ctx)
	if err != nil || len(r.IDs) != 1 {
		t.Errorf("GPUMemory(40GiB): %+v, %v", r, err)
	}
	// An actor with that demand stays PENDING, reported infeasible with the
	// device layout's reason (it used to wait as if the node were busy).
	h, err := Must(gpuActor.Options(GPUMemory(100 << 30))).Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 20*time.Second, "actor needing 100 GiB on one 80 GiB device PENDING with an infeasible reason", func() error {
		list, err := ListActors(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var info *ActorInfo
		for i := range list {
			if list[i].ActorID == h.ID() {
				info = &list[i]
			}
		}
		if info != nil && info.State == "PENDING" && info.Infeasible && !strings.HasPrefix(info.PendingReason, "infeasible") && strings.Contains(info.PendingReason, "no healthy device can hold") {
			return nil
		}
		return fmt.Errorf("actor %+v", info)
	})
	if err := Kill(ctx, h, true); err != nil {
		t.Fatal(err)
	}
}

func TestParseGPUIDs(t *testing.T) {
	if ids, err := parseGPUIDs(""); err != nil || len(ids) != 0 || ids == nil {
		t.Errorf(`parseGPUIDs("") = %v, %v; want an empty list`, ids, err)
	}
	if ids, err := parseGPUIDs("0, 3"); err != nil || !slices.Equal(ids, []int{0, 3}) {
		t.Errorf(`parseGPUIDs("0, 3") = %v, %v`, ids, err)
	}
	if _, err := parseGPUIDs("GPU-8f3c"); err == nil || !strings.Contains(err.Error(), `"GPU-8f3c" is not a device index`) {
		t.Errorf("UUID entry: %v", err)
	}
	t.Setenv(EnvNumGPUs, "four")
	if err := (initConfig{}).embeddedGPUs(&EmbeddedSpec{}); err == nil || !strings.Contains(err.Error(), `NODEUP_NUM_GPUS="four"`) {
		t.Errorf("bad NODEUP_NUM_GPUS: %v", err)
	}
	t.Setenv(EnvNumGPUs, "4")
	t.Setenv(EnvGPUModel, "H100")
	var g EmbeddedSpec
	if err := (initConfig{}).embeddedGPUs(&g); err != nil || !g.DeclareGPUs || g.NumGPUs != 4 || g.GPUModel != "H100" {
		t.Errorf("NODEUP_NUM_GPUS=4: %+v, %v", g, err)
	}
}

// reservedDevices waits (at most 10 s) until nd's devices held whole by
// exactly one reservation each are n, and returns their indices.
func reservedDevices(t *testing.T, nd *cluster.Node, n int) []int {
	t.Helper()
	var ids []int
	waitGPUs(t, nd, fmt.Sprintf("%d devices reserved", n), func(devs []gpu.DeviceStatus) bool {
		ids = ids[:0]
		for _, d := range devs {
			if d.GPU == sched.Unit && d.Leases == 1 {
				ids = append(ids, d.Index)
			} else if d.GPU != 0 || d.Leases != 0 {
				return false
			}
		}
		return len(ids) == n
	})
	return ids
}

// Seed 003's placement-group example: GPU work in a {"GPU": 1} bundle sees
// the device the bundle reserved (it used to see none), fractions in the
// bundle share it, plain GPU work gets the other device, and removing the
// group frees both.
func TestGPUsInAPlacementGroupBundle(t *testing.T) {
	nodes := startGPUCluster(t, 2)
	ctx := ctxT(t)
	pg, err := CreatePlacementGroup(ctx, []map[string]float64{{"GPU": 1}}, "PACK")
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	held := reservedDevices(t, nodes[0], 1)[0]
	want := strconv.Itoa(held)

	// The indexed and the any-bundle (seed 003's) forms: the bundle's device.
	for _, idx := range []int{0, -1} {
		r, err := Must(gpuProbe.Options(GPUs(1), CPUs(0), InPlacementGroup(pg, idx))).Remote(ctx, "", 0).Get(ctx)
		if err != nil || r.CUDA != want || r.NVIDIA != want || !slices.Equal(r.IDs, []int{held}) {
			t.Fatalf("GPUs(1) task in bundle %d saw %+v, %v; want device %d, the bundle's", idx, r, err, held)
		}
	}
	// Two halves at once share the bundle's device.
	both := t.TempDir()
	h1 := Must(gpuProbe.Options(GPUs(0.5), CPUs(0), InPlacementGroup(pg, 0))).Remote(ctx, both, 2)
	h2 := Must(gpuProbe.Options(GPUs(0.5), CPUs(0), InPlacementGroup(pg, -1))).Remote(ctx, both, 2)
	halves, err := GetAll(ctx, []Ref[gpuReport]{h1, h2})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range halves {
		if h.CUDA != want || !slices.Equal(h.IDs, []int{held}) {
			t.Fatalf("two 0.5-GPU tasks in the bundle saw %+v; want both on device %d", halves, held)
		}
	}
	// Plain GPU work never gets the bundle's device, even while nothing runs
	// in the bundle.
	for i := 0; i < 3; i++ {
		r, err := Must(gpuProbe.Options(GPUs(1))).Remote(ctx, "", 0).Get(ctx)
		if err != nil || r.CUDA != strconv.Itoa(1-held) {
			t.Fatalf("plain GPUs(1) task next to the bundle saw %+v, %v; want device %d", r, err, 1-held)
		}
	}
	// An actor in the bundle holds the bundle's device; plain work still
	// gets the other one.
	a, err := Must(gpuActor.Options(GPUs(1), InPlacementGroup(pg, 0))).Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := gpuActorProbe.Remote(ctx, a).Get(ctx)
	if err != nil || got.CUDA != want || !slices.Equal(got.IDs, []int{held}) {
		t.Fatalf("GPU actor in the bundle saw %+v, %v; want device %d", got, err, held)
	}
	if r, err := Must(gpuProbe.Options(GPUs(1))).Remote(ctx, "", 0).Get(ctx); err != nil || r.CUDA != strconv.Itoa(1-held) {
		t.Fatalf("plain GPUs(1) task next to the bundle's actor saw %+v, %v; want device %d", r, err, 1-held)
	}
	// Removing the group kills the actor and frees the device.
	if err := pg.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	waitActorState(t, ctx, a.ID(), "DEAD")
	waitGPUs(t, nodes[0], "devices free after the group was removed", allFree)
	two, err := Must(gpuProbe.Options(GPUs(2))).Remote(ctx, "", 0).Get(ctx)
	if err != nil || two.CUDA != "0,1" {
		t.Fatalf("2-GPU task after the group was removed saw %+v, %v", two, err)
	}
}

// Two 1-GPU bundles of one group on a node get distinct devices, and work
// in each sees its own; a 1-GPU task in a 2-GPU bundle gets one of the
// bundle's two devices, and two such tasks get both.
func TestGPUBundlesGetDistinctDevices(t *testing.T) {
	nodes := startGPUCluster(t, 2)
	ctx := ctxT(t)
	pg, err := CreatePlacementGroup(ctx, []map[string]float64{{"GPU": 1, "CPU": 1}, {"GPU": 1, "CPU": 1}}, "STRICT_PACK")
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if held := reservedDevices(t, nodes[0], 2); !slices.Equal(held, []int{0, 1}) {
		t.Fatalf("two 1-GPU bundles hold devices %v, want 0 and 1", held)
	}
	dir := t.TempDir()
	r0 := Must(gpuProbe.Options(GPUs(1), InPlacementGroup(pg, 0))).Remote(ctx, dir, 2)
	r1 := Must(gpuProbe.Options(GPUs(1), InPlacementGroup(pg, 1))).Remote(ctx, dir, 2)
	seen, err := GetAll(ctx, []Ref[gpuReport]{r0, r1})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen[0].IDs) != 1 || len(seen[1].IDs) != 1 || seen[0].CUDA == seen[1].CUDA {
		t.Fatalf("tasks in bundles 0 and 1 saw %+v; want one distinct device each", seen)
	}
	// Each bundle keeps its device: bundle 0's next task sees the same one.
	again, err := Must(gpuProbe.Options(GPUs(1), InPlacementGroup(pg, 0))).Remote(ctx, "", 0).Get(ctx)
	if err != nil || again.CUDA != seen[0].CUDA {
		t.Fatalf("second task in bundle 0 saw %+v, %v; want device %s", again, err, seen[0].CUDA)
	}
	if err := pg.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	waitGPUs(t, nodes[0], "devices free after the group was removed", allFree)

	big, err := CreatePlacementGroup(ctx, []map[string]float64{{"GPU": 2}}, "PACK")
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	pair := t.TempDir()
	p0 := Must(gpuProbe.Options(GPUs(1), CPUs(0), InPlacementGroup(big, 0))).Remote(ctx, pair, 2)
	p1 := Must(gpuProbe.Options(GPUs(1), CPUs(0), InPlacementGroup(big, -1))).Remote(ctx, pair, 2)
	seen, err = GetAll(ctx, []Ref[gpuReport]{p0, p1})
	if err != nil {
		t.Fatal(err)
	}
	got := []string{seen[0].CUDA, seen[1].CUDA}
	slices.Sort(got)
	if !slices.Equal(got, []string{"0", "1"}) {
		t.Fatalf("two 1-GPU tasks in a 2-GPU bundle saw %q; want devices 0 and 1, one each", got)
	}
	if err := big.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	waitGPUs(t, nodes[0], "devices free after the 2-GPU group was removed", allFree)
}
