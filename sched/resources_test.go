package sched

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

func TestResourceSetArithmetic(t *testing.T) {
	t.Parallel()
	node := ResourceSet{CPU: QuantityOf(4), GPU: QuantityOf(1), Memory: QuantityOf(1 << 30)}
	demand := ResourceSet{CPU: 5000, GPU: QuantityOf(1)}

	avail := node.Clone()
	avail.Sub(demand)
	want := ResourceSet{CPU: 35000, GPU: 0, Memory: QuantityOf(1 << 30)}
	if !avail.Equal(want) {
		t.Fatalf("after Sub: %s, want %s", avail, want)
	}
	if _, kept := avail[GPU]; !kept {
		t.Error("Sub dropped a name that reached zero")
	}
	if !node.Equal(ResourceSet{CPU: QuantityOf(4), GPU: QuantityOf(1), Memory: QuantityOf(1 << 30)}) {
		t.Errorf("Clone shares storage: node now %s", node)
	}
	if avail.Covers(demand) {
		t.Error("Covers: GPU exhausted but demand still covered")
	}
	name, have, wantQ, short := avail.Missing(demand)
	if !short || name != GPU || have != 0 || wantQ != Unit {
		t.Errorf("Missing = %q %s %s %v, want GPU 0 1 true", name, have, wantQ, short)
	}
	avail.Add(demand)
	if !avail.Equal(node) {
		t.Errorf("after Add back: %s, want %s", avail, node)
	}

	// Over-commitment goes negative rather than clamping at zero.
	a := ResourceSet{CPU: Unit}
	a.Sub(ResourceSet{CPU: 2 * Unit})
	if a[CPU] != -Unit || a.String() != "CPU=-1" {
		t.Errorf("negative Sub: %s", a)
	}

	// Saturation instead of wrap-around.
	s := ResourceSet{Memory: MaxQuantity - 1}
	s.Add(ResourceSet{Memory: 10})
	if s[Memory] != MaxQuantity {
		t.Errorf("Add overflow: %d", s[Memory])
	}
	s = ResourceSet{Memory: minQuantity + 1}
	s.Sub(ResourceSet{Memory: 10})
	if s[Memory] != minQuantity {
		t.Errorf("Sub underflow: %d", s[Memory])
	}
	s = ResourceSet{Memory: 1}
	s.Sub(ResourceSet{Memory: minQuantity})
	if s[Memory] != MaxQuantity {
		t.Errorf("Sub of MinInt64: %d", s[Memory])
	}
}

func TestCoversAndMissing(t *testing.T) {
	t.Parallel()
	have := ResourceSet{CPU: QuantityOf(2), "TPU-v3": QuantityOf(2)}
	for _, tc := range []struct {
		demand     ResourceSet
		covers     bool
		name       string
		have, want Quantity
	}{
		{nil, true, "", 0, 0},
		{ResourceSet{}, true, "", 0, 0},
		{ResourceSet{CPU: QuantityOf(2)}, true, "", 0, 0},
		{ResourceSet{GPU: 0}, true, "", 0, 0}, // zero demand needs no key
		{ResourceSet{CPU: QuantityOf(2) + 1}, false, CPU, QuantityOf(2), QuantityOf(2) + 1},
		{ResourceSet{"FPGA": 1, GPU: 1}, false, "FPGA", 0, 1}, // first by name
		{ResourceSet{"TPU-v3": QuantityOf(3), GPU: 1}, false, GPU, 0, 1},
	} {
		if got := have.Covers(tc.demand); got != tc.covers {
			t.Errorf("Covers(%s) = %v, want %v", tc.demand, got, tc.covers)
		}
		name, h, w, short := have.Missing(tc.demand)
		if name != tc.name || h != tc.have || w != tc.want || short == tc.covers {
			t.Errorf("Missing(%s) = %q %d %d %v, want %q %d %d %v", tc.demand, name, h, w, short, tc.name, tc.have, tc.want, !tc.covers)
		}
	}
	var none ResourceSet
	if none.Covers(ResourceSet{CPU: 1}) || !none.Covers(nil) {
		t.Error("nil set Covers")
	}
}

func TestResourceSetReadersNilSafe(t *testing.T) {
	t.Parallel()
	var r ResourceSet
	if r.String() != "" || len(r.Names()) != 0 || !r.IsZero() || !r.Equal(ResourceSet{}) || !r.Equal(ResourceSet{CPU: 0}) {
		t.Error("nil set readers")
	}
	if r.Equal(ResourceSet{CPU: 1}) || (ResourceSet{CPU: 1}).Equal(r) {
		t.Error("nil set equals non-zero set")
	}
	c := r.Clone()
	if c == nil {
		t.Fatal("Clone of nil is nil")
	}
	c.Add(ResourceSet{CPU: 1})
	r.Add(nil) // no writes, so no panic on a nil map
	r.Sub(ResourceSet{})
	b, err := json.Marshal(r.Floats())
	if err != nil || string(b) != "{}" {
		t.Errorf("Floats of nil marshals to %s, %v", b, err)
	}
}

func TestResourceSetStringNamesFloats(t *testing.T) {
	t.Parallel()
	r := ResourceSet{"TPU-v3": QuantityOf(2), CPU: QuantityOf(2), GPU: 5000, "node:abc": 1}
	if got, want := r.String(), "CPU=2, GPU=0.5, TPU-v3=2, node:abc=0.0001"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := r.Names(), []string{CPU, GPU, "TPU-v3", "node:abc"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	b, _ := json.Marshal(r.Floats())
	if got, want := string(b), `{"CPU":2,"GPU":0.5,"TPU-v3":2,"node:abc":0.0001}`; got != want {
		t.Errorf("Floats JSON = %s, want %s", got, want)
	}
	if r.IsZero() || !(ResourceSet{CPU: 0, GPU: 0}).IsZero() {
		t.Error("IsZero")
	}
}

func randomSet(rng *rand.Rand) ResourceSet {
	r := ResourceSet{}
	for i, n := 0, rng.IntN(6); i < n; i++ {
		// A small name pool so that a and b often share names.
		name := []string{CPU, GPU, Memory, "TPU-v3", "node:" + strconv.Itoa(rng.IntN(3))}[rng.IntN(5)]
		r[name] = Quantity(rng.Int64N(int64(1) << rng.IntN(60)))
	}
	return r
}

func TestAddSubInverseProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20000; i++ {
		a, b := randomSet(rng), randomSet(rng)
		before := a.String()
		c := a.Clone()
		c.Add(b)
		c.Sub(b)
		if !c.Equal(a) {
			t.Fatalf("(%s) + (%s) - (%s) = %s, want %s", a, b, b, c, a)
		}
		if a.String() != before {
			t.Fatalf("Clone shares storage: a changed from %s to %s", before, a)
		}
		sum := a.Clone()
		sum.Add(b)
		if !sum.Covers(a) || !sum.Covers(b) {
			t.Fatalf("a+b does not cover a or b: a=%s b=%s", a, b)
		}
	}
}

func TestResourceSetJSONRoundTrip(t *testing.T) {
	t.Parallel()
	in := ResourceSet{CPU: 25000, Memory: QuantityOf(1 << 30), "TPU-v3": Unit}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"CPU":2.5,"TPU-v3":1,"memory":1073741824}` {
		t.Fatalf("JSON %s", b)
	}
	var out ResourceSet
	if err := json.Unmarshal(b, &out); err != nil || !out.Equal(in) {
		t.Fatalf("round trip: %v %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"CPU": -1}`), &out); err == nil {
		t.Fatal("negative amount accepted")
	}
}
