package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// jobSupervisor runs submitted jobs' entrypoints on this node, as Ray's
// JobSupervisor actor: each in its own process group, cwd the unpacked
// working dir, stdout and stderr into <data-dir>/jobs/logs/<id>.log
// (bounded by Config.MaxJobLogBytes), its end recorded in Raft. It lives
// in the node daemon, so it outlives the client that submitted the job;
// when the node stops, its jobs' process groups are killed and the leader
// records the jobs FAILED.
type jobSupervisor struct {
	n      *Node
	root   string // <data-dir>/jobs
	chunks *jobChunks

	unpackMu sync.Mutex // one unpack at a time: the cache is per manifest

	mu    sync.Mutex
	procs map[string]*jobProc
	// pins counts, per unpacked working dir, the Job.Run calls between
	// unpack and start: neither pruneDirs nor a job delete removes it
	// before its job's process holds it.
	pins map[string]int

	// since is when this supervisor started: a job the table says runs
	// here and that began before it is an orphan of an earlier run.
	since time.Time
}

// jobOutputDelay is how long, once the entrypoint exited, its job waits
// for the rest of its process group to close the output pipe before the
// pipe is closed and the group SIGKILLed: the job is its entrypoint, as
// Ray's.
const jobOutputDelay = time.Second

// jobProc is one running entrypoint.
type jobProc struct {
	rec      *wire.JobRecord // as recorded RUNNING
	pgid     int
	wd       string
	done     chan struct{}
	stopping atomic.Bool
}

func newJobSupervisor(n *Node) *jobSupervisor {
	root := n.dir.file("jobs")
	return &jobSupervisor{n: n, root: root, chunks: &jobChunks{dir: filepath.Join(root, "chunks"), max: chunkCacheDirs * n.cfg.MaxWorkingDirBytes, size: -1}, procs: map[string]*jobProc{}, pins: map[string]int{}, since: time.Now()}
}

func (s *jobSupervisor) emptyDir() string { return filepath.Join(s.root, "empty") }

func (s *jobSupervisor) logPath(id string) string { return filepath.Join(s.root, "logs", id+".log") }

// running returns the record of job id if it runs here, else nil.
func (s *jobSupervisor) running(id string) *wire.JobRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[id]; p != nil {
		return p.rec.Copy()
	}
	return nil
}

// wdPath is the dir a working dir of content hash h unpacks to.
func (s *jobSupervisor) wdPath(h string) string { return filepath.Join(s.root, "wd", h) }

// unpack returns the dir m unpacks to, unpacking it first if this node
// has not yet (into a temporary dir renamed into place, so a half-unpacked
// dir is never used). The dir is pinned until the caller's unpin.
func (s *jobSupervisor) unpack(m *wire.JobManifest) (string, error) {
	s.unpackMu.Lock()
	defer s.unpackMu.Unlock()
	dst := s.wdPath(manifestHash(m))
	if _, err := os.Stat(dst); err == nil {
		now := time.Now()
		_ = os.Chtimes(dst, now, now) // newest: the last pruneDirs takes
		s.pin(dst, 1)
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), ".tmp-")
	if err != nil {
		return "", err
	}
	if err := unpackJobArchive(&jobChunkReader{c: s.chunks, m: m, remain: m.Size}, tmp, s.n.cfg.MaxWorkingDirBytes); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	s.pin(dst, 1)
	s.pruneDirs(dst)
	return dst, nil
}

// pin adds d (1 or -1) to wd's pins.
func (s *jobSupervisor) pin(wd string, d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pins[wd] += d; s.pins[wd] <= 0 {
		delete(s.pins, wd)
	}
}

// inUse reports the working dirs a running job or a pin holds; s.mu held.
func (s *jobSupervisor) inUse() map[string]bool {
	used := map[string]bool{}
	for _, p := range s.procs {
		used[p.wd] = true
	}
	for wd := range s.pins {
		used[wd] = true
	}
	return used
}

// removeFiles deletes finished job rec's log and its unpacked working dir
// unless a running job (or one starting) uses that dir too; the chunks
// stay in their cache, bounded on their own.
func (s *jobSupervisor) removeFiles(rec *wire.JobRecord) error {
	if err := os.Remove(s.logPath(rec.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if rec.WorkingDir == "" {
		return nil
	}
	if err := wire.CheckChunkHash(rec.WorkingDir); err != nil {
		return fmt.Errorf("working dir %q: %w", rec.WorkingDir, err)
	}
	s.unpackMu.Lock()
	defer s.unpackMu.Unlock()
	wd := s.wdPath(rec.WorkingDir)
	s.mu.Lock()
	used := s.inUse()[wd]
	s.mu.Unlock()
	if used {
		s.n.logger.Info("job delete: another job uses its working dir; kept", "job", rec.ID, "dir", wd)
		return nil
	}
	return os.RemoveAll(wd)
}

// pruneDirs keeps at most 2*chunkCacheDirs unpacked working dirs: the
// oldest that no running job uses go (keep, just unpacked, stays).
func (s *jobSupervisor) pruneDirs(keep string) {
	parent := filepath.Dir(keep)
	ents, err := os.ReadDir(parent)
	if err != nil || len(ents) <= 2*chunkCacheDirs {
		return
	}
	s.mu.Lock()
	inUse := s.inUse()
	s.mu.Unlock()
	inUse[keep] = true
	type dir struct {
		path string
		mod  time.Time
	}
	var ds []dir
	for _, e := range ents {
		path := filepath.Join(parent, e.Name())
		if fi, err := e.Info(); err == nil && e.IsDir() && !inUse[path] && !strings.HasPrefix(e.Name(), ".tmp-") {
			ds = append(ds, dir{path, fi.ModTime()})
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].mod.Before(ds[j].mod) })
	for i := 0; i < len(ents)-2*chunkCacheDirs && i < len(ds); i++ {
		if err := os.RemoveAll(ds[i].path); err != nil {
			s.n.logger.Warn("remove an old job working dir", "dir", ds[i].path, "err", err)
		}
	}
}

// jobEnv is the entrypoint's environment: the node's own, less the
// variables that would point a driver elsewhere, plus the job's --env and
// NODEUP_ADDRESS (the node's Unix socket, else its RPC address),
// NODEUP_JOB_SUBMISSION_ID and, with a working dir, NODEUP_WORKING_DIR
// (its ref, held by this node).
func (s *jobSupervisor) jobEnv(rec *wire.JobRecord) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == wire.EnvAddress || k == wire.EnvToken || k == wire.EnvJobSubmissionID || k == wire.EnvWorkingDir || k == "NODEUP_DATA_DIR" {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range rec.Env {
		env = append(env, k+"="+v)
	}
	addr := s.n.sockAddr
	if addr == "" {
		addr = s.n.rpcAddr
	}
	env = append(env, wire.EnvAddress+"="+addr, wire.EnvJobSubmissionID+"="+rec.ID)
	if rec.WorkingDir != "" {
		// The driver's tasks and actors start in the same dir on every node.
		env = append(env, wire.EnvWorkingDir+"="+wire.FormatWorkingDirRef(rec.WorkingDir, s.n.rpcAddr))
	}
	return env
}

// start runs rec's entrypoint in wd and records it RUNNING; a start that
// fails is recorded FAILED and returned as the job's record.
func (s *jobSupervisor) start(ctx context.Context, rec *wire.JobRecord, wd string) (*wire.JobRecord, error) {
	if err := os.MkdirAll(filepath.Dir(s.logPath(rec.ID)), 0o700); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(s.logPath(rec.ID), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	out := &boundedLog{f: logf, max: s.n.cfg.MaxJobLogBytes}
	cmd := exec.Command(rec.Entrypoint[0], rec.Entrypoint[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = wd, s.jobEnv(rec), out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A child the entrypoint left in the background keeps the output pipe
	// open; without this, Wait (and so the job) would last as long as it.
	cmd.WaitDelay = jobOutputDelay
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(out, "nodeup: could not start %q: %v\n", rec.Entrypoint[0], err)
		logf.Close()
		failed := rec.Copy()
		failed.Status, failed.ExitCode, failed.EndedAt = wire.JobFailed, -1, time.Now().UnixNano()
		failed.Message = truncate(fmt.Sprintf("could not start the entrypoint %q in the working dir: %v", rec.Entrypoint[0], err), wire.MaxJobMessageBytes)
		if werr := s.n.writeJob(ctx, failed, false); werr != nil {
			return nil, werr
		}
		return failed, nil
	}
	running := rec.Copy()
	running.Status, running.PID, running.StartedAt = wire.JobRunning, cmd.Process.Pid, time.Now().UnixNano()
	running.Message = "running on node " + s.n.Name()
	p := &jobProc{rec: running, pgid: cmd.Process.Pid, wd: wd, done: make(chan struct{})}
	s.mu.Lock()
	s.procs[rec.ID] = p
	s.mu.Unlock()
	s.n.group.goFunc("job-wait", func() { s.wait(p, cmd, logf) })
	if err := s.n.writeJob(ctx, running, false); err != nil {
		// Stopped or failed meanwhile: the record stands, the process goes.
		p.stopping.Store(true)
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		return nil, fmt.Errorf("job %s: record it running: %w", rec.ID, err)
	}
	s.n.logger.Info("job started", "job", rec.ID, "pid", p.pgid, "dir", wd)
	return running.Copy(), nil
}

// wait reaps p's process and records how it ended.
func (s *jobSupervisor) wait(p *jobProc, cmd *exec.Cmd, logf *os.File) {
	err := cmd.Wait()
	logf.Close()
	close(p.done)
	end := p.rec.Copy()
	end.EndedAt, end.PID = time.Now().UnixNano(), 0
	end.ExitCode = cmd.ProcessState.ExitCode()
	var ee *exec.ExitError
	switch {
	case p.stopping.Load():
		end.Status, end.Message = wire.JobStopped, "stopped by nodeup job stop"
	case err == nil || errors.Is(err, exec.ErrWaitDelay):
		end.Status, end.Message = wire.JobSucceeded, "the entrypoint exited with code 0"
	case errors.As(err, &ee) && end.ExitCode >= 0:
		end.Status, end.Message = wire.JobFailed, fmt.Sprintf("the entrypoint exited with code %d", end.ExitCode)
	default:
		end.Status, end.Message = wire.JobFailed, fmt.Sprintf("the entrypoint ended: %v", err)
	}
	// Whatever the entrypoint left in its group goes with it.
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	if s.n.ctx.Err() != nil && !p.stopping.Load() {
		// The node is stopping and killed it (killAll): the leader records
		// the job FAILED with the node's fate once it sees the node gone,
		// not "signal: killed" from a node whose Raft still runs a moment.
		s.n.logger.Info("job killed: the node stops", "job", end.ID)
	} else {
		s.record(end)
	}
	s.mu.Lock()
	delete(s.procs, end.ID)
	s.mu.Unlock()
	s.n.logger.Info("job ended", "job", end.ID, "status", end.Status, "exit_code", end.ExitCode)
}

// record writes a job's end, retrying while no leader answers; an
// application error (the job already final) ends the attempts.
func (s *jobSupervisor) record(end *wire.JobRecord) {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		ctx, cancel := context.WithTimeout(s.n.ctx, 20*time.Second)
		err := s.n.writeJob(ctx, end, false)
		cancel()
		var re *rpc.Error
		if err == nil || (errors.As(err, &re) && re.Code != wire.CodeNoLeader && re.Code != wire.CodeNotLeader) {
			if err != nil {
				s.n.logger.Warn("record a job's end", "job", end.ID, "err", err)
			}
			return
		}
		select {
		case <-s.n.ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// stop sends SIGTERM to job id's process group and SIGKILL after grace;
// false when the job does not run here.
func (s *jobSupervisor) stop(id string, grace time.Duration) bool {
	s.mu.Lock()
	p := s.procs[id]
	s.mu.Unlock()
	if p == nil || p.pgid <= 0 {
		return false
	}
	p.stopping.Store(true)
	_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
	s.n.group.goFunc("job-stop", func() {
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		case <-s.n.ctx.Done():
		}
	})
	return true
}

// killAll kills every job's process group (the node is stopping).
func (s *jobSupervisor) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.pgid > 0 { // -0 would be this node's own group
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		}
	}
}

// readLog returns up to max bytes of job id's log from offset.
func (s *jobSupervisor) readLog(id string, offset int64, max int) (*wire.JobLogsResponse, error) {
	if offset < 0 {
		return nil, badInput("Job.Logs: offset %d: must not be negative", offset)
	}
	if max <= 0 || max > wire.MaxJobLogRead {
		max = wire.MaxJobLogRead
	}
	f, err := os.Open(s.logPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return &wire.JobLogsResponse{Next: offset}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	resp := &wire.JobLogsResponse{Next: offset, Size: st.Size()}
	if offset >= st.Size() {
		return resp, nil
	}
	buf := make([]byte, min(int64(max), st.Size()-offset))
	k, err := f.ReadAt(buf, offset)
	if err != nil && err != io.EOF {
		return nil, err
	}
	resp.Data, resp.Next = buf[:k], offset+int64(k)
	return resp, nil
}

// boundedLog writes to f until max bytes, then drops the rest once it
// has said so in the log.
type boundedLog struct {
	mu      sync.Mutex
	f       *os.File
	n, max  int64
	dropped bool
}

func (b *boundedLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n < b.max {
		k := min(int64(len(p)), b.max-b.n)
		w, err := b.f.Write(p[:k])
		b.n += int64(w)
		if err != nil {
			return len(p), nil // the job goes on even if its log cannot
		}
	}
	if b.n >= b.max && !b.dropped {
		b.dropped = true
		fmt.Fprintf(b.f, "\nnodeup: this job's log reached %d bytes (--max-job-log); the rest is dropped\n", b.max)
	}
	return len(p), nil
}

// orphanInterval is how often a node looks for jobs the table says run
// here that its supervisor does not hold.
const orphanInterval = 2 * time.Second

// failOrphans records FAILED, until the node stops, every job the table
// says is PENDING or RUNNING on this node but that started (or was
// submitted) before this supervisor did: the node restarted under the
// same ID before the leader saw it dead, and the process is gone.
func (s *jobSupervisor) failOrphans(ctx context.Context) {
	t := time.NewTicker(orphanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		jobs, err := s.n.fsm.State().Jobs()
		if err != nil {
			continue
		}
		for _, j := range jobs {
			began := max(j.StartedAt, j.SubmittedAt)
			if j.Status.Final() || j.NodeID != s.n.ID() || began >= s.since.UnixNano() || s.running(j.ID) != nil {
				continue
			}
			s.n.failJob(ctx, j, fmt.Sprintf("node %s restarted while the job ran", s.n.Name()))
		}
	}
}
