package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
)

// Names of the baseline metrics other metrics refer to.
const (
	BaselineMemcpy   = "memcpy_gigabytes"
	BaselineUnixRTT  = "unix_socket_round_trips"
	BaselineLoopback = "loopback_tcp_gigabytes"
)

// echoSize is the message size of the Unix-socket round trip: about a small
// task message.
const echoSize = 64

func init() {
	register(
		&Metric{Name: BaselineMemcpy, Unit: "GB/s", Group: GroupBaseline, NoJob: true,
			Desc:  "copy a 64 MiB buffer into another (pre-faulted) with Go's copy, one core: bounds put/get gigabytes",
			Setup: setupMemcpy},
		&Metric{Name: BaselineUnixRTT, Unit: "round trips/s", Group: GroupBaseline, NoJob: true,
			Desc:  "one 64-byte request and its 64-byte answer over a Unix socket between this process and a child process: bounds sync calls and latency",
			Setup: setupUnixRTT},
		&Metric{Name: BaselineLoopback, Unit: "GB/s", Group: GroupBaseline, NoJob: true,
			Desc:  "stream 4 MiB writes over a loopback TCP connection between two goroutines: bounds cross-node transfers",
			Setup: setupLoopback},
	)
}

func setupMemcpy(ctx context.Context, e *Env) (RunFunc, error) {
	const size = 64 << 20
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault in both buffers
	return throughput(func(ctx context.Context) (float64, error) {
		copy(dst, src)
		return size / 1e9, nil
	}), nil
}

func setupUnixRTT(ctx context.Context, e *Env) (RunFunc, error) {
	dir, err := os.MkdirTemp("", "nodeup-bench-echo-")
	if err != nil {
		return nil, err
	}
	e.cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "echo.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envEcho+"="+path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the echo peer: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	var conn net.Conn
	select {
	case conn = <-accepted:
	case err := <-exited:
		return nil, fmt.Errorf("echo peer exited before connecting: %v", err)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
	if conn == nil {
		return nil, fmt.Errorf("echo peer: accept failed")
	}
	e.cleanup(func() {
		conn.Close() // the peer sees EOF and exits
		<-exited
	})
	msg, ans := make([]byte, echoSize), make([]byte, echoSize)
	return throughput(func(ctx context.Context) (float64, error) {
		const batch = 100 // round trips per operation, one at a time
		for range batch {
			if _, err := conn.Write(msg); err != nil {
				return 0, err
			}
			if _, err := io.ReadFull(conn, ans); err != nil {
				return 0, err
			}
		}
		return batch, nil
	}), nil
}

func setupLoopback(ctx context.Context, e *Env) (RunFunc, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	const chunk = 4 << 20
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	send, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	a := <-ch
	if a.err != nil {
		send.Close()
		return nil, a.err
	}
	recv := a.c
	// The receiver drains the stream for the whole metric; each operation
	// writes chunks and waits until the receiver has read them all.
	want := make(chan int64)
	got := make(chan error)
	go func() {
		buf := make([]byte, chunk)
		for n := range want {
			var err error
			for n > 0 && err == nil {
				var k int
				k, err = recv.Read(buf[:min(int64(len(buf)), n)])
				n -= int64(k)
			}
			got <- err
		}
	}()
	e.cleanup(func() {
		close(want)
		send.Close()
		recv.Close()
	})
	data := make([]byte, chunk)
	return throughput(func(ctx context.Context) (float64, error) {
		const chunks = 16 // 64 MiB per operation
		want <- chunks * chunk
		for range chunks {
			if _, err := send.Write(data); err != nil {
				return 0, err
			}
		}
		if err := <-got; err != nil {
			return 0, err
		}
		return chunks * chunk / 1e9, nil
	}), nil
}
