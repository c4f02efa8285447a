package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

func TestGPUConfigValidate(t *testing.T) {
	cases := []struct {
		g    GPUConfig
		res  sched.ResourceSet
		want string
	}{
		{GPUConfig{Declare: true, Count: -2}, nil, "--num-gpus -2: must be 0 or more"},
		{GPUConfig{Model: "H100"}, nil, `--gpu-model "H100" / --gpu-memory 0 given without --num-gpus`},
		{GPUConfig{Interval: time.Millisecond}, nil, "--gpu-interval 1ms: must be at least 100ms"},
		{GPUConfig{Declare: true, Count: 1, Model: "***"}, nil, `--gpu-model "***": no model name in it`},
		{GPUConfig{}, sched.ResourceSet{sched.GPU: sched.Unit}, `resource "GPU" in the node's resources`},
		{GPUConfig{}, sched.ResourceSet{gpu.MemoryResource: sched.Unit}, `resource "gpu_memory" in the node's resources`},
	}
	for _, c := range cases {
		if err := c.g.validate(c.res); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("validate(%+v, %v) = %v, want %q", c.g, c.res, err, c.want)
		}
	}
	if err := (GPUConfig{Declare: true, Count: 4, Model: "NVIDIA H100 80GB HBM3", Interval: time.Second}).validate(nil); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
	if err := checkNonNegative(sched.ResourceSet{sched.GPU: sched.QuantityOf(3) / 2}); err == nil || !strings.Contains(err.Error(), "GPU request 1.5 above 1 must be a whole number") {
		t.Errorf("GPU 1.5 lease: %v", err)
	}
}

// A node's declared GPUs reach the leader's node table and, through the
// heartbeat, its status; a device going bad takes it out of the totals,
// the free pool and scheduling, with a status flag.
func TestGPUStatusAndHealthReachTheLeader(t *testing.T) {
	nodes := testCluster(t, 2, func(i int, c *Config) {
		c.RaftVoters = 1
		if i == 1 {
			c.GPUs = GPUConfig{Declare: true, Count: 2, Model: "H100", MemoryBytes: 80 << 30}
		}
	})
	gpuNode := nodes[1]
	nodeView := func() (*wire.NodeView, error) {
		st, err := statusVia(nodes[0])
		if err != nil {
			return nil, err
		}
		for i := range st.Nodes {
			if st.Nodes[i].ID == gpuNode.ID() {
				return &st.Nodes[i], nil
			}
		}
		return nil, fmt.Errorf("node %s not in status", gpuNode.Name())
	}
	testutil.Until(t, 15*time.Second, "GPU status at the leader", func() error {
		v, err := nodeView()
		if err != nil {
			return err
		}
		if v.Resources[sched.GPU] != sched.QuantityOf(2) || v.Resources["accelerator_type:H100"] != sched.Unit {
			return fmt.Errorf("resources %v", v.Resources)
		}
		if v.GPUs == nil || v.GPUs.Source != gpu.SourceDeclared || len(v.GPUs.Devices) != 2 || !v.GPUs.Devices[1].Healthy {
			return fmt.Errorf("GPUs %+v", v.GPUs)
		}
		return nil
	})
	if st := nodes[0].GPUStatus(); len(st.Devices) != 0 {
		t.Errorf("node without GPUs reports %+v", st)
	}

	// As the supervisor does on an Xid: mark the device, then OnHealth.
	gpuNode.gpus.sup.Allocator().SetHealth(1, false, "Xid 79 (critical)")
	gpuNode.onGPUHealth(gpu.HealthEvent{Index: 1, Reason: "Xid 79 (critical)"})
	if a := gpuNode.local.available(); a[sched.GPU] != sched.QuantityOf(1) || a[gpu.MemoryResource] != sched.QuantityOf(80<<30) {
		t.Errorf("free pool after a device went bad: %v, want GPU 1, gpu_memory 80 GiB", a)
	}
	testutil.Until(t, 15*time.Second, "the leader sees the device gone", func() error {
		v, err := nodeView()
		if err != nil {
			return err
		}
		if v.Resources[sched.GPU] != sched.QuantityOf(1) {
			return fmt.Errorf("resources %v", v.Resources)
		}
		if v.GPUs == nil || len(v.GPUs.Devices) != 2 {
			return fmt.Errorf("GPUs %+v", v.GPUs)
		}
		if d := v.GPUs.Devices[1]; d.Healthy || d.Reason != "Xid 79 (critical)" {
			return fmt.Errorf("device 1 %+v", d)
		}
		return nil
	})
	// Two GPUs are now infeasible on that node; one is granted device 0.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &wire.LeaseRequest{JobID: "j", BinaryHash: strings.Repeat("ab", 32), Resources: sched.ResourceSet{sched.GPU: sched.QuantityOf(2)}, Spilled: true}
	rep, err := gpuNode.leaseWorker(ctx, req)
	if err != nil || !strings.Contains(rep.Infeasible.Why(), "GPU") {
		t.Errorf("2-GPU lease on a node with one healthy GPU: %+v, %v; want infeasible", rep, err)
	}
	l := gpuNode.local.tryGrant(sched.ResourceSet{sched.GPU: sched.Unit})
	if l == nil || l.gpus.CUDAVisibleDevices() != "0" {
		t.Fatalf("1-GPU grant: %+v, want device 0", l)
	}
	if again := gpuNode.local.tryGrant(sched.ResourceSet{sched.GPU: sched.Unit / 2}); again != nil {
		t.Errorf("a grant past the healthy devices: %+v", again.gpus)
	}
	gpuNode.local.release(l.id)
	if d := gpuNode.GPUStatus().Devices[0]; d.Leases != 0 || d.GPU != 0 {
		t.Errorf("device 0 after release: %+v", d)
	}
}
