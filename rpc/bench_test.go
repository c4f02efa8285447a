package rpc

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// benchTask is shaped like a small task submission.
type benchTask struct {
	ID       string
	Function string
	Args     []byte
	CPU      float64
}

func benchServer(b *testing.B) *Client {
	s := NewServer(quietLogger(), testVersion)
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

// BenchmarkIdleConnMemory reports the live heap and stack, in bytes, that
// an idle connection costs its server and client together (B/conn): each
// op opens idleConns connections that send nothing, measures, and closes
// them.
func BenchmarkIdleConnMemory(b *testing.B) {
	const idleConns = 100
	s := newTestServer(nil)
	addr := serveTCP(b, s)
	var total float64
	for b.Loop() {
		before := memStats()
		conns := make([]net.Conn, 0, idleConns)
		for range idleConns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Write(helloed(nil)); err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		waitConns(b, s, idleConns)
		after := memStats()
		total += float64(int64(after.HeapAlloc+after.StackInuse)-int64(before.HeapAlloc+before.StackInuse)) / idleConns
		for _, c := range conns {
			c.Close()
		}
		waitConns(b, s, 0)
	}
	b.ReportMetric(total/float64(b.N), "B/conn")
}

// waitConns waits until s serves n connections.
func waitConns(b *testing.B, s *Server, n int) {
	testutil.Until(b, 10*time.Second, fmt.Sprintf("server has %d connections", n), func() error {
		s.mu.Lock()
		got := len(s.conns)
		s.mu.Unlock()
		if got != n {
			return fmt.Errorf("%d connections", got)
		}
		return nil
	})
}
