package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Soak growth bounds (docs/chaos.md): between the mean of the samples of
// the soak's second fifth (past warm-up) and of its last fifth, a node's
// resident memory may grow by soakRSSGrowth plus a quarter, its goroutines
// by soakGoroutineGrowth plus a quarter, its open fds by soakFDGrowth plus
// a quarter, and /dev/shm's allocated bytes by soakShmGrowth. A leak of
// one goroutine, fd or buffer per task (hundreds of tasks a minute)
// exceeds them within minutes.
const (
	soakRSSGrowth       = 32 << 20
	soakGoroutineGrowth = 50
	soakFDGrowth        = 32
	soakShmGrowth       = 64 << 20
)

// soakSample is one node's figures at one instant.
type soakSample struct {
	rss, goroutines, fds int64
}

// TestChaosSoak: three nodes under the mixed workload (tasks and actors)
// for $NODEUP_SOAK (default 90 s in make chaos; NODEUP_SOAK=10m for the
// long soak), sampling every 5 s each node's RSS, goroutines (go_goroutines
// on /metrics), open fds and the bytes allocated in /dev/shm; no figure
// may grow past the bounds above, nothing may be lost.
func TestChaosSoak(t *testing.T) {
	chaosLong(t)
	dur := 90 * time.Second
	if s := os.Getenv("NODEUP_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 30*time.Second {
			t.Fatalf("NODEUP_SOAK=%q: want a duration of 30s or more (e.g. 10m)", s)
		}
		dur = d
	}
	nodes := startThreeNodes(t)
	st, err := status(t, nodes[0].addr())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, nd := range st.Nodes {
		ids = append(ids, nd.NodeID)
	}
	out, errOut, code := nodeup(t, nil, "token", "create", "--role", "read", "--address", nodes[0].addr())
	if code != 0 {
		t.Fatalf("token create --role read: exit %d: %s", code, errOut)
	}
	read := strings.TrimSpace(out)
	d := startChaosDriver(t, nodes[0].addr(), dur)
	began := time.Now()
	var samples [][]soakSample // per instant, per node
	var shm []int64
	for time.Since(began) < dur {
		var row []soakSample
		for _, p := range nodes {
			row = append(row, soakSample{rss: vmRSS(t, p.cmd.Process.Pid), goroutines: goroutines(t, p, read), fds: openFDs(t, p.cmd.Process.Pid)})
		}
		samples, shm = append(samples, row), append(shm, shmBytes(ids))
		time.Sleep(5 * time.Second) // the sampling interval, not synchronization
	}
	d.finish(t, 3*time.Minute)
	fifth := max(1, len(samples)/5)
	early, late := samples[fifth:2*fifth], samples[len(samples)-fifth:]
	mean := func(rows [][]soakSample, node int, f func(soakSample) int64) int64 {
		var s int64
		for _, r := range rows {
			s += f(r[node])
		}
		return s / int64(len(rows))
	}
	for i, p := range nodes {
		for _, c := range []struct {
			what  string
			f     func(soakSample) int64
			slack int64
		}{
			{"RSS bytes", func(s soakSample) int64 { return s.rss }, soakRSSGrowth},
			{"goroutines", func(s soakSample) int64 { return s.goroutines }, soakGoroutineGrowth},
			{"open fds", func(s soakSample) int64 { return s.fds }, soakFDGrowth},
		} {
			e, l := mean(early, i, c.f), mean(late, i, c.f)
			t.Logf("%s %s: %d early, %d late (%d samples)", p.name, c.what, e, l, len(samples))
			if l > e+e/4+c.slack {
				t.Errorf("%s: %s grew from %d to %d over the soak, past the bound (+%d and a quarter)", p.name, c.what, e, l, c.slack)
			}
		}
	}
	shmEarly, shmLate := avg(shm[fifth:2*fifth]), avg(shm[len(shm)-fifth:])
	t.Logf("/dev/shm allocated: %.1f MiB early, %.1f MiB late", float64(shmEarly)/(1<<20), float64(shmLate)/(1<<20))
	if shmLate > shmEarly+soakShmGrowth {
		t.Errorf("/dev/shm grew from %d to %d bytes over the soak, past the %d bound", shmEarly, shmLate, soakShmGrowth)
	}
	resourcesBack(t, func() (*statusJSON, error) { return status(t, nodes[0].addr()) })
	checkRSS(t, nodes...)
}

func avg(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s / int64(len(v))
}

// vmRSS is a process's resident memory now (VmRSS) in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("RSS of pid %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// openFDs counts a process's open file descriptors.
func openFDs(t *testing.T, pid int) int64 {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("fds of pid %d: %v", pid, err)
	}
	return int64(len(ents))
}

// goroutines reads go_goroutines from the node's /metrics with a read
// token.
func goroutines(t *testing.T, p *proc, token string) int64 {
	t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", p.httpPort), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s /metrics: %v", p.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /metrics: %s: %s", p.name, resp.Status, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("go_goroutines %q: %v", rest, err)
			}
			return int64(v)
		}
	}
	t.Fatalf("%s /metrics has no go_goroutines", p.name)
	return 0
}

// shmBytes sums the bytes allocated (not the sparse size) in /dev/shm by
// the nodes with these IDs (their arenas and anything else they named
// after themselves there).
func shmBytes(ids []string) int64 {
	var n int64
	for _, id := range ids {
		files, _ := filepath.Glob("/dev/shm/nodeup-" + id + "*")
		for _, f := range files {
			var st syscall.Stat_t
			if err := syscall.Stat(f, &st); err == nil {
				n += st.Blocks * 512
			}
		}
	}
	return n
}
