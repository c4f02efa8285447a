package gpu

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nodeup/nodeup/sched"
)

// Errors from Allocator.Assign and Release; the returned errors wrap them
// and name the offending value, so callers branch with errors.Is.
var (
	// ErrInvalidRequest: the request can never be valid (a negative amount,
	// or more than 1 GPU that is not a whole number, as Ray requires).
	ErrInvalidRequest = errors.New("invalid GPU request")
	// ErrInfeasible: no set of this node's healthy devices could ever
	// satisfy the request, even with every device free.
	ErrInfeasible = errors.New("GPU request infeasible on this node")
	// ErrUnavailable: the request fits the node's devices but not what is
	// free now; retry after a Release.
	ErrUnavailable = errors.New("GPUs busy")
	// ErrNotAssigned: Release of an assignment that is not live (already
	// released, or from another Allocator).
	ErrNotAssigned = errors.New("GPU assignment not live")
)

// Request is the GPU part of a task's or actor's resource demand.
type Request struct {
	// GPU is the number of GPUs in fixed-point units (sched.Unit = one
	// GPU; 2500 = 0.25). Up to one GPU it may be fractional and shares a
	// device; above one it must be whole and gets that many distinct devices.
	GPU sched.Quantity
	// MemoryBytes is gpu_memory in bytes: the request lands on one device
	// with at least this much unreserved memory (with GPU ≤ 1), or on
	// devices each holding at least this much in total (with whole GPUs).
	MemoryBytes uint64
}

// RequestFrom takes the GPU (sched.GPU) and gpu_memory (MemoryResource,
// bytes as whole units; a fraction of a byte rounds up) entries from a
// resource demand. It does not validate; Assign does.
func RequestFrom(demand sched.ResourceSet) Request {
	r := Request{GPU: demand[sched.GPU]}
	if m := demand[MemoryResource]; m > 0 {
		r.MemoryBytes = uint64(m / sched.Unit)
		if m%sched.Unit != 0 {
			r.MemoryBytes++
		}
	}
	return r
}

// IsZero reports whether the request asks for no GPU and no gpu_memory.
func (r Request) IsZero() bool { return r.GPU == 0 && r.MemoryBytes == 0 }

// String is "GPU=0.25, gpu_memory=1073741824" (zero parts left out).
func (r Request) String() string {
	var parts []string
	if r.GPU != 0 {
		parts = append(parts, "GPU="+r.GPU.String())
	}
	if r.MemoryBytes != 0 {
		parts = append(parts, MemoryResource+"="+strconv.FormatUint(r.MemoryBytes, 10))
	}
	return strings.Join(parts, ", ")
}

// Validate reports a request that can never be valid: negative GPU, or a GPU
// count above 1 that is not whole ("GPU request 1.5 above 1 must be a whole
// number", Ray's rule). The error wraps ErrInvalidRequest.
func (r Request) Validate() error {
	switch {
	case r.GPU < 0:
		return fmt.Errorf("%w: GPU request %s is negative", ErrInvalidRequest, r.GPU)
	case r.GPU > sched.Unit && r.GPU%sched.Unit != 0:
		return fmt.Errorf("%w: GPU request %s above 1 must be a whole number", ErrInvalidRequest, r.GPU)
	}
	return nil
}

// Share is one device's part of an Assignment.
type Share struct {
	// Device is the device, as detected.
	Device Device
	// GPU is the fraction of the device reserved, in fixed-point units
	// (sched.Unit for a whole device). A gpu_memory request reserves at
	// least its share of the device's memory as a fraction, rounded up.
	GPU sched.Quantity
	// MemoryBytes is the device memory reserved in bytes (the whole memory
	// for a whole device; GPU × memory for a fraction, or the gpu_memory
	// asked, whichever is more).
	MemoryBytes uint64
}

// Assignment is a live reservation of devices for one lease (task or
// actor), returned by Allocator.Assign and given back exactly once with
// Release. A nil *Assignment stands for "no GPUs": its methods return the
// values for a worker without GPUs.
type Assignment struct {
	// Shares are the devices reserved, in ascending device index; empty for
	// a request of no GPUs.
	Shares []Share
}

// Indices returns the NVML/CUDA indices of the assigned devices.
func (a *Assignment) Indices() []int {
	if a == nil {
		return nil
	}
	ix := make([]int, len(a.Shares))
	for i, s := range a.Shares {
		ix[i] = s.Device.Index
	}
	return ix
}

// CUDAVisibleDevices is the value of CUDA_VISIBLE_DEVICES for the worker:
// the device indices joined by commas ("0,3"), as Ray sets it; "" for none.
// The indices are NVML's (PCI bus order), so Env also sets
// CUDA_DEVICE_ORDER=PCI_BUS_ID to make CUDA number devices the same way.
func (a *Assignment) CUDAVisibleDevices() string {
	if a == nil {
		return ""
	}
	s := make([]string, len(a.Shares))
	for i, sh := range a.Shares {
		s[i] = strconv.Itoa(sh.Device.Index)
	}
	return strings.Join(s, ",")
}

// NvidiaVisibleDevices is the value of NVIDIA_VISIBLE_DEVICES (read by the
// NVIDIA container runtime): the devices' UUIDs joined by commas, the index
// for a device without a UUID (declared devices); "" for none.
func (a *Assignment) NvidiaVisibleDevices() string {
	if a == nil {
		return ""
	}
	s := make([]string, len(a.Shares))
	for i, sh := range a.Shares {
		s[i] = sh.Device.UUID
		if s[i] == "" {
			s[i] = strconv.Itoa(sh.Device.Index)
		}
	}
	return strings.Join(s, ",")
}

// Env returns the environment entries a worker process for this assignment
// gets: CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES (both "" without GPUs,
// so a worker never sees devices it was not given) and
// CUDA_DEVICE_ORDER=PCI_BUS_ID. Append them after the node's own
// environment so they win.
func (a *Assignment) Env() []string {
	return []string{
		"CUDA_VISIBLE_DEVICES=" + a.CUDAVisibleDevices(),
		"NVIDIA_VISIBLE_DEVICES=" + a.NvidiaVisibleDevices(),
		"CUDA_DEVICE_ORDER=PCI_BUS_ID",
	}
}

// DeviceUsage is one device's state in the Allocator.
type DeviceUsage struct {
	// Device is the device, as detected.
	Device Device
	// Healthy is false once the device was reported lost or broken; it is
	// then never assigned again (assignments holding it stay live until
	// released).
	Healthy bool
	// Reason is why the device is unhealthy; "" while healthy.
	Reason string
	// GPU is the reserved fraction in fixed-point units (0..sched.Unit).
	GPU sched.Quantity
	// MemoryBytes is the reserved device memory in bytes.
	MemoryBytes uint64
	// Leases is the number of live assignments holding the device.
	Leases int
}

// Allocator assigns a node's devices to leases: whole-GPU requests get
// distinct free devices, fractional requests share one device until its 1.0
// is used (packing onto the fullest device that fits, as Ray packs fractional
// GPUs), and gpu_memory requests land on one device with that much
// unreserved memory. On every device the reserved fraction never exceeds 1
// and the reserved memory never exceeds its total (for an Allocator from
// Within: the share of the device it was given). Safe for concurrent use.
type Allocator struct {
	mu   sync.Mutex
	devs []slot
	live map[*Assignment]struct{}
}

// slot is one device in an Allocator: its usage, and how much of it the
// Allocator may hand out (the whole device, or a bundle's share of it).
type slot struct {
	DeviceUsage
	capGPU sched.Quantity // fixed-point; sched.Unit for a whole device
	capMem uint64         // bytes; Device.MemoryBytes for a whole device
}

// NewAllocator returns an Allocator over devs, all healthy and free. Device
// indices must be distinct (they are for detected and declared devices).
func NewAllocator(devs []Device) *Allocator {
	a := &Allocator{live: map[*Assignment]struct{}{}}
	for _, d := range devs {
		a.devs = append(a.devs, slot{DeviceUsage: DeviceUsage{Device: d, Healthy: true}, capGPU: sched.Unit, capMem: d.MemoryBytes})
	}
	slices.SortFunc(a.devs, func(x, y slot) int { return x.Device.Index - y.Device.Index })
	return a
}

// Within returns an Allocator over the devices of as that hands out only
// as's share of each (its GPU fraction and its bytes), as Ray gives the
// work in a placement-group bundle the GPU instances the bundle reserved:
// every assignment from it holds a subset of as's devices, a whole-GPU
// request needs a device as holds whole, and fractions share a device up to
// as's fraction of it. as stays reserved in the Allocator that made it;
// release it there once nothing assigned from the result is live. A nil or
// empty as gives an Allocator without devices.
func Within(as *Assignment) *Allocator {
	a := &Allocator{live: map[*Assignment]struct{}{}}
	if as == nil {
		return a
	}
	for _, sh := range as.Shares {
		a.devs = append(a.devs, slot{DeviceUsage: DeviceUsage{Device: sh.Device, Healthy: true}, capGPU: sh.GPU, capMem: sh.MemoryBytes})
	}
	slices.SortFunc(a.devs, func(x, y slot) int { return x.Device.Index - y.Device.Index })
	return a
}

// need returns what request (gpu, mem) reserves on a device of total bytes:
// fraction max(gpu, ceil(mem/total)) and memory max(mem, gpu×total), so
// fractional and gpu_memory requests share one consistent budget per device.
// ok is false when the device could never hold it.
func need(gpu sched.Quantity, mem, total uint64) (frac sched.Quantity, bytes uint64, ok bool) {
	frac, bytes = gpu, mem
	if mem > 0 {
		if total == 0 || mem > total {
			return 0, 0, false
		}
		hi, lo := bits.Mul64(mem, uint64(sched.Unit))
		q, r := bits.Div64(hi, lo, total) // hi < total since mem <= total
		if r != 0 {
			q++
		}
		frac = max(frac, sched.Quantity(q))
	}
	hi, lo := bits.Mul64(uint64(gpu), total)
	q, _ := bits.Div64(hi, lo, uint64(sched.Unit)) // gpu <= Unit, so hi < Unit
	bytes = max(bytes, q)
	return frac, bytes, frac <= sched.Unit
}

// Assign reserves devices for req and returns the live assignment, or an
// error wrapping ErrInvalidRequest, ErrInfeasible or ErrUnavailable that
// names the request. A zero request gets an empty, live assignment (release
// it like any other), so every lease can be handled the same way.
func (a *Allocator) Assign(req Request) (*Assignment, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.feasible(req); err != nil {
		return nil, err
	}
	as := &Assignment{}
	switch {
	case req.IsZero():
	case req.GPU >= sched.Unit:
		n := int(req.GPU / sched.Unit)
		var free []int
		for i, d := range a.devs {
			if d.Healthy && d.GPU == 0 && d.MemoryBytes == 0 && d.fits(sched.Unit, req.MemoryBytes) {
				free = append(free, i)
			}
		}
		if len(free) < n {
			return nil, fmt.Errorf("%w: %s needs %d free devices, %d are free", ErrUnavailable, req, n, len(free))
		}
		for _, i := range free[:n] {
			as.Shares = append(as.Shares, a.take(i, sched.Unit, req.MemoryBytes))
		}
	default:
		best := -1
		for i, d := range a.devs {
			if !d.Healthy {
				continue
			}
			frac, mem, ok := need(req.GPU, req.MemoryBytes, d.Device.MemoryBytes)
			if !ok || d.GPU+frac > d.capGPU || d.MemoryBytes+mem > d.capMem {
				continue
			}
			// Pack: prefer the device with the most already reserved.
			if best < 0 || d.GPU > a.devs[best].GPU {
				best = i
			}
		}
		if best < 0 {
			return nil, fmt.Errorf("%w: no device has %s unreserved", ErrUnavailable, req)
		}
		as.Shares = append(as.Shares, a.take(best, req.GPU, req.MemoryBytes))
	}
	a.live[as] = struct{}{}
	return as, nil
}

// Feasible reports whether req could ever be assigned on this node's
// healthy devices, were every device free: nil if so, else the error Assign
// would give with nothing reserved (wrapping ErrInvalidRequest or
// ErrInfeasible, naming the request). The node checks it before queueing a
// lease, so a request that only the device layout rules out (two GPUs of
// 40 GiB each for a node with one such device) is reported infeasible
// instead of waiting forever.
func (a *Allocator) Feasible(req Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.feasible(req)
}

// feasible is Feasible for a valid request; a.mu must be held. A whole-GPU
// request needs that many healthy devices that can each hold one GPU with the
// memory asked, a fractional one a single healthy device that can hold it.
func (a *Allocator) feasible(req Request) error {
	if req.IsZero() {
		return nil
	}
	gpu, n := req.GPU, 1
	if req.GPU >= sched.Unit {
		gpu, n = sched.Unit, int(req.GPU/sched.Unit)
	}
	fit := 0
	for _, d := range a.devs {
		if d.Healthy && d.fits(gpu, req.MemoryBytes) {
			fit++
		}
	}
	switch {
	case fit >= n:
		return nil
	case req.GPU >= sched.Unit:
		return fmt.Errorf("%w: %s needs %d whole devices, node has %d healthy ones that fit", ErrInfeasible, req, n, fit)
	}
	return fmt.Errorf("%w: no healthy device can hold %s", ErrInfeasible, req)
}

// fits reports whether the slot, were it free, could hold (gpu, mem).
func (d *slot) fits(gpu sched.Quantity, mem uint64) bool {
	frac, bytes, ok := need(gpu, mem, d.Device.MemoryBytes)
	return ok && frac <= d.capGPU && bytes <= d.capMem
}

// take reserves (gpu, mem) on device i; the caller checked it fits.
func (a *Allocator) take(i int, gpu sched.Quantity, mem uint64) Share {
	d := &a.devs[i]
	frac, bytes, _ := need(gpu, mem, d.Device.MemoryBytes)
	d.GPU += frac
	d.MemoryBytes += bytes
	d.Leases++
	return Share{Device: d.Device, GPU: frac, MemoryBytes: bytes}
}

// Release gives back everything as reserved, exactly once: a second Release
// of the same assignment, or one from another Allocator, changes nothing and
// returns an error wrapping ErrNotAssigned. Release(nil) is a no-op.
func (a *Allocator) Release(as *Assignment) error {
	if as == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.live[as]; !ok {
		return fmt.Errorf("%w: devices %v", ErrNotAssigned, as.Indices())
	}
	delete(a.live, as)
	for _, s := range as.Shares {
		i := a.index(s.Device.Index)
		if i < 0 {
			continue
		}
		d := &a.devs[i]
		d.GPU -= s.GPU
		d.MemoryBytes -= s.MemoryBytes
		d.Leases--
	}
	return nil
}

func (a *Allocator) index(devIndex int) int {
	for i := range a.devs {
		if a.devs[i].Device.Index == devIndex {
			return i
		}
	}
	return -1
}

// SetHealth marks the device with NVML index devIndex healthy or not (-1:
// every device), with reason. It reports whether anything changed; an
// unknown index changes nothing.
func (a *Allocator) SetHealth(devIndex int, healthy bool, reason string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	changed := false
	for i := range a.devs {
		d := &a.devs[i]
		if (devIndex == -1 || d.Device.Index == devIndex) && d.Healthy != healthy {
			d.Healthy = healthy
			d.Reason = ""
			if !healthy {
				d.Reason = reason
			}
			changed = true
		}
	}
	return changed
}

// Devices returns every device's usage, in index order.
func (a *Allocator) Devices() []DeviceUsage {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]DeviceUsage, len(a.devs))
	for i, d := range a.devs {
		out[i] = d.DeviceUsage
	}
	return out
}

// Healthy returns the devices that may be scheduled, in index order.
func (a *Allocator) Healthy() []Device {
	a.mu.Lock()
	defer a.mu.Unlock()
	var devs []Device
	for _, d := range a.devs {
		if d.Healthy {
			devs = append(devs, d.Device)
		}
	}
	return devs
}

// Total returns Resources(a.Healthy()): the node's GPU,
// accelerator_type:<model> and gpu_memory totals over healthy devices.
func (a *Allocator) Total() sched.ResourceSet { return Resources(a.Healthy()) }

// Available returns what is unreserved on healthy devices: GPU (sum of free
// fractions, fixed-point) and gpu_memory (sum of free bytes, as whole
// units). Fractional leftovers count, so GPU=2.5 may not admit a 2-GPU
// request; Assign is the authority. accelerator_type entries are not
// included: they are labels, not consumed here.
func (a *Allocator) Available() sched.ResourceSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := sched.ResourceSet{}
	var gpu sched.Quantity
	var mem, total uint64
	n := 0
	for _, d := range a.devs {
		if d.Healthy {
			n++
			gpu += d.capGPU - d.GPU
			mem += d.capMem - d.MemoryBytes
			total += d.capMem
		}
	}
	if n == 0 {
		return r
	}
	r[sched.GPU] = gpu
	if total > 0 {
		r[MemoryResource] = sched.QuantityOf(int64(min(mem, uint64(sched.MaxQuantity/sched.Unit))))
	}
	return r
}
