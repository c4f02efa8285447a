package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeup/nodeup/wire"
)

// BenchmarkPull64MiB pulls a 64 MiB object from a second node into the
// first node's arena over 127.0.0.1: the data plane of a cross-node Get.
// "reused" pulls into arena space used before (a long-running node);
// "fresh" pulls each time into never-used space (spacer objects, never
// written, push each pull further into the sparse arena, and the pulled
// pages are returned to tmpfs after each pull), so it also pays the page
// faults of a new node.
func BenchmarkPull64MiB(b *testing.B) {
	const size = 64 << 20
	nodes := testCluster(b, 2, func(i int, cfg *Config) {
		cfg.ObjectStoreMemory = 256 << 20
		if i == 0 {
			cfg.ObjectStoreMemory = 8 << 30 // sparse: only the pulled copies take memory
		}
	})
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	if err := nodes[1].objects.Store().Put("j/obj", src); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := &wire.ObjectLocateRequest{Loc: wire.ObjectLoc{Key: "j/obj", NodeAddr: nodes[1].rpcAddr, Size: size}}
	spacers := 0
	for _, fresh := range []bool{false, true} {
		name := "reused"
		if fresh {
			name = "fresh"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			cpu0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				if fresh {
					b.StopTimer()
					// Fill the first-fit hole so the pull lands in new space.
					if _, err := nodes[0].objects.Store().Create(fmt.Sprint("spacer/", spacers), size); err != nil {
						b.Fatalf("spacer %d: %v (run fewer iterations)", spacers, err)
					}
					spacers++
					b.StartTimer()
				}
				if _, err := nodes[0].objects.Locate(ctx, req); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_, got, _ := nodes[0].objects.Store().Get("j/obj")
				if got[0] != src[0] || got[size-1] != src[size-1] {
					b.Fatal("pulled bytes differ")
				}
				if fresh {
					if err := unix.Madvise(got, unix.MADV_REMOVE); err != nil {
						b.Fatal(err)
					}
				}
				_ = nodes[0].objects.Store().Delete("j/obj")
				b.StartTimer()
			}
			b.StopTimer()
			// CPU time of both nodes per pull: steadier than wall time on a
			// loaded machine.
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
