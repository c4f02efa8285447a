package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func init() {
	register(&Metric{Name: "idle_node_rss", Unit: "MiB", Group: GroupNode, LowerIsBetter: true, NoJob: true,
		Desc: "resident memory (VmRSS) of a `nodeup start --head` daemon of this binary, idle after it became leader; " +
			"one sample per run, each after the run's duration of idleness",
		Setup: setupIdleRSS})
}

func setupIdleRSS(ctx context.Context, e *Env) (RunFunc, error) {
	dir, err := os.MkdirTemp("", "nodeup-bench-rss-")
	if err != nil {
		return nil, err
	}
	e.cleanup(func() { os.RemoveAll(dir) })
	cmd := exec.Command(e.opts.NodeBinary, "--log-format", "json", "start", "--head", "--bind", "127.0.0.1",
		"--port", "0", "--gossip-port", "0", "--http-port", "-1", "--data-dir", filepath.Join(dir, "node"), "--node-name", "bench-rss")
	// Its own TMPDIR, so it does not become this machine's current node.
	cmd.Env = append(os.Environ(), "TMPDIR="+dir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a node (%s): %w", e.opts.NodeBinary, err)
	}
	exited := make(chan struct{})
	leader := make(chan struct{})
	var lastLines []string
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		told := false
		for sc.Scan() {
			var rec struct{ Msg string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "became cluster leader" && !told {
				told = true
				close(leader)
			}
			if !told {
				lastLines = append(lastLines[max(0, len(lastLines)-4):], sc.Text())
			}
		}
		_ = cmd.Wait()
	}()
	e.cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	select {
	case <-leader:
	case <-exited:
		return nil, fmt.Errorf("the node exited before it became leader: %s", strings.Join(lastLines, " | "))
	case <-ctx.Done():
		return nil, fmt.Errorf("the node did not become leader: %w", ctx.Err())
	}
	pid := cmd.Process.Pid
	return func(ctx context.Context, d time.Duration) ([]float64, error) {
		// Idle for d: the sample is of a node that did nothing for that long.
		select {
		case <-time.After(d):
		case <-exited:
			return nil, fmt.Errorf("the node exited")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		kib, err := vmRSS(pid)
		if err != nil {
			return nil, err
		}
		return []float64{float64(kib) / 1024}, nil
	}, nil
}

// vmRSS reads a process's resident set size in KiB from /proc.
func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
