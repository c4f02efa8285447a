package cluster

import (
	"strings"
	"testing"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

const testPG = "0a1b2c3d"

// gpuSched is a local scheduler over n declared 80 GiB devices, as
// attachGPUs wires one.
func gpuSched(t *testing.T, n int) *localSched {
	t.Helper()
	devs, err := gpu.Declared(n, "H100", 80<<30)
	if err != nil {
		t.Fatal(err)
	}
	s := newLocalSched(gpu.Resources(devs))
	s.gpus = gpu.NewAllocator(devs)
	return s
}

// gpus is a demand of g GPUs (a fraction allowed).
func gpus(g float64) sched.ResourceSet {
	return sched.ResourceSet{sched.GPU: sched.Quantity(g * float64(sched.Unit))}
}

// devicesHeld returns each device's reserved fraction, by index.
func devicesHeld(s *localSched) []sched.Quantity {
	var out []sched.Quantity
	for _, d := range s.gpus.Devices() {
		out = append(out, d.GPU)
	}
	return out
}

func commitGPUBundles(t *testing.T, s *localSched, sizes ...float64) {
	t.Helper()
	var bs []wire.BundleSpec
	for i, g := range sizes {
		bs = append(bs, wire.BundleSpec{Index: i, Resources: gpus(g)})
	}
	if why := s.commitBundles(testPG, bs); why != "" {
		t.Fatalf("commit %v: %s", sizes, why)
	}
}

// A committed 1-GPU bundle holds one device: leases in it (by index or
// any-bundle) get that device, fractions share it, plain leases get the
// other one; a bundle returned while a lease runs in it keeps its device
// until that lease ends.
func TestBundleGPUsAreTheBundlesOwn(t *testing.T) {
	s := gpuSched(t, 2)
	commitGPUBundles(t, s, 1)
	if got := devicesHeld(s); got[0] != sched.Unit || got[1] != 0 {
		t.Fatalf("devices after committing a 1-GPU bundle: %v, want device 0 reserved", got)
	}
	plain := s.tryGrant(gpus(1))
	if plain == nil || plain.gpus.CUDAVisibleDevices() != "1" {
		t.Fatalf("plain 1-GPU lease next to the bundle: %+v, want device 1", plain)
	}
	pinned := s.tryGrant(sched.PlacementGroupDemand(testPG, 0, gpus(0.5)))
	anyB := s.tryGrant(sched.PlacementGroupDemand(testPG, -1, gpus(0.5)))
	if pinned == nil || anyB == nil || pinned.gpus.CUDAVisibleDevices() != "0" || anyB.gpus.CUDAVisibleDevices() != "0" {
		t.Fatalf("two 0.5-GPU leases in the bundle: %+v, %+v; want both on device 0", pinned, anyB)
	}
	if got := devicesHeld(s); got[0] != sched.Unit || got[1] != sched.Unit {
		t.Fatalf("devices with leases in the bundle: %v, want the bundle's 1 on device 0 (not counted twice)", got)
	}
	s.release(anyB.id)
	s.release(plain.id)
	if n, _ := s.returnBundles(testPG, nil); n != 1 {
		t.Fatalf("returned %d bundles, want 1", n)
	}
	if got := devicesHeld(s); got[0] != sched.Unit {
		t.Fatalf("device 0 after the bundle was returned with a lease still in it: %v, want still reserved", got)
	}
	if l := s.tryGrant(gpus(2)); l != nil {
		t.Fatalf("2-GPU lease granted %v while a returned bundle's lease still runs on device 0", l.gpus.Indices())
	}
	s.release(pinned.id)
	if got := devicesHeld(s); got[0] != 0 || got[1] != 0 {
		t.Fatalf("devices after the bundle's last lease ended: %v, want all free", got)
	}
	if a := s.available(); !a.Equal(s.totals()) {
		t.Fatalf("free pool %v after everything was returned, want the totals %v", a, s.totals())
	}
}

// Bundles of one group get distinct devices; any-bundle leases take the
// first bundle with devices free; a demand no single bundle here can hold
// is infeasible with a reason, not a wait.
func TestBundleGPUsAnyBundleAndInfeasible(t *testing.T) {
	s := gpuSched(t, 2)
	commitGPUBundles(t, s, 1, 1)
	a := s.tryGrant(sched.PlacementGroupDemand(testPG, -1, gpus(1)))
	b := s.tryGrant(sched.PlacementGroupDemand(testPG, -1, gpus(1)))
	if a == nil || b == nil || a.gpus.CUDAVisibleDevices() != "0" || b.gpus.CUDAVisibleDevices() != "1" {
		t.Fatalf("two any-bundle 1-GPU leases: %+v, %+v; want devices 0 and 1", a, b)
	}
	s.release(a.id)
	if c := s.tryGrant(sched.PlacementGroupDemand(testPG, 1, gpus(0.5))); c != nil {
		t.Fatalf("0.5 GPU in bundle 1 while an any-bundle lease holds its device: granted %v", c.gpus.Indices())
	}
	c := s.tryGrant(sched.PlacementGroupDemand(testPG, 0, gpus(0.5)))
	if c == nil || c.gpus.CUDAVisibleDevices() != "0" {
		t.Fatalf("0.5 GPU in bundle 0: %+v, want device 0", c)
	}
	s.release(b.id)
	s.release(c.id)
	// A device going bad leaves its bundle's scheduling too.
	s.setBundleGPUHealth(gpu.HealthEvent{Index: 1, Reason: "Xid 79"})
	if why := s.bundleGPUInfeasible(testPG, 1, gpu.Request{GPU: sched.Unit}); !strings.Contains(why, "no bundle here can hold GPU=1") {
		t.Errorf("1 GPU in bundle 1 after its device went bad: %q, want infeasible", why)
	}
	if l := s.tryGrant(sched.PlacementGroupDemand(testPG, 1, gpus(1))); l != nil {
		t.Errorf("1 GPU in bundle 1 after its device went bad: granted %v", l.gpus.Indices())
	}
	s.returnBundles(testPG, nil)

	commitGPUBundles(t, s, 0.5, 0.5)
	if got := devicesHeld(s); got[0] != sched.Unit || got[1] != 0 {
		t.Fatalf("two 0.5-GPU bundles: devices %v, want both packed on device 0", got)
	}
	whole := gpu.Request{GPU: sched.Unit}
	if why := s.bundleGPUInfeasible(testPG, -1, whole); !strings.Contains(why, "no bundle here can hold GPU=1") {
		t.Errorf("1 GPU in a group of two 0.5-GPU bundles: %q, want infeasible", why)
	}
	if why := s.bundleGPUInfeasible(testPG, 1, gpu.Request{GPU: sched.Unit / 2}); why != "" {
		t.Errorf("0.5 GPU in a 0.5-GPU bundle: %q, want feasible", why)
	}
}

// Reserving a bundle's devices is all or none: when the free GPU count
// covers the bundles but the free devices cannot hold them (fractions
// spread over devices), prepare and commit fail, naming the bundle, and
// nothing changes.
func TestBundleGPUsPrepareAllOrNone(t *testing.T) {
	s := gpuSched(t, 2)
	x, y := s.tryGrant(gpus(0.5)), s.tryGrant(gpus(0.6))
	if x == nil || y == nil || x.gpus.CUDAVisibleDevices() == y.gpus.CUDAVisibleDevices() {
		t.Fatalf("0.5 and 0.6 GPU leases: %+v, %+v; want two devices", x, y)
	}
	before, free := devicesHeld(s), s.available()
	bs := []wire.BundleSpec{{Index: 0, Resources: gpus(0.3)}, {Index: 1, Resources: gpus(0.6)}}
	for _, try := range []func() string{
		func() string { return s.prepareBundles(testPG, bs) },
		func() string { return s.commitBundles(testPG, bs) },
	} {
		why := try()
		if !strings.Contains(why, "bundle 1: GPU devices") {
			t.Fatalf("bundles of 0.3 and 0.6 GPU with 0.5 and 0.4 free on two devices: %q, want bundle 1 refused", why)
		}
		if got := devicesHeld(s); got[0] != before[0] || got[1] != before[1] {
			t.Fatalf("devices after a refused prepare: %v, want %v", got, before)
		}
		if a := s.available(); !a.Equal(free) || len(s.heldBundles()) != 0 {
			t.Fatalf("after a refused prepare: free %v (want %v), bundles %v", a, free, s.heldBundles())
		}
	}
}
