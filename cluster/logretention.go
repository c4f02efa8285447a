package cluster

import (
	"os"
	"path/filepath"
	"time"
)

// sweepInterval is how often the retention sweep runs: a quarter of the
// retention, between 10 ms (tests' tiny retentions) and 10 minutes.
func (wl *workerLogs) sweepInterval() time.Duration {
	return min(max(wl.retention/4, 10*time.Millisecond), 10*time.Minute)
}

// sweep deletes the worker log files (current and rotated) of processes
// that are not running here any more and were not written for the
// retention period: a finished job's logs once it has been over for that
// long. Files not in the worker log pattern are never touched. It returns
// the names deleted.
func (wl *workerLogs) sweep(now time.Time) []string {
	entries, err := wl.logFiles()
	if err != nil {
		return nil
	}
	var deleted []string
	present := map[string]bool{} // current files still here
	for _, lf := range entries {
		e, name := lf.entry, lf.name
		if m := wl.meta(name.base()); m != nil && m.live {
			present[name.base()] = true
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < wl.retention {
			if name.backup == 0 {
				present[e.Name()] = true
			}
			continue
		}
		if os.Remove(filepath.Join(wl.dir, e.Name())) == nil {
			deleted = append(deleted, e.Name())
		} else if name.backup == 0 {
			present[e.Name()] = true
		}
	}
	// Forget the exited processes whose current file is gone.
	wl.mu.Lock()
	for base, m := range wl.files {
		if !m.live && !present[base] {
			delete(wl.files, base)
		}
	}
	wl.mu.Unlock()
	return deleted
}

// sweepWorkerLogs runs the worker log retention sweep until the node
// stops.
func (n *Node) sweepWorkerLogs() {
	wl := n.workers.logs
	tick := time.NewTicker(wl.sweepInterval())
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-tick.C:
			if gone := wl.sweep(now); len(gone) > 0 {
				n.logger.Debug("deleted worker logs past retention", "files", len(gone), "retention", wl.retention)
			}
		}
	}
}

// logFile is a regular file of the worker log directory whose name is in
// the worker log pattern, with that name parsed.
type logFile struct {
	entry os.DirEntry
	name  logName
}

// logFiles lists the worker log directory's files in the worker log
// pattern (anything else there is skipped, never touched), by name.
func (wl *workerLogs) logFiles() ([]logFile, error) {
	entries, err := os.ReadDir(wl.dir)
	var out []logFile
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if name, perr := parseLogName(e.Name()); perr == nil {
			out = append(out, logFile{entry: e, name: name})
		}
	}
	return out, err
}
