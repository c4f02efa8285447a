package fanout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// Ask answers this node through local and every other through
// remote with its address, hands every answer or error to merge with its
// target, one merge at a time, and returns only once all are merged.
func TestAskNodesLocalRemoteAndErrors(t *testing.T) {
	targets := []Target{
		{Name: "n0", Addr: "127.0.0.1:1", Self: true},
		{Name: "n1", Addr: "127.0.0.1:2"},
		{Name: "n2", Addr: "127.0.0.1:3"},
		{Name: "n3", Addr: "127.0.0.1:4"},
	}
	refused := errors.New("connection refused")
	var localCalls atomic.Int32
	var inMerge atomic.Int32
	got := map[string]string{}
	Ask(context.Background(), targets, 10*time.Second,
		func() (string, error) { localCalls.Add(1); return "local", nil },
		func(ctx context.Context, addr string) (string, error) {
			if _, ok := ctx.Deadline(); !ok {
				return "", fmt.Errorf("remote %s called without a deadline", addr)
			}
			if addr == "127.0.0.1:1" {
				return "", fmt.Errorf("this node's address %s asked over the network", addr)
			}
			if addr == "127.0.0.1:3" {
				return "", refused
			}
			return "remote " + addr, nil
		},
		func(tg Target, r string, err error) {
			if inMerge.Add(1) != 1 {
				t.Errorf("merge of %s while another merge runs", tg)
			}
			defer inMerge.Add(-1)
			if _, dup := got[tg.Name]; dup {
				t.Errorf("%s merged twice", tg)
			}
			if err != nil {
				got[tg.Name] = fmt.Sprintf("%s: %v", tg, err)
				return
			}
			got[tg.Name] = r
		})
	want := map[string]string{
		"n0": "local",
		"n1": "remote 127.0.0.1:2",
		"n2": "n2 (127.0.0.1:3): connection refused",
		"n3": "remote 127.0.0.1:4",
	}
	if len(got) != len(want) {
		t.Fatalf("merged %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("node %s merged %q; want %q", k, got[k], v)
		}
	}
	if n := localCalls.Load(); n != 1 {
		t.Errorf("local called %d times; want 1", n)
	}

	// No targets: nothing asked, nothing merged.
	Ask(context.Background(), nil, time.Second,
		func() (int, error) { t.Error("local called without targets"); return 0, nil },
		func(context.Context, string) (int, error) { t.Error("remote called without targets"); return 0, nil },
		func(Target, int, error) { t.Error("merge called without targets") })
}

// A node that does not answer is cut at the per-node timeout and merged
// with the deadline error, while the others are asked at once and merged
// as they come, not after it.
func TestAskNodesTimeoutAndArrivalOrder(t *testing.T) {
	targets := []Target{
		{Name: "silent", Addr: "silent:1"},
		{Name: "slow", Addr: "slow:1"},
		{Name: "fast", Addr: "fast:1"},
	}
	fastMerged := make(chan struct{})
	var order []string
	errs := map[string]error{}
	start := time.Now()
	Ask(context.Background(), targets, 300*time.Millisecond,
		func() (string, error) { return "", errors.New("no target is self") },
		func(ctx context.Context, addr string) (string, error) {
			switch addr {
			case "silent:1":
				<-ctx.Done()
				return "", ctx.Err()
			case "slow:1":
				// Answers only once fast is merged: asked one after
				// another, or merged in target order, it would time out.
				select {
				case <-fastMerged:
					return "slow", nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return "fast", nil
		},
		func(tg Target, r string, err error) {
			order = append(order, tg.Name)
			errs[tg.Name] = err
			if tg.Name == "fast" {
				close(fastMerged)
			}
		})
	elapsed := time.Since(start)
	if want := []string{"fast", "slow", "silent"}; !slices.Equal(order, want) {
		t.Errorf("merged in order %v; want %v", order, want)
	}
	if !errors.Is(errs["silent"], context.DeadlineExceeded) {
		t.Errorf("silent node merged with error %v; want the deadline exceeded", errs["silent"])
	}
	if errs["fast"] != nil || errs["slow"] != nil {
		t.Errorf("fast and slow merged with errors %v, %v; want none", errs["fast"], errs["slow"])
	}
	if elapsed < 300*time.Millisecond || elapsed > 10*time.Second {
		t.Errorf("askNodes returned after %v; want once the 300ms timeout cut the silent node", elapsed)
	}

	// The caller's context bounds every node too.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var err error
	Ask(ctx, targets[:1], time.Hour,
		func() (string, error) { return "", nil },
		func(ctx context.Context, _ string) (string, error) { <-ctx.Done(); return "", ctx.Err() },
		func(_ Target, _ string, e error) { err = e })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("with the caller's context canceled, merged error %v; want context canceled", err)
	}
}

// RemoteCall sends the method and request it was given to the address
// asked, and returns the decoded answer, or nil with the call's error.
func TestRemoteCall(t *testing.T) {
	type answer struct{ Got string }
	refused := errors.New("refused")
	call := func(ctx context.Context, addr, method string, req, resp any) error {
		if addr == "bad:1" {
			return refused
		}
		resp.(*answer).Got = fmt.Sprintf("%s %s %v", addr, method, *req.(*int))
		return nil
	}
	req := 7
	f := RemoteCall[answer](call, "Test.Method", &req)
	r, err := f(context.Background(), "good:1")
	if err != nil || r == nil || r.Got != "good:1 Test.Method 7" {
		t.Errorf("good node: answer %+v, error %v; want %q", r, err, "good:1 Test.Method 7")
	}
	r, err = f(context.Background(), "bad:1")
	if !errors.Is(err, refused) || r != nil {
		t.Errorf("bad node: answer %+v, error %v; want nil and %v", r, err, refused)
	}
}
