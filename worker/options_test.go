package worker

import (
	"context"
	"math"
	"strings"
	"testing"
)

// TestBadOptionsFailAtOptions: every bad option is an error from the
// Options call that sets it, naming the option, the value and what is
// accepted; the handle returned with the error fails its calls with it.
func TestBadOptionsFailAtOptions(t *testing.T) {
	pg := &PlacementGroup{id: "0123abcd", bundles: 2}
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{CPUs(-1)}, "options of SQ: option CPUs: invalid quantity -1: must not be negative"},
		{[]Option{CPUs(math.NaN())}, "option CPUs: invalid quantity NaN: must be a finite number"},
		{[]Option{CPUs(0.00001)}, "option CPUs: invalid quantity 1e-05: at most 4 decimal places"},
		{[]Option{GPUs(1.5)}, "option GPUs 1.5: above 1, GPUs must be a whole number"},
		{[]Option{GPUs(-2)}, "option GPUs: invalid quantity -2: must not be negative"},
		{[]Option{Memory(-5)}, "option Memory -5: must not be negative"},
		{[]Option{GPUMemory(-1)}, "option GPUMemory -1: must not be negative"},
		{[]Option{Resources(map[string]float64{"TPU": -1})}, `option Resources "TPU": invalid quantity -1: must not be negative`},
		{[]Option{Resources(map[string]float64{"TPU": math.Inf(1)})}, `option Resources "TPU": invalid quantity +Inf: must be a finite number`},
		{[]Option{Resources(map[string]float64{"bad name": 1})}, `option Resources: invalid resource name "bad name"`},
		{[]Option{MaxRetries(-2)}, "option MaxRetries -2: use -1 (forever) or more"},
		{[]Option{NodeAffinity("", false)}, `option NodeAffinity "": not a node ID`},
		{[]Option{NodeAffinity("n1", true)}, `option NodeAffinity "n1": not a node ID; give 8 to 64 hex digits`},
		{[]Option{NodeLabels(LabelSelector{"": In("a")})}, "option NodeLabels"},
		{[]Option{NodeLabels(LabelSelector{"zone": In()})}, "option NodeLabels"},
		{[]Option{NodeLabels(LabelSelector{"zone": {}})}, `option NodeLabels: invalid label selector: label "zone": unknown operator ""`},
		{[]Option{AcceleratorType(" ")}, `option AcceleratorType " ": give a GPU model`},
		{[]Option{WithRuntimeEnv(RuntimeEnv{EnvVars: map[string]string{"A=B": "x"}})}, `option WithRuntimeEnv: env var key "A=B": must not contain '='`},
		{[]Option{InPlacementGroup(nil, 0)}, "option InPlacementGroup: nil placement group"},
		{[]Option{InPlacementGroup(pg, 2)}, "option InPlacementGroup: bundle index 2 out of range: group 0123abcd has 2 bundles, use 0 to 1 or -1 for any"},
		{[]Option{InPlacementGroup(pg, -2)}, "bundle index -2 out of range"},
		{[]Option{InPlacementGroup(pg, 0), Spread()}, "option InPlacementGroup cannot be combined with Spread"},
		{[]Option{NodeAffinity("0123abcd", false), InPlacementGroup(pg, -1)}, "option InPlacementGroup cannot be combined with NodeAffinity"},
		{[]Option{MaxRestarts(1)}, "option MaxRestarts applies to actors only, not to task SQ"},
	} {
		want := strings.ReplaceAll(tc.want, "SQ", shortName(square.name))
		f, err := square.Options(tc.opts...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Options: %v; want an error containing %q", err, want)
			continue
		}
		if _, gerr := f.Remote(context.Background(), 2).Get(context.Background()); gerr != err {
			t.Errorf("a call of the handle Options returned with %q failed with %v", err, gerr)
		}
		if _, err := f.Options(CPUs(1)); err == nil {
			t.Errorf("more options on a handle with a bad one (%s) hid its error", tc.want)
		}
	}
}

// TestBadActorOptionsFailAtOptions: the same for actor classes, with the
// options only actors take.
func TestBadActorOptionsFailAtOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{MaxConcurrency(0), "options of actor logActor: option MaxConcurrency 0: must be at least 1"},
		{MaxRestarts(-2), "option MaxRestarts -2: use -1 (forever) or more"},
		{MaxTaskRetries(-3), "option MaxTaskRetries -3: use -1 (forever) or more"},
		{CPUs(-0.5), "option CPUs: invalid quantity -0.5: must not be negative"},
	} {
		c, err := logActorClass.Options(tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Options: %v; want an error containing %q", err, tc.want)
			continue
		}
		if _, rerr := c.Remote(context.Background(), "x"); rerr != err {
			t.Errorf("Remote of the class Options returned with %q failed with %v", err, rerr)
		}
	}
}

// TestMustPanicsOnBadOptions: Must passes a good handle through and panics
// with a bad option's error.
func TestMustPanicsOnBadOptions(t *testing.T) {
	if f := Must(square.Options(CPUs(2), Name("sq2"))); f.opts.name != "sq2" {
		t.Fatalf("Must lost the options: %+v", f.opts)
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(error).Error(), "option CPUs") {
			t.Fatalf("Must of a bad option: recovered %v, want the option's error", p)
		}
	}()
	Must(square.Options(CPUs(-1)))
}
