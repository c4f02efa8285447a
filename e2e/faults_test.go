package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// TestSIGHUPKeepsRunning sends SIGHUP (what systemd's reload sends) to a
// running node: it keeps serving instead of dying, keeps its log level while
// <data-dir>/log-level is missing or bad, and switches to the levels the
// file names once it is there, per component too.
func TestSIGHUPKeepsRunning(t *testing.T) {
	head := startHead(t, t.TempDir())
	hup := func(want string) {
		t.Helper()
		if err := head.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		testutil.Until(t, 5*time.Second, "SIGHUP logged: "+want, func() error {
			select {
			case <-head.done:
				t.Fatalf("node exited on SIGHUP: %v", head.wait())
			default:
			}
			if !strings.Contains(head.log.String(), want) {
				return fmt.Errorf("no %q in the log", want)
			}
			return nil
		})
	}
	hup("SIGHUP received: log level unchanged (write a level")
	file := filepath.Join(head.dataDir, "log-level")
	if err := os.WriteFile(file, []byte("loud\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hup("log level unchanged: cannot read the log-level file")
	if err := os.WriteFile(file, []byte("debug\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hup("SIGHUP received: log level reloaded\" from=info to=debug")
	if err := os.WriteFile(file, []byte("info,raft=debug,gossip=error\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hup("SIGHUP received: log level reloaded\" from=debug to=\"info,gossip=error,raft=debug\"")
	if _, err := status(t, head.addr()); err != nil {
		t.Fatalf("node stopped answering after SIGHUP: %v", err)
	}
}

// TestDamagedRaftDataOneLine truncates a stopped node's raft.db to its two
// header pages (bbolt preallocates, so cutting a small file in half may cut
// only free space): starting it again exits 1 with one line on stderr naming
// the file and the remedy.
func TestDamagedRaftDataOneLine(t *testing.T) {
	head := startHead(t, t.TempDir())
	signalTerm(head)
	if err := head.wait(); err != nil {
		t.Fatalf("node exited with %v after SIGTERM", err)
	}
	db := filepath.Join(head.dataDir, "raft", "raft.db")
	if err := os.Truncate(db, 8192); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := nodeup(t, nil, head.args...)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if code == 0 || len(lines) != 1 || !strings.HasPrefix(errOut, "nodeup: Raft data "+db+" is truncated") ||
		!strings.Contains(errOut, "move the data dir "+head.dataDir+" away") {
		t.Fatalf("start on a truncated raft.db: exit %d, stderr:\n%s", code, errOut)
	}
}

// TestSIGHUPReloadsResourcesAndLabels: a node started from a config file
// takes new custom resources from it on SIGHUP, without a restart, and
// keeps them when the file is broken.
func TestSIGHUPReloadsResourcesAndLabels(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "nodeup.hcl")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("resources = \"fpga=1\"\nlabels = \"zone=a\"\n")
	head := startHead(t, root, "--config", conf)
	fpga := func() float64 {
		st, err := status(t, head.addr())
		if err != nil {
			t.Fatal(err)
		}
		return st.Total["fpga"]
	}
	if got := fpga(); got != 1 {
		t.Fatalf("fpga at start: %v, want 1 from the config file", got)
	}
	hup := func(want string) {
		t.Helper()
		if err := head.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		testutil.Until(t, 10*time.Second, "logged: "+want, func() error {
			if !strings.Contains(head.log.String(), want) {
				return fmt.Errorf("no %q in the log", want)
			}
			return nil
		})
	}
	write("resources = \"fpga=3,tpu=2\"\nlabels = \"zone=b\"\n")
	hup("resources and labels reloaded")
	testutil.Until(t, 10*time.Second, "status shows fpga=3 and tpu=2", func() error {
		st, err := status(t, head.addr())
		if err != nil {
			return err
		}
		if st.Total["fpga"] != 3 || st.Total["tpu"] != 2 {
			return fmt.Errorf("totals %v", st.Total)
		}
		return nil
	})
	write("resources = \"CPU=64\"\n")
	hup("resources and labels unchanged")
	if got := fpga(); got != 3 {
		t.Fatalf("fpga after a refused reload: %v, want 3 kept", got)
	}
}
