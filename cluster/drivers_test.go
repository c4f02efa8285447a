package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// TestDriverWatchNoticesExit: a watched driver that exits (here: killed and
// left unreaped, a zombie, as a driver whose parent has not waited yet) is
// reported gone once, and a live one never.
func TestDriverWatchNoticesExit(t *testing.T) {
	var w driverWatch
	live := exec.Command("sleep", "60")
	dying := exec.Command("sleep", "60")
	for _, c := range []*exec.Cmd{live, dying} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = live.Process.Kill()
		_ = live.Wait()
	})
	for job, c := range map[string]*exec.Cmd{"live": live, "dying": dying} {
		if ok, err := w.watch(job, c.Process.Pid); !ok || err != nil {
			t.Fatalf("watch %s (pid %d): %v, %v", job, c.Process.Pid, ok, err)
		}
	}
	if g := w.gone(); len(g) != 0 {
		t.Fatalf("gone %v while both drivers run", g)
	}
	if err := dying.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var gone []string
	testutil.Until(t, 5*time.Second, "killed driver reported gone", func() error {
		if gone = append(gone, w.gone()...); !slices.Contains(gone, "dying") {
			return os.ErrNotExist
		}
		return nil
	})
	_ = dying.Wait()
	if slices.Contains(gone, "live") || len(w.gone()) != 0 {
		t.Fatalf("gone %v, then %v: want only the killed driver, once", gone, w.gone())
	}
}

// TestDriverWatchInvisibleOrBad: a PID that is not a process here (a driver
// in another PID namespace, or a bad value off the network) is not
// watched, and the number watched is bounded.
func TestDriverWatchInvisibleOrBad(t *testing.T) {
	var w driverWatch
	for _, pid := range []int{0, -1, 1 << 30} {
		if ok, err := w.watch("j", pid); ok || err != nil {
			t.Fatalf("watch pid %d: %v, %v; want not watched, no error", pid, ok, err)
		}
	}
	for i := range maxWatchedDrivers {
		if _, err := w.watch(fmt.Sprintf("job%d", i), os.Getpid()); err != nil {
			t.Fatalf("watch driver %d: %v", i, err)
		}
	}
	if _, err := w.watch("one-more", os.Getpid()); err == nil || !strings.Contains(err.Error(), "4096") {
		t.Fatalf("watch past the bound: %v", err)
	}
}
