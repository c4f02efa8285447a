package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodeup/nodeup/wire"
)

// Worker and actor process output: each process's stdout and stderr go
// through a pipe this node reads, line by line, into its own size-rotated
// file in the node's log dir (<data-dir>/logs), named
//
//	worker-<job>-<worker>-<pid>.log   a task worker of job <job>
//	actor-<actor>-<worker>-<pid>.log  an actor's dedicated worker
//
// with rotated backups <name>.1 (newest) … <name>.<backups>. <worker> is
// the 16 hex digits of the worker's ID. The rotation is this node's own
// (rename on size, keep a count): gopkg.in/natefinch/lumberjack.v2 starts a
// goroutine per logger that its Close never stops (natefinch/lumberjack
// issues 56 and 205), one leaked per worker process here.
const (
	// DefaultWorkerLogMaxBytes is the size a worker log file rotates at
	// (Config.WorkerLogMaxBytes, --worker-log-max-size).
	DefaultWorkerLogMaxBytes = 100 << 20
	// DefaultWorkerLogBackups is how many rotated files a worker log keeps
	// besides the current one (Config.WorkerLogBackups).
	DefaultWorkerLogBackups = 5
	// DefaultWorkerLogRetention is how long a worker log outlives its
	// process (Config.WorkerLogRetention): the sweep deletes the files of
	// a process that exited once they were not written for this long.
	DefaultWorkerLogRetention = 24 * time.Hour
	// maxLogLine bounds one line of worker output: a longer one is split
	// into lines of this many bytes (the node never buffers more).
	maxLogLine = 64 << 10
	// logDrainGrace is how long the node still reads a worker's pipe after
	// the process exited (a child it started may hold the pipe open).
	logDrainGrace = 2 * time.Second
)

// Worker log file kinds, the first part of their names.
const (
	logKindWorker = "worker"
	logKindActor  = "actor"
)

// logName is a worker log file name taken apart.
type logName struct {
	kind   string // logKindWorker or logKindActor
	id     string // the job ID (worker) or the actor ID (actor)
	worker string // 16 hex digits
	pid    int
	backup int // 0: the current file; n: <base>.n
}

// base is the name of the current file of the process.
func (l logName) base() string {
	return fmt.Sprintf("%s-%s-%s-%d.log", l.kind, l.id, l.worker, l.pid)
}

// String is the file name.
func (l logName) String() string {
	if l.backup > 0 {
		return l.base() + "." + strconv.Itoa(l.backup)
	}
	return l.base()
}

// parseLogName takes a worker log file name apart; the error says why name
// is not one. Only a bare name in the pattern above passes: no path
// separator, no "..", no other file of the log dir.
func parseLogName(name string) (logName, error) {
	var l logName
	const want = "want worker-<job>-<worker>-<pid>.log or actor-<actor>-<worker>-<pid>.log, optionally with a .<n> backup suffix"
	if name == "" {
		return l, fmt.Errorf("log file name is empty; %s", want)
	}
	if len(name) > 256 || strings.ContainsAny(name, "/\\\x00") || strings.Contains(name, "..") {
		return l, fmt.Errorf("log file name %q: a bare file name without '/', '\\' or '..' only; %s", clipName(name), want)
	}
	rest := name
	if i := strings.LastIndex(rest, ".log."); i >= 0 {
		n, err := strconv.Atoi(rest[i+5:])
		if err != nil || n < 1 || n > 999 || strconv.Itoa(n) != rest[i+5:] {
			return l, fmt.Errorf("log file name %q: backup suffix %q is not a number 1..999; %s", name, rest[i+5:], want)
		}
		l.backup, rest = n, rest[:i+4]
	}
	if !strings.HasSuffix(rest, ".log") {
		return l, fmt.Errorf("log file name %q: no .log suffix; %s", name, want)
	}
	rest = strings.TrimSuffix(rest, ".log")
	switch {
	case strings.HasPrefix(rest, logKindWorker+"-"):
		l.kind, rest = logKindWorker, strings.TrimPrefix(rest, logKindWorker+"-")
	case strings.HasPrefix(rest, logKindActor+"-"):
		l.kind, rest = logKindActor, strings.TrimPrefix(rest, logKindActor+"-")
	default:
		return l, fmt.Errorf("log file name %q: not a worker or actor log; %s", name, want)
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return l, fmt.Errorf("log file name %q: no pid; %s", name, want)
	}
	pid, err := strconv.Atoi(rest[i+1:])
	if err != nil || pid < 1 || strconv.Itoa(pid) != rest[i+1:] {
		return l, fmt.Errorf("log file name %q: pid %q is not a positive number; %s", name, rest[i+1:], want)
	}
	l.pid, rest = pid, rest[:i]
	i = strings.LastIndexByte(rest, '-')
	if i < 0 || !isHex16(rest[i+1:]) {
		return l, fmt.Errorf("log file name %q: no 16-hex-digit worker ID; %s", name, want)
	}
	l.worker, l.id = rest[i+1:], rest[:i]
	if err := wire.CheckID("log file name's ID", l.id); err != nil {
		return l, fmt.Errorf("log file name %q: %w", name, err)
	}
	return l, nil
}

func isHex16(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func clipName(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// rotatingFile is an append-only file that, when a write would take it
// past max bytes, is renamed to <path>.1 (the older backups shifted up,
// the one past backups removed) and started anew. Writes are whole lines
// (copyLines), so a line is never split across two files. Not safe for
// concurrent use: one copier goroutine owns it.
type rotatingFile struct {
	path    string
	max     int64
	backups int
	f       *os.File
	size    int64
}

// openRotating opens (creates, or appends to) path.
func openRotating(path string, max int64, backups int) (*rotatingFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &rotatingFile{path: path, max: max, backups: backups, f: f, size: st.Size()}, nil
}

// Write appends p, rotating first when p would take the file past max.
func (r *rotatingFile) Write(p []byte) (int, error) {
	if r.f == nil {
		return 0, os.ErrClosed
	}
	if r.size > 0 && r.size+int64(len(p)) > r.max {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

func (r *rotatingFile) rotate() error {
	if err := r.f.Close(); err != nil {
		return err
	}
	r.f = nil
	if r.backups <= 0 {
		_ = os.Remove(r.path)
	} else {
		_ = os.Remove(fmt.Sprintf("%s.%d", r.path, r.backups))
		for i := r.backups - 1; i >= 1; i-- {
			_ = os.Rename(fmt.Sprintf("%s.%d", r.path, i), fmt.Sprintf("%s.%d", r.path, i+1))
		}
		if err := os.Rename(r.path, r.path+".1"); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	r.f, r.size = f, 0
	return nil
}

// Close closes the current file.
func (r *rotatingFile) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// copyLines copies r to w a line at a time until r ends (EOF, a closed
// pipe, a passed read deadline), splitting lines longer than maxLine into
// pieces of maxLine bytes each ended by '\n'; a last line without '\n'
// gets one. Write errors drop the line, not the copy: the process must
// never block on a full pipe because its log is broken.
func copyLines(r io.Reader, w io.Writer, maxLine int) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				line = append(line[:len(line):len(line)], '\n')
			}
			_, _ = w.Write(line)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// workerLogs is the node's record of its worker log files: where they
// go, how they rotate, and which belong to a live process (the sweep
// never deletes those) with their job, which an actor's file name lacks.
type workerLogs struct {
	dir       string
	maxBytes  int64
	backups   int
	retention time.Duration
	mu        sync.Mutex
	// files maps the base name of each file this node started to what the
	// name does not hold; an entry goes when the sweep deletes the file.
	files map[string]*logFileMeta
}

// logFileMeta is what the node knows of one process's log.
type logFileMeta struct {
	job   string
	live  bool
	class string // an actor's class name, "" if unknown
}

func newWorkerLogs(dir string, maxBytes int64, backups int, retention time.Duration) *workerLogs {
	if maxBytes <= 0 {
		maxBytes = DefaultWorkerLogMaxBytes
	}
	switch {
	case backups == 0:
		backups = DefaultWorkerLogBackups
	case backups < 0:
		backups = 0
	}
	if retention <= 0 {
		retention = DefaultWorkerLogRetention
	}
	return &workerLogs{dir: dir, maxBytes: maxBytes, backups: backups, retention: retention, files: map[string]*logFileMeta{}}
}

// procLog is one process's output pipe and its copier.
type procLog struct {
	r, w *os.File
	done chan struct{}
	name string
	logs *workerLogs
}

// newPipe makes the pipe a process about to start writes to.
func (wl *workerLogs) newPipe() (*procLog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("worker output pipe: %w", err)
	}
	return &procLog{r: r, w: w, done: make(chan struct{}), logs: wl}, nil
}

// start begins copying the started process's output (its pid known now)
// into its file, and closes this node's copy of the write end. A file
// that cannot be opened drops the output (after logging why) but still
// drains the pipe.
func (pl *procLog) start(name logName, job, class string, warn func(msg string, args ...any)) {
	pl.w.Close()
	pl.name = name.base()
	wl := pl.logs
	wl.mu.Lock()
	wl.files[pl.name] = &logFileMeta{job: job, live: true, class: class}
	wl.mu.Unlock()
	var out io.Writer = io.Discard
	_ = os.MkdirAll(wl.dir, 0o750)
	rf, err := openRotating(filepath.Join(wl.dir, pl.name), wl.maxBytes, wl.backups)
	if err != nil {
		warn("worker log file: output dropped", "file", pl.name, "err", err)
	} else {
		out = rf
	}
	go func() {
		defer close(pl.done)
		copyLines(pl.r, out, maxLogLine)
		pl.r.Close()
		if rf != nil {
			rf.Close()
		}
	}()
}

// abort closes both ends of a pipe whose process did not start.
func (pl *procLog) abort() {
	pl.w.Close()
	pl.r.Close()
}

// finish waits (after the process exited) for the copier to reach the
// pipe's end, at most logDrainGrace, and marks the file not live.
func (pl *procLog) finish() {
	_ = pl.r.SetReadDeadline(time.Now().Add(logDrainGrace))
	<-pl.done
	wl := pl.logs
	wl.mu.Lock()
	if m := wl.files[pl.name]; m != nil {
		m.live = false
	}
	wl.mu.Unlock()
}

// meta returns what the node knows of the file with base name base (nil:
// nothing, e.g. a file from before a restart).
func (wl *workerLogs) meta(base string) *logFileMeta {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	if m := wl.files[base]; m != nil {
		c := *m
		return &c
	}
	return nil
}
