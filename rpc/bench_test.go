package rpc

import (
	"context"
	"testing"
)

// benchTask is shaped like a small task submission.
type benchTask struct {
	ID       string
	Function string
	Args     []byte
	CPU      float64
}

func benchServer(b *testing.B) *Client {
	s := NewServer(quietLogger())
	Handle(s, "Bench.Submit", func(ctx context.Context, req *benchTask) (*echoResp, error) {
		return &echoResp{N: len(req.Args), Text: req.ID}, nil
	})
	return dialTCP(b, serveTCP(b, s))
}

func newBenchTask() *benchTask {
	return &benchTask{ID: "task-0123456789abcdef", Function: "module.fn", Args: make([]byte, 64), CPU: 1}
}

// BenchmarkCallTCP measures sequential round trips over loopback TCP.
func BenchmarkCallTCP(b *testing.B) {
	c := benchServer(b)
	req := newBenchTask()
	var resp echoResp
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, "Bench.Submit", req, &resp); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkCallParallel measures concurrent calls multiplexed on one
// client over loopback TCP, with 8 callers per CPU so that writes batch.
func BenchmarkCallParallel(b *testing.B) {
	c := benchServer(b)
	ctx := context.Background()
	b.SetParallelism(8)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := newBenchTask()
		var resp echoResp
		for pb.Next() {
			if err := c.Call(ctx, "Bench.Submit", req, &resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}
