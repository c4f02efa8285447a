package cluster

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Writing far more than the max size rotates the file and keeps at most
// the configured number of backups, each at most the max size, every line
// whole in one file.
func TestWorkerLogRotationBoundsBackups(t *testing.T) {
	dir := t.TempDir()
	const max, backups = 1000, 3
	path := filepath.Join(dir, "worker-j1-0123456789abcdef-42.log")
	rf, err := openRotating(path, max, backups)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 99) + "\n"
	for range 200 { // 20 000 bytes: 20 files' worth
		copyLines(strings.NewReader(line), rf, maxLogLine)
	}
	rf.Close()
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		info, _ := e.Info()
		if info.Size() > max || info.Size()%100 != 0 {
			t.Errorf("%s: %d bytes; want at most %d, whole lines", e.Name(), info.Size(), max)
		}
		if _, err := parseLogName(e.Name()); err != nil {
			t.Errorf("rotated file name does not parse: %v", err)
		}
	}
	want := []string{"worker-j1-0123456789abcdef-42.log", "worker-j1-0123456789abcdef-42.log.1", "worker-j1-0123456789abcdef-42.log.2", "worker-j1-0123456789abcdef-42.log.3"}
	if !slices.Equal(names, want) {
		t.Fatalf("files %v; want %v", names, want)
	}
}

// A line longer than the bound is split into bounded lines, and a last
// line without a newline gets one.
func TestCopyLinesSplitsLongLines(t *testing.T) {
	var out bytes.Buffer
	in := strings.Repeat("a", 25) + "\nshort\nend"
	copyLines(strings.NewReader(in), &out, 16)
	want := strings.Repeat("a", 16) + "\n" + strings.Repeat("a", 9) + "\nshort\nend\n"
	if out.String() != want {
		t.Fatalf("copied %q; want %q", out.String(), want)
	}
}

// The sweep deletes an exited process's files (current and backups) once
// older than the retention, keeps a live process's and recent ones, and
// never touches files outside the worker log pattern.
func TestWorkerLogRetentionSweep(t *testing.T) {
	dir := t.TempDir()
	wl := newWorkerLogs(dir, 1<<20, 2, 50*time.Millisecond)
	old := time.Now().Add(-time.Hour)
	write := func(name string, mtime time.Time) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	exited := "worker-j1-0123456789abcdef-10.log"
	write(exited, old)
	write(exited+".1", old)
	recent := "worker-j2-0123456789abcdef-11.log"
	write(recent, time.Now())
	live := "actor-a1-0123456789abcdef-12.log"
	write(live, old)
	wl.files[live] = &logFileMeta{job: "j3", live: true}
	other := "j1.log" // a job supervisor's log, say: not ours
	write(other, old)
	gone := wl.sweep(time.Now())
	slices.Sort(gone)
	if want := []string{exited, exited + ".1"}; !slices.Equal(gone, want) {
		t.Fatalf("swept %v; want %v", gone, want)
	}
	for _, keep := range []string{recent, live, other} {
		if _, err := os.Stat(filepath.Join(dir, keep)); err != nil {
			t.Errorf("%s was deleted: %v", keep, err)
		}
	}
	// Once its process exits, the live one goes too.
	wl.files[live].live = false
	if gone := wl.sweep(time.Now()); !slices.Equal(gone, []string{live}) {
		t.Fatalf("swept %v; want [%s]", gone, live)
	}
	if wl.meta(live) != nil {
		t.Fatal("the swept file's record is still kept")
	}
}

// Every name that is not a bare worker log name is refused with an error
// naming it; real names parse back to their parts.
func TestParseLogNameRefusesHostileNames(t *testing.T) {
	for _, bad := range []string{"", "..", "../worker-j1-0123456789abcdef-1.log", "/etc/passwd", "/tmp/worker-j1-0123456789abcdef-1.log",
		"sub/worker-j1-0123456789abcdef-1.log", `sub\worker-j1-0123456789abcdef-1.log`, "worker-..-0123456789abcdef-1.log",
		"j1.log", "worker-j1-0123456789abcdef-1.txt", "worker-j1-0123456789ABCDEF-1.log", "worker-j1-0123456789abcdef-0.log",
		"worker-j1-0123456789abcdef--1.log", "worker-j1-0123456789abcdef-1.log.0", "worker-j1-0123456789abcdef-1.log.x",
		"worker--0123456789abcdef-1.log", "nodeup.sock", "worker-j1-0123456789abcdef-1.log\x00", "worker-j 1-0123456789abcdef-1.log"} {
		if l, err := parseLogName(bad); err == nil {
			t.Errorf("parseLogName(%q) = %+v; want an error", bad, l)
		} else if bad != "" && !strings.Contains(err.Error(), "want") {
			t.Errorf("parseLogName(%q): %v; want the error to say what is accepted", bad, err)
		}
	}
	l, err := parseLogName("actor-a-b.c-0123456789abcdef-4242.log.3")
	if err != nil {
		t.Fatal(err)
	}
	if l != (logName{kind: logKindActor, id: "a-b.c", worker: "0123456789abcdef", pid: 4242, backup: 3}) || l.String() != "actor-a-b.c-0123456789abcdef-4242.log.3" {
		t.Fatalf("parsed %+v", l)
	}
}

// A process's output reaches its file through the pipe, and the copier
// ends (the record no longer live) once the process is gone.
func TestProcLogCopiesOutput(t *testing.T) {
	dir := t.TempDir()
	wl := newWorkerLogs(dir, 1<<20, 1, time.Hour)
	pl, err := wl.newPipe()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := execSpawn([]string{"/bin/sh", "-c", "echo hello; echo world >&2"}, nil, "", pl.w)
	if err != nil {
		pl.abort()
		t.Fatal(err)
	}
	name := logName{kind: logKindWorker, id: "j1", worker: "0123456789abcdef", pid: proc.Pid()}
	pl.start(name, "j1", "", t.Logf)
	if err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
	pl.finish()
	b, err := os.ReadFile(filepath.Join(dir, name.base()))
	if err != nil || string(b) != "hello\nworld\n" {
		t.Fatalf("log holds %q, %v", b, err)
	}
	if m := wl.meta(name.base()); m == nil || m.live || m.job != "j1" {
		t.Fatalf("record %+v; want job j1, not live", m)
	}
}
