package cluster

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// bundleGPUs is the devices a placement-group bundle with GPU or
// gpu_memory reserved on its node at prepare, as Ray's bundles reserve GPU
// instances: held is the reservation in the node's allocator, so plain
// leases never get those devices; in hands them to the leases in the
// bundle (gpu.Within), so work in the bundle sees a subset of the bundle's
// devices and fractions share them only up to the bundle's own. A bundle
// returned while leases in it still run is gone, and held goes back when
// the last of them ends, so no device is ever shared beyond the fractions
// asked. Every field is guarded by localSched.mu.
type bundleGPUs struct {
	held   *gpu.Assignment
	in     *gpu.Allocator
	leases int  // live leases holding devices from in
	gone   bool // the bundle was returned
}

// bundleRequest is the GPU part of a lease's demand in group pg: its
// GPU_group_<pg> and gpu_memory_group_<pg> entries, named back.
func bundleRequest(pg string, res sched.ResourceSet) gpu.Request {
	return gpu.RequestFrom(sched.BaseDemand(pg, res))
}

// reserveBundleGPUs reserves devices for each bundle of bs that asks for
// GPU or gpu_memory (nil entries for the others), all or none: on failure
// it gives back what it took and returns why, naming the bundle. s.mu is
// held; the caller checked that the free pool covers bs.
func (s *localSched) reserveBundleGPUs(bs []wire.BundleSpec) ([]*bundleGPUs, string) {
	out := make([]*bundleGPUs, len(bs))
	for i, b := range bs {
		req := gpu.RequestFrom(b.Resources)
		if s.gpus == nil || req.IsZero() {
			continue
		}
		held, err := s.gpus.Assign(req)
		if err != nil {
			for _, g := range out[:i] {
				s.returnBundleGPUs(g)
			}
			return nil, fmt.Sprintf("bundle %d: GPU devices: %v", b.Index, err)
		}
		out[i] = &bundleGPUs{held: held, in: gpu.Within(held)}
	}
	return out, ""
}

// returnBundleGPUs marks a returned bundle's devices gone and gives them
// back to the node once no lease in the bundle holds any. s.mu is held.
func (s *localSched) returnBundleGPUs(g *bundleGPUs) {
	if g == nil {
		return
	}
	g.gone = true
	if g.leases == 0 {
		if err := s.gpus.Release(g.held); err != nil {
			slog.Error("bundle GPU release out of step with bundles (a bug)", "devices", g.held.Indices(), "err", err)
		}
	}
}

// bundlesFor returns the device reservations a lease in group pg may use:
// bundle idx's, or for idx -1 (any bundle) those of every committed bundle
// of the group here, in index order. s.mu is held.
func (s *localSched) bundlesFor(pg string, idx int) []*bundleGPUs {
	if idx >= 0 {
		if h := s.bundles[bundleKey(pg, idx)]; h != nil && h.committed && h.gpus != nil {
			return []*bundleGPUs{h.gpus}
		}
		return nil
	}
	var hs []*heldBundle
	for _, h := range s.bundles {
		if h.group == pg && h.committed && h.gpus != nil {
			hs = append(hs, h)
		}
	}
	slices.SortFunc(hs, func(a, b *heldBundle) int { return a.index - b.index })
	out := make([]*bundleGPUs, len(hs))
	for i, h := range hs {
		out[i] = h.gpus
	}
	return out
}

// assignInBundle gives a lease in group pg (bundle idx, -1: any) devices
// from the first of its bundles here whose reservation has them free; ok
// is false when none has (the lease waits). A lease asking for no GPU gets
// none. s.mu is held.
func (s *localSched) assignInBundle(pg string, idx int, req gpu.Request) (as *gpu.Assignment, from *bundleGPUs, ok bool) {
	if req.IsZero() {
		return nil, nil, true
	}
	for _, g := range s.bundlesFor(pg, idx) {
		if as, err := g.in.Assign(req); err == nil {
			g.leases++
			return as, g, true
		}
	}
	return nil, nil, false
}

// releaseInBundle gives a bundle lease's devices back to its bundle, and
// the bundle's reservation back to the node when the bundle is gone and
// this was its last lease. s.mu is held.
func (s *localSched) releaseInBundle(l *lease) {
	g := l.bundle
	if err := g.in.Release(l.gpus); err != nil {
		slog.Error("bundle GPU release out of step with leases (a bug)", "lease", l.id, "err", err)
	}
	g.leases--
	if g.gone && g.leases == 0 {
		s.returnBundleGPUs(g)
	}
}

// bundleGPUInfeasible explains why no bundle of group pg here (bundle idx,
// -1: any) could ever hold req on its reserved devices, e.g. 1 GPU in a
// group whose bundles here hold 0.5 each; "" when one could, when req is
// zero, or when no bundle with devices is here (the lease's resources
// decide then).
func (s *localSched) bundleGPUInfeasible(pg string, idx int, req gpu.Request) string {
	if req.IsZero() {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for _, g := range s.bundlesFor(pg, idx) {
		err := g.in.Feasible(req)
		if err == nil {
			return ""
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		return ""
	}
	return fmt.Sprintf("placement group %s: no bundle here can hold %s on the devices it reserved (%v)", pg, req, first)
}

// setBundleGPUHealth marks a device healthy or not in every bundle's
// reservation too, as the supervisor did in the node's allocator, so work
// in a bundle is not given a broken device either.
func (s *localSched) setBundleGPUHealth(ev gpu.HealthEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.bundles {
		if h.gpus != nil {
			h.gpus.in.SetHealth(ev.Index, ev.Healthy, ev.Reason)
		}
	}
}
