package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// GPUConfig says how a node finds its GPUs (docs/gpus.md). The zero value
// detects them: the embedded NVML helper, then nvidia-smi, then none.
type GPUConfig struct {
	// Declare replaces detection with Count devices named Model, as
	// --num-gpus N --gpu-model NAME (Ray's --num-gpus). Declared devices
	// have indices 0..Count-1, no UUIDs and no telemetry; Count 0 declares a
	// node without GPUs.
	Declare bool
	// Count is the number of declared devices (0 or more; with Declare).
	Count int
	// Model is the declared devices' product name, full ("NVIDIA H100 80GB
	// HBM3") or short ("H100"); the node offers accelerator_type:<short
	// name> = 1 for it. "" offers no accelerator_type. Only with Declare.
	Model string
	// MemoryBytes is each declared device's memory in bytes (--gpu-memory);
	// 0 means unknown, and then the node offers no gpu_memory resource.
	MemoryBytes uint64
	// Interval is how often telemetry is sampled (--gpu-interval); zero
	// means gpu.DefaultInterval (5 s). At least 100 ms when set.
	Interval time.Duration
}

// validate names the first bad setting and what is accepted.
func (g GPUConfig) validate(res sched.ResourceSet) error {
	for _, name := range []string{sched.GPU, gpu.MemoryResource} {
		if _, ok := res[name]; ok {
			return fmt.Errorf("resource %q in the node's resources: GPUs are detected, or declared with --num-gpus (GPUConfig), not set as a resource", name)
		}
	}
	switch {
	case g.Count < 0:
		return fmt.Errorf("--num-gpus %d: must be 0 or more", g.Count)
	case !g.Declare && (g.Count != 0 || g.Model != "" || g.MemoryBytes != 0):
		return fmt.Errorf("--gpu-model %q / --gpu-memory %d given without --num-gpus: only declared GPUs take a model and memory size (detected ones report their own)", g.Model, g.MemoryBytes)
	case g.Interval < 0 || g.Interval > 0 && g.Interval < 100*time.Millisecond:
		return fmt.Errorf("--gpu-interval %s: must be at least 100ms (or 0 for the default %s)", g.Interval, gpu.DefaultInterval)
	}
	if g.Model != "" {
		short := gpu.ShortModel(g.Model)
		if short == "" {
			return fmt.Errorf("--gpu-model %q: no model name in it; use a product name (\"NVIDIA H100 80GB HBM3\") or a short name (\"H100\")", g.Model)
		}
		if err := sched.ValidateResourceName(sched.AcceleratorTypeResource(short)); err != nil {
			return fmt.Errorf("--gpu-model %q: %w", g.Model, err)
		}
	}
	return nil
}

// nodeGPUs is a node's GPU state.
type nodeGPUs struct {
	sup   *gpu.Supervisor   // set by Start (a supervisor with no devices on a node without GPUs)
	mu    sync.Mutex        // orders health changes after Start's setup
	ready bool              // guarded by mu: the local scheduler is set up
	total sched.ResourceSet // guarded by mu: GPU resources last applied to the local pool
}

// stopGPUs stops the supervisor (its helper) at node shutdown.
func (n *Node) stopGPUs() {
	if n.gpus.sup != nil {
		n.gpus.sup.Stop()
	}
}

// startGPUs starts the node's GPU supervisor (detection or declared
// devices). A node without GPUs gets a supervisor with none, which logs one
// line saying so; the helper crashing later never stops the node (the
// supervisor restarts it and keeps the last known healthy devices).
func (n *Node) startGPUs(ctx context.Context) error {
	c := n.cfg.GPUs
	gc := gpu.Config{DataDir: n.cfg.DataDir, Logger: n.logger, Interval: c.Interval, OnHealth: n.onGPUHealth}
	if c.Declare {
		devs, err := gpu.Declared(c.Count, c.Model, c.MemoryBytes)
		if err != nil {
			return err
		}
		gc.Declare, gc.Declared = true, devs
	}
	// The supervisor lives as long as the node (n.ctx), not the start call.
	sup, err := gpu.Start(n.ctx, gc)
	if err != nil {
		return fmt.Errorf("GPUs: %w", err)
	}
	n.gpus.mu.Lock()
	n.gpus.sup = sup
	n.gpus.total = sup.Resources()
	n.gpus.mu.Unlock()
	return nil
}

// attachGPUs lets the local scheduler assign devices to leases; a node
// without devices leaves it nil, so leases there do no GPU work at all.
// Start calls it before the node serves any RPC, so local.gpus is never
// written while leases read it.
func (n *Node) attachGPUs() {
	n.gpus.mu.Lock()
	defer n.gpus.mu.Unlock()
	if n.gpus.sup != nil && len(n.gpus.sup.Allocator().Devices()) > 0 {
		n.local.gpus = n.gpus.sup.Allocator()
	}
	n.gpus.ready = true
}

// gpuResources is what the node's healthy GPUs add to its totals.
func (n *Node) gpuResources() sched.ResourceSet {
	if n.gpus.sup == nil {
		return nil
	}
	return n.gpus.sup.Resources()
}

// GPUStatus returns the node's GPU devices with their health, reservations
// and latest telemetry (gpu.Status; Source "none" and no devices on a node
// without GPUs).
func (n *Node) GPUStatus() gpu.Status {
	if n.gpus.sup == nil {
		return gpu.Status{Source: gpu.SourceNone}
	}
	return n.gpus.sup.Status()
}

// heartbeatGPUs is the GPU status a heartbeat carries: nil on a node
// without devices, so those heartbeats stay as small as before.
func (n *Node) heartbeatGPUs() *gpu.Status {
	if n.gpus.sup == nil {
		return nil
	}
	st := n.gpus.sup.Status()
	if len(st.Devices) == 0 {
		return nil
	}
	return &st
}

// onGPUHealth runs when the supervisor takes a device out of scheduling
// (it already logged it and updated its allocator): the node's free pool
// shrinks by what the node's totals lost, and the node registers again so
// the leader's table and every node's view carry the new totals.
func (n *Node) onGPUHealth(ev gpu.HealthEvent) {
	n.gpus.mu.Lock()
	defer n.gpus.mu.Unlock()
	if !n.gpus.ready {
		return // during Start: the totals are read after it
	}
	now := n.gpus.sup.Resources()
	delta := sched.ResourceSet{}
	for name, q := range n.gpus.total {
		delta[name] -= q
	}
	for name, q := range now {
		delta[name] += q
	}
	n.gpus.total = now
	n.local.setBundleGPUHealth(ev)
	n.local.adjustAvailable(delta)
	n.logger.Warn("node GPU resources reduced", "index", ev.Index, "reason", ev.Reason, "gpu_resources", now.String())
	n.group.goFunc("register-again", n.registerAgain)
}

// registerAgain replaces this node's record (its totals and labels) in the Raft node
// table, retrying through leader changes for up to a minute.
func (n *Node) registerAgain() {
	ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
	defer cancel()
	if err := n.forward(ctx, wire.MethodNodeRegister, &wire.NodeRegisterRequest{Node: n.record()}, nil); err != nil && n.ctx.Err() == nil {
		n.logger.Warn("report this node's changed resources to the leader", "err", err)
	}
}

// adjustAvailable adds delta (negative entries shrink) to the free pool.
func (s *localSched) adjustAvailable(delta sched.ResourceSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, q := range delta {
		s.avail[name] += q
	}
	s.dispatchLocked()
}

// assignGPUs gives a lease with GPU or gpu_memory demand its devices: from
// its placement-group bundle's reservation for a demand in a group
// (assignInBundle), else from the node's free devices. It runs under s.mu
// with the rest of the grant, so grants and devices never disagree. ok is
// false when the devices cannot be had now (the lease waits); from is the
// bundle the devices came from (nil: the node's). A node without devices,
// or a demand without GPUs, costs nothing.
func (s *localSched) assignGPUs(res sched.ResourceSet) (as *gpu.Assignment, from *bundleGPUs, ok bool) {
	if s.gpus == nil {
		return nil, nil, true
	}
	if pg, idx, inGroup := sched.PlacementGroupOf(res); inGroup {
		return s.assignInBundle(pg, idx, bundleRequest(pg, res))
	}
	if res[sched.GPU] == 0 && res[gpu.MemoryResource] == 0 {
		return nil, nil, true
	}
	as, err := s.gpus.Assign(gpu.RequestFrom(res))
	return as, nil, err == nil
}

// releaseGPUs gives a lease's devices back, to its bundle or to the node;
// s.mu is held and the lease was just removed from s.leases, so this
// happens exactly once per lease.
func (s *localSched) releaseGPUs(l *lease) {
	if l.bundle != nil {
		s.releaseInBundle(l)
		return
	}
	if l.gpus != nil && s.gpus != nil {
		if err := s.gpus.Release(l.gpus); err != nil {
			slog.Error("GPU release out of step with leases (a bug)", "lease", l.id, "err", err)
		}
	}
}

// gpuInfeasible explains why this node's device layout can never hold
// res's GPU demand even though its totals cover it (e.g. gpu_memory larger
// than any one device, or a GPU in a group whose bundles here each hold
// less); "" when it can, or when res asks for no GPU.
func (n *Node) gpuInfeasible(res sched.ResourceSet) string {
	alloc := n.local.gpus // set before the node serves (attachGPUs)
	if alloc == nil {
		return ""
	}
	if pg, idx, inGroup := sched.PlacementGroupOf(res); inGroup {
		return n.local.bundleGPUInfeasible(pg, idx, bundleRequest(pg, res))
	}
	if res[sched.GPU] == 0 && res[gpu.MemoryResource] == 0 {
		return ""
	}
	if err := alloc.Feasible(gpu.RequestFrom(res)); err != nil {
		return err.Error()
	}
	return ""
}

// checkGPUDemand rejects a GPU demand that can never be valid (above 1 GPU
// and not whole, as Ray), naming the value.
func checkGPUDemand(r sched.ResourceSet) error {
	if r[sched.GPU] == 0 {
		return nil
	}
	if err := (gpu.Request{GPU: r[sched.GPU]}).Validate(); err != nil {
		return fmt.Errorf("resource %q: %w", sched.GPU, err)
	}
	return nil
}

// taskPoolKey is the key of a job's pooled task worker process: the job
// for workers without GPUs, and the job plus the device list for workers
// started with an assignment, so every process sees exactly the devices of
// the leases it serves (four 0.25-GPU leases on device 0 share one).
func taskPoolKey(job string, as *gpu.Assignment) string {
	if as == nil || len(as.Shares) == 0 {
		return job
	}
	return job + "|gpu:" + as.CUDAVisibleDevices()
}

// gpuEnv is the GPU part of a worker process's environment: its devices,
// or empty device lists for a worker without GPUs, so it cannot grab one by
// accident (gpu.Assignment.Env).
func gpuEnv(as *gpu.Assignment) []string { return as.Env() }

// gpusOf returns a node's last reported GPU status (nil: none reported).
func (l *leaderState) gpusOf(id string) *gpu.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.soft[id].gpus
}
