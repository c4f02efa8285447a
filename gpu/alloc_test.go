package gpu

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/nodeup/nodeup/sched"
)

const gib = 1 << 30

func testDevices(n int, mem uint64) []Device {
	devs := make([]Device, n)
	for i := range devs {
		devs[i] = Device{Index: i, UUID: "GPU-" + string(rune('a'+i)), Name: "NVIDIA A100-SXM4-40GB", Model: "A100", MemoryBytes: mem}
	}
	return devs
}

func q(s string) sched.Quantity {
	v, err := sched.ParseQuantity(s)
	if err != nil {
		panic(err)
	}
	return v
}

func TestAssignWholeFractionalMemory(t *testing.T) {
	t.Parallel()
	a := NewAllocator(testDevices(4, 40*gib))
	two, err := a.Assign(Request{GPU: q("2")})
	if err != nil {
		t.Fatal(err)
	}
	if got := two.CUDAVisibleDevices(); got != "0,1" {
		t.Errorf("2 GPUs: CUDA_VISIBLE_DEVICES=%q, want 0,1", got)
	}
	if got := two.NvidiaVisibleDevices(); got != "GPU-a,GPU-b" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q", got)
	}
	// Four quarter requests share one device; the fifth goes to the next.
	var quarters []*Assignment
	for i := 0; i < 5; i++ {
		as, err := a.Assign(Request{GPU: q("0.25")})
		if err != nil {
			t.Fatal(err)
		}
		quarters = append(quarters, as)
	}
	for i := 0; i < 4; i++ {
		if got := quarters[i].CUDAVisibleDevices(); got != "2" {
			t.Errorf("quarter %d on %q, want 2", i, got)
		}
	}
	if got := quarters[4].CUDAVisibleDevices(); got != "3" {
		t.Errorf("fifth quarter on %q, want 3", got)
	}
	// Device 3 has 0.75 and 30 GiB left: 20 GiB fits, then 15 GiB does not.
	m, err := a.Assign(Request{MemoryBytes: 20 * gib})
	if err != nil || m.CUDAVisibleDevices() != "3" || m.Shares[0].GPU != q("0.5") {
		t.Fatalf("20 GiB: %+v, %v", m, err)
	}
	if _, err := a.Assign(Request{MemoryBytes: 15 * gib}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("15 GiB on a full node: err = %v, want ErrUnavailable", err)
	}
	if _, err := a.Assign(Request{GPU: q("1")}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("1 GPU on a full node: err = %v, want ErrUnavailable", err)
	}
	if got := a.Available(); got[sched.GPU] != q("0.25") || got[MemoryResource] != sched.QuantityOf(10*gib) {
		t.Errorf("Available = %v", got)
	}
	if err := a.Release(two); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(two); !errors.Is(err, ErrNotAssigned) {
		t.Errorf("double release: %v", err)
	}
	if one, err := a.Assign(Request{GPU: q("1"), MemoryBytes: 40 * gib}); err != nil || one.CUDAVisibleDevices() != "0" {
		t.Errorf("1 GPU after release: %+v, %v", one, err)
	}
}

func TestAssignErrors(t *testing.T) {
	t.Parallel()
	a := NewAllocator(testDevices(2, 16*gib))
	cases := []struct {
		req  Request
		err  error
		text string
	}{
		{Request{GPU: q("1.5")}, ErrInvalidRequest, "GPU request 1.5 above 1 must be a whole number"},
		{Request{GPU: -1}, ErrInvalidRequest, "negative"},
		{Request{GPU: q("3")}, ErrInfeasible, "needs 3 whole devices"},
		{Request{MemoryBytes: 17 * gib}, ErrInfeasible, "gpu_memory=18253611008"},
		{Request{GPU: q("1"), MemoryBytes: 17 * gib}, ErrInfeasible, ""},
	}
	for _, c := range cases {
		_, err := a.Assign(c.req)
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("Assign(%v) = %v, want %v containing %q", c.req, err, c.err, c.text)
		}
	}
	// A zero request is an empty, live assignment; nil means no GPUs.
	z, err := a.Assign(Request{})
	if err != nil || len(z.Shares) != 0 || z.CUDAVisibleDevices() != "" {
		t.Fatalf("zero request: %+v, %v", z, err)
	}
	if err := a.Release(z); err != nil {
		t.Error(err)
	}
	var none *Assignment
	env := strings.Join(none.Env(), " ")
	if env != "CUDA_VISIBLE_DEVICES= NVIDIA_VISIBLE_DEVICES= CUDA_DEVICE_ORDER=PCI_BUS_ID" {
		t.Errorf("nil Env = %q", env)
	}
	if err := a.Release(nil); err != nil {
		t.Error(err)
	}
}

func TestUnhealthyDeviceLeavesScheduling(t *testing.T) {
	t.Parallel()
	a := NewAllocator(testDevices(2, 16*gib))
	held, _ := a.Assign(Request{GPU: q("0.5")})
	if !a.SetHealth(held.Shares[0].Device.Index, false, "Xid 79") {
		t.Fatal("SetHealth changed nothing")
	}
	for i := 0; i < 3; i++ {
		as, err := a.Assign(Request{GPU: q("0.5")})
		if i < 2 && (err != nil || as.CUDAVisibleDevices() != "1") {
			t.Fatalf("assign %d: %+v, %v", i, as, err)
		}
		if i == 2 && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("third half: %v", err)
		}
	}
	if _, err := a.Assign(Request{GPU: q("2")}); !errors.Is(err, ErrInfeasible) {
		t.Errorf("2 GPUs with one unhealthy: %v", err)
	}
	if tot := a.Total(); tot[sched.GPU] != q("1") {
		t.Errorf("Total = %v", tot)
	}
	if err := a.Release(held); err != nil {
		t.Error(err)
	}
	if u := a.Devices()[0]; u.Healthy || u.Reason != "Xid 79" || u.GPU != 0 || u.Leases != 0 {
		t.Errorf("device 0 = %+v", u)
	}
}

// randomRequest draws whole, fractional, gpu_memory and mixed requests,
// some invalid or infeasible.
func randomRequest(r *rand.Rand, mem uint64) Request {
	switch r.IntN(6) {
	case 0:
		return Request{GPU: sched.QuantityOf(int64(1 + r.IntN(3)))}
	case 1:
		return Request{GPU: sched.Quantity(1 + r.IntN(int(sched.Unit)))}
	case 2:
		return Request{GPU: []sched.Quantity{q("0.25"), q("0.5"), q("0.1"), q("0.3333")}[r.IntN(4)]}
	case 3:
		return Request{MemoryBytes: 1 + r.Uint64N(mem)}
	case 4:
		return Request{GPU: sched.Quantity(r.IntN(int(sched.Unit))), MemoryBytes: r.Uint64N(mem + mem/4)}
	default:
		return Request{GPU: sched.Quantity(r.IntN(5 * int(sched.Unit)))}
	}
}

// checkNoOvercommit recomputes each device's reservation from the live
// assignments and checks it against the device's capacity and the
// allocator's own books.
func checkNoOvercommit(t *testing.T, a *Allocator, live map[*Assignment]bool) {
	t.Helper()
	frac := map[int]sched.Quantity{}
	mem := map[int]uint64{}
	for as := range live {
		seen := map[int]bool{}
		for _, s := range as.Shares {
			if seen[s.Device.Index] {
				t.Fatalf("assignment %v holds device %d twice", as.Indices(), s.Device.Index)
			}
			seen[s.Device.Index] = true
			frac[s.Device.Index] += s.GPU
			mem[s.Device.Index] += s.MemoryBytes
		}
	}
	for _, d := range a.Devices() {
		i := d.Device.Index
		if frac[i] > sched.Unit || mem[i] > d.Device.MemoryBytes {
			t.Fatalf("device %d over-committed: GPU %s, memory %d of %d", i, frac[i], mem[i], d.Device.MemoryBytes)
		}
		if frac[i] != d.GPU || mem[i] != d.MemoryBytes {
			t.Fatalf("device %d: live assignments hold GPU %s, memory %d; allocator says %s, %d", i, frac[i], mem[i], d.GPU, d.MemoryBytes)
		}
	}
}

// TestAllocatorProperty: random requests and releases never over-commit a
// device, whole requests get distinct whole devices, fractional ones one
// device, refusals are justified, and releasing everything restores every
// device exactly.
func TestAllocatorProperty(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		n := 1 + r.IntN(8)
		mem := uint64(1+r.IntN(80)) * gib
		a := NewAllocator(testDevices(n, mem))
		live := map[*Assignment]bool{}
		var order []*Assignment
		for step := 0; step < 300; step++ {
			if len(order) > 0 && r.IntN(3) == 0 {
				k := r.IntN(len(order))
				as := order[k]
				order = append(order[:k], order[k+1:]...)
				delete(live, as)
				if err := a.Release(as); err != nil {
					t.Fatalf("seed %d: release: %v", seed, err)
				}
				continue
			}
			if n > 1 && r.IntN(100) == 0 {
				a.SetHealth(r.IntN(n), false, "injected")
			}
			req := randomRequest(r, mem)
			before := a.Devices()
			ferr := a.Feasible(req)
			as, err := a.Assign(req)
			for _, kind := range []error{ErrInvalidRequest, ErrInfeasible} {
				if errors.Is(err, kind) != errors.Is(ferr, kind) {
					t.Fatalf("seed %d: %v: Assign says %v, Feasible says %v", seed, req, err, ferr)
				}
			}
			if ferr != nil && err == nil {
				t.Fatalf("seed %d: %v assigned though Feasible says %v", seed, req, ferr)
			}
			if err != nil {
				if errors.Is(err, ErrUnavailable) && fitsSomewhere(req, before) {
					t.Fatalf("seed %d: %v refused (%v) though it fits: %+v", seed, req, err, before)
				}
				continue
			}
			if req.GPU > sched.Unit && req.GPU%sched.Unit != 0 {
				t.Fatalf("seed %d: invalid %v accepted", seed, req)
			}
			want := 1
			if req.GPU >= sched.Unit {
				want = int(req.GPU / sched.Unit)
			}
			if req.IsZero() {
				want = 0
			}
			if len(as.Shares) != want {
				t.Fatalf("seed %d: %v got %d devices, want %d", seed, req, len(as.Shares), want)
			}
			for _, s := range as.Shares {
				if !before[s.Device.Index].Healthy {
					t.Fatalf("seed %d: unhealthy device %d assigned", seed, s.Device.Index)
				}
				if s.GPU < min(req.GPU, sched.Unit) || s.MemoryBytes < req.MemoryBytes {
					t.Fatalf("seed %d: %v got share %+v", seed, req, s)
				}
			}
			live[as] = true
			order = append(order, as)
			checkNoOvercommit(t, a, live)
		}
		for _, as := range order {
			if err := a.Release(as); err != nil {
				t.Fatal(err)
			}
		}
		for _, d := range a.Devices() {
			if d.GPU != 0 || d.MemoryBytes != 0 || d.Leases != 0 {
				t.Fatalf("seed %d: device %+v not free after releasing everything", seed, d)
			}
		}
	}
}

// fitsSomewhere is the test's own model of "this request could be placed".
func fitsSomewhere(req Request, devs []DeviceUsage) bool {
	if req.GPU >= sched.Unit {
		free := 0
		for _, d := range devs {
			if d.Healthy && d.GPU == 0 && d.MemoryBytes == 0 && req.MemoryBytes <= d.Device.MemoryBytes {
				free++
			}
		}
		return free >= int(req.GPU/sched.Unit)
	}
	for _, d := range devs {
		if !d.Healthy {
			continue
		}
		frac, mem, ok := need(req.GPU, req.MemoryBytes, d.Device.MemoryBytes)
		if ok && d.GPU+frac <= sched.Unit && d.MemoryBytes+mem <= d.Device.MemoryBytes {
			return true
		}
	}
	return false
}

// TestAllocatorConcurrent: goroutines assigning and releasing at random
// (run with -race) never over-commit, and all devices are free at the end.
func TestAllocatorConcurrent(t *testing.T) {
	t.Parallel()
	const mem = 24 * gib
	a := NewAllocator(testDevices(4, mem))
	var mu sync.Mutex
	live := map[*Assignment]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 99))
			var mine []*Assignment
			for i := 0; i < 400; i++ {
				if len(mine) > 0 && r.IntN(2) == 0 {
					as := mine[len(mine)-1]
					mine = mine[:len(mine)-1]
					mu.Lock()
					delete(live, as)
					mu.Unlock()
					if err := a.Release(as); err != nil {
						t.Error(err)
					}
					continue
				}
				as, err := a.Assign(randomRequest(r, mem))
				if err != nil {
					continue
				}
				mine = append(mine, as)
				mu.Lock()
				live[as] = true
				// Every registered assignment is live in the allocator, so
				// their sum must fit the devices even mid-flight.
				frac := map[int]sched.Quantity{}
				for l := range live {
					for _, s := range l.Shares {
						frac[s.Device.Index] += s.GPU
						if frac[s.Device.Index] > sched.Unit {
							t.Errorf("device %d over-committed: %s", s.Device.Index, frac[s.Device.Index])
						}
					}
				}
				mu.Unlock()
			}
			for _, as := range mine {
				mu.Lock()
				delete(live, as)
				mu.Unlock()
				if err := a.Release(as); err != nil {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	if av := a.Available(); !av.Equal(sched.ResourceSet{sched.GPU: sched.QuantityOf(4), MemoryResource: sched.QuantityOf(4 * mem)}) {
		t.Errorf("Available after all released = %v", av)
	}
}

func TestRequestFrom(t *testing.T) {
	t.Parallel()
	r := RequestFrom(sched.ResourceSet{sched.GPU: q("0.5"), MemoryResource: sched.QuantityOf(gib) + 1, sched.CPU: q("4")})
	if r.GPU != q("0.5") || r.MemoryBytes != gib+1 {
		t.Errorf("RequestFrom = %+v", r)
	}
}

// Within hands out a bundle's reservation only: whole devices the bundle
// holds whole, fractions up to the bundle's share of a device, never a
// device the bundle does not hold.
func TestWithinHandsOutOnlyTheReservation(t *testing.T) {
	t.Parallel()
	node := NewAllocator(testDevices(4, 40*gib))
	other, _ := node.Assign(Request{GPU: q("1")}) // device 0 taken by a plain lease
	two, err := node.Assign(Request{GPU: q("2")})
	if err != nil || two.CUDAVisibleDevices() != "1,2" {
		t.Fatalf("2-GPU bundle: %+v, %v", two, err)
	}
	in := Within(two)
	if av := in.Available(); !av.Equal(sched.ResourceSet{sched.GPU: q("2"), MemoryResource: sched.QuantityOf(80 * gib)}) {
		t.Errorf("Available in a 2-GPU bundle = %v", av)
	}
	a, errA := in.Assign(Request{GPU: q("1")})
	b, errB := in.Assign(Request{GPU: q("1")})
	if errA != nil || errB != nil || a.CUDAVisibleDevices() != "1" || b.CUDAVisibleDevices() != "2" {
		t.Fatalf("two 1-GPU leases in the bundle: %v %v, %v %v; want devices 1 and 2", a.Indices(), errA, b.Indices(), errB)
	}
	if _, err := in.Assign(Request{GPU: q("0.1")}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a third lease in a full bundle: %v, want ErrUnavailable", err)
	}
	if err := in.Feasible(Request{GPU: q("3")}); !errors.Is(err, ErrInfeasible) {
		t.Errorf("3 GPUs in a 2-GPU bundle: %v, want ErrInfeasible", err)
	}
	// Half a device: two quarters fit, a third does not, a whole never.
	half, _ := node.Assign(Request{GPU: q("0.5")})
	hin := Within(half)
	if err := hin.Feasible(Request{GPU: q("1")}); !errors.Is(err, ErrInfeasible) {
		t.Errorf("1 GPU in a 0.5-GPU bundle: %v, want ErrInfeasible", err)
	}
	if err := hin.Feasible(Request{MemoryBytes: 21 * gib}); !errors.Is(err, ErrInfeasible) {
		t.Errorf("21 GiB in a 0.5-GPU bundle of a 40 GiB device: %v, want ErrInfeasible", err)
	}
	q1, err1 := hin.Assign(Request{GPU: q("0.25")})
	q2, err2 := hin.Assign(Request{MemoryBytes: 10 * gib})
	if err1 != nil || err2 != nil || q1.CUDAVisibleDevices() != half.CUDAVisibleDevices() || q2.CUDAVisibleDevices() != half.CUDAVisibleDevices() {
		t.Fatalf("quarters in a half bundle: %v %v, %v %v; want device %s", q1.Indices(), err1, q2.Indices(), err2, half.CUDAVisibleDevices())
	}
	if _, err := hin.Assign(Request{GPU: 1}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("past the half: %v, want ErrUnavailable", err)
	}
	if empty := Within(nil); len(empty.Devices()) != 0 {
		t.Errorf("Within(nil) has devices %+v", empty.Devices())
	}
	for _, as := range []*Assignment{a, b} {
		if err := in.Release(as); err != nil {
			t.Error(err)
		}
	}
	for _, as := range []*Assignment{other, two, half} {
		if err := node.Release(as); err != nil {
			t.Error(err)
		}
	}
}

// TestWithinProperty: random bundles reserved from a node's devices, and
// random requests and releases inside each, never give a lease a device
// outside its bundle nor more of a device than the bundle reserved;
// Feasible and Assign agree inside bundles as on the node.
func TestWithinProperty(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 100; seed++ {
		r := rand.New(rand.NewPCG(seed, 11))
		mem := uint64(1+r.IntN(80)) * gib
		node := NewAllocator(testDevices(1+r.IntN(8), mem))
		type bundle struct {
			held *Assignment
			in   *Allocator
			live []*Assignment
		}
		var bs []*bundle
		for len(bs) < 4 {
			held, err := node.Assign(randomRequest(r, mem))
			if err == nil {
				bs = append(bs, &bundle{held: held, in: Within(held)})
			} else if !errors.Is(err, ErrInvalidRequest) {
				break
			}
		}
		for step := 0; step < 200 && len(bs) > 0; step++ {
			b := bs[r.IntN(len(bs))]
			if len(b.live) > 0 && r.IntN(3) == 0 {
				k := r.IntN(len(b.live))
				if err := b.in.Release(b.live[k]); err != nil {
					t.Fatalf("seed %d: release: %v", seed, err)
				}
				b.live = append(b.live[:k], b.live[k+1:]...)
				continue
			}
			req := randomRequest(r, mem)
			ferr := b.in.Feasible(req)
			as, err := b.in.Assign(req)
			if errors.Is(err, ErrInfeasible) != errors.Is(ferr, ErrInfeasible) || ferr != nil && err == nil {
				t.Fatalf("seed %d: %v in bundle %v: Assign says %v, Feasible says %v", seed, req, b.held.Indices(), err, ferr)
			}
			if err == nil {
				b.live = append(b.live, as)
			}
			checkWithin(t, seed, b.held, b.live)
		}
	}
}

// checkWithin checks that live, assigned inside held, stay within it.
func checkWithin(t *testing.T, seed uint64, held *Assignment, live []*Assignment) {
	t.Helper()
	capGPU, capMem := map[int]sched.Quantity{}, map[int]uint64{}
	for _, s := range held.Shares {
		capGPU[s.Device.Index], capMem[s.Device.Index] = s.GPU, s.MemoryBytes
	}
	gpu, mem := map[int]sched.Quantity{}, map[int]uint64{}
	for _, as := range live {
		for _, s := range as.Shares {
			if _, ok := capGPU[s.Device.Index]; !ok {
				t.Fatalf("seed %d: lease on device %d outside its bundle %v", seed, s.Device.Index, held.Indices())
			}
			gpu[s.Device.Index] += s.GPU
			mem[s.Device.Index] += s.MemoryBytes
		}
	}
	for i := range gpu {
		if gpu[i] > capGPU[i] || mem[i] > capMem[i] {
			t.Fatalf("seed %d: device %d: leases hold GPU %s, %d bytes; the bundle reserved %s, %d", seed, i, gpu[i], mem[i], capGPU[i], capMem[i])
		}
	}
}
