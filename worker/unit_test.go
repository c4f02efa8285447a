package worker

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

func TestOptionsValidateAndConvert(t *testing.T) {
	o, err := applyOptions(defaultOptions(), []Option{CPUs(0.5), Resources(map[string]float64{"TPU-v3": 2}), Memory(1 << 20), Name("x"), MaxRetries(-1)})
	if err != nil {
		t.Fatal(err)
	}
	want := sched.ResourceSet{sched.CPU: 5000, "TPU-v3": sched.QuantityOf(2), sched.Memory: sched.QuantityOf(1 << 20)}
	if !o.res.Equal(want) || o.name != "x" || o.maxRetries != -1 {
		t.Fatalf("options: %v %q %d", o.res, o.name, o.maxRetries)
	}
	if o, _ := applyOptions(defaultOptions(), []Option{CPUs(0)}); o.res[sched.CPU] != 0 {
		t.Fatalf("CPUs(0) kept a CPU demand: %v", o.res)
	}
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{CPUs(-1), "negative"},
		{CPUs(0.00001), "CPU"},
		{GPUs(1.5), "whole number"},
		{Memory(-5), "-5"},
		{Resources(map[string]float64{"bad name": 1}), "bad name"},
		{MaxRetries(-2), "-2"},
	} {
		if _, err := applyOptions(defaultOptions(), []Option{tc.opt}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("option error %v should mention %q", err, tc.want)
		}
	}
}

func TestBinViewReadsEveryBinForm(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 65535, 65536, 200 << 10} {
		want := blob(n, 5)
		enc, err := msgpack.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := binView(enc)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("binView of %d bytes: ok=%v, %d bytes back", n, ok, len(got))
		}
	}
	for _, bad := range [][]byte{nil, {0xc4}, {0xc4, 5, 1}, {0x01}, {0xc5, 0}} {
		if _, ok := binView(bad); ok {
			t.Errorf("binView(%x) accepted a malformed value", bad)
		}
	}
}

func TestRefTravelsAsIDAndOwner(t *testing.T) {
	in := []Ref[int]{{id: "a.0", owner: "127.0.0.1:1"}, {id: "b.1", owner: "127.0.0.1:2"}}
	b, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out []Ref[int]
	if err := msgpack.Unmarshal(b, &out); err != nil || len(out) != 2 || out[1].ID() != "b.1" || out[1].Owner() != "127.0.0.1:2" {
		t.Fatalf("refs round trip: %v, %v", out, err)
	}
	var bad Ref[int]
	if err := msgpack.Unmarshal([]byte{0x91, 0xa1, 'x'}, &bad); err == nil {
		t.Fatal("a one-element array decoded as a ref")
	}
}

var sleepy = Register1(func(ctx context.Context, d time.Duration) (time.Duration, error) {
	time.Sleep(d)
	return d, nil
})

func TestWaitReturnsReadyInSubmissionOrder(t *testing.T) {
	startCluster(t, 1, nil)
	ctx := ctxT(t)
	refs := []Ref[time.Duration]{
		sleepy.Remote(ctx, 5*time.Second),
		sleepy.Remote(ctx, 0),
		Must(sleepy.Options(CPUs(0))).Remote(ctx, 0),
	}
	ready, notReady, err := Wait(ctx, refs, 2, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 2 || ready[0] != refs[1] || ready[1] != refs[2] || len(notReady) != 1 || notReady[0] != refs[0] {
		t.Fatalf("ready %v, not ready %v", ready, notReady)
	}
	// A timeout with too few ready returns what is ready, without error.
	start := time.Now()
	ready, notReady, err = Wait(ctx, refs, 3, 200*time.Millisecond)
	if err != nil || len(ready) != 2 || len(notReady) != 1 || time.Since(start) > 2*time.Second {
		t.Fatalf("timed-out wait: %d ready, %d not, %v after %s", len(ready), len(notReady), err, time.Since(start))
	}
	// The caller's ctx ending first is an error, with the partial lists.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	ready, notReady, err = Wait(short, refs, 3, 0)
	if !errors.Is(err, context.DeadlineExceeded) || len(ready) != 2 || len(notReady) != 1 {
		t.Fatalf("wait past ctx's deadline: %d ready, %d not, %v", len(ready), len(notReady), err)
	}
	if _, _, err := Wait(ctx, refs, 4, 0); err == nil {
		t.Fatal("numReturns above the number of refs accepted")
	}
}

func TestEncodeArgsErrorNamesTheCall(t *testing.T) {
	cw := &coreWorker{objects: newObjectTable()}
	_, _, err := cw.encodeArgs(context.Background(), "submit", "square", []any{1, make(chan int)})
	if err == nil || !strings.HasPrefix(err.Error(), "submit square: encode argument 1 (chan int): ") {
		t.Fatalf("encode error = %v, want it to begin with the call and name the argument", err)
	}
}

func TestGetAllErrorsAsGet(t *testing.T) {
	ctx := context.Background()
	if _, err := GetAll(ctx, []Ref[int]{{id: "x.0", owner: "127.0.0.1:1"}}); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("GetAll before Init = %v, want ErrNotInitialized", err)
	}
	bad := errors.New("bad option")
	if _, err := GetAll(ctx, []Ref[int]{{err: bad}, {id: "x.0"}}); err != bad {
		t.Fatalf("GetAll of a ref whose submission failed = %v, want its error", err)
	}
}

func TestRegisterNamesRepeatsInOrder(t *testing.T) {
	fn := func(ctx context.Context) (int, error) { return 1, nil }
	first := Register0(fn).name
	second := Register0(fn).name
	if second != first+"#2" || lookup(first) == nil || lookup(second) == nil {
		t.Fatalf("registering one function twice: %q then %q, want the second %q#2, both found", first, second, first)
	}
}

// TestOwnerAnswersGetAndGetManyAlike: the owner's answers for a value, a
// task failure, a pending and an unknown object, one at a time and batched.
func TestOwnerAnswersGetAndGetManyAlike(t *testing.T) {
	cw := &coreWorker{objects: newObjectTable()}
	cw.objects.complete("v", []byte{0x07}, nil)
	cw.objects.complete("f", nil, &TaskError{TaskName: "sq", Message: "no good", PID: 9})
	cw.objects.pending("p")
	ctx := context.Background()
	many, err := cw.handleObjectGetMany(ctx, &wire.ObjectGetManyRequest{IDs: []string{"v", "f", "p", "gone"}})
	if err != nil || len(many.Objects) != 4 {
		t.Fatalf("GetMany = %+v, %v", many, err)
	}
	for i, id := range []string{"v", "f", "p", "gone"} {
		one, err := cw.handleObjectGet(ctx, &wire.ObjectGetRequest{ID: id})
		if err != nil || !reflect.DeepEqual(*one, many.Objects[i]) {
			t.Errorf("%s: Get answered %+v (%v), GetMany %+v", id, one, err, many.Objects[i])
		}
	}
	if o := many.Objects; !bytes.Equal(o[0].Value, []byte{0x07}) || o[1].Error == nil || o[1].Error.Message != "no good" || o[1].TaskName != "sq" ||
		!o[2].NotReady || o[3].Lost != unknownToOwner {
		t.Fatalf("GetMany answers %+v", o)
	}
}

func TestCountOptionsRefuseBelowMinusOne(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opt   func(int) Option
		field func(*taskOptions) int
	}{
		{"MaxRetries", MaxRetries, func(o *taskOptions) int { return o.maxRetries }},
		{"MaxRestarts", MaxRestarts, func(o *taskOptions) int { return o.maxRestarts }},
		{"MaxTaskRetries", MaxTaskRetries, func(o *taskOptions) int { return o.maxTaskRetries }},
	} {
		if o, err := applyOptions(defaultActorOptions(), []Option{tc.opt(-1)}); err != nil || tc.field(&o) != -1 {
			t.Errorf("%s(-1): %d, %v", tc.name, tc.field(&o), err)
		}
		if _, err := applyOptions(defaultActorOptions(), []Option{tc.opt(-2)}); err == nil || err.Error() != "option "+tc.name+" -2: use -1 (forever) or more" {
			t.Errorf("%s(-2) = %v", tc.name, err)
		}
	}
}
