package cluster

import (
	"fmt"
	"sync"
	"time"
)

// Fate-sharing (issue 17): a job ends when its driver ends, however it ends.
// The node a driver registered with (Job.Register, which the driver must
// run beside) watches the driver's process; once it has exited (exit,
// panic, a signal, kill -9) the node runs the job-end path Shutdown runs
// (endJob): the leader ends the job's non-detached actors and placement
// groups, and every node stops the job's workers and frees its objects. As
// Ray's raylet, which ends a job when its driver's process goes away. The
// process, not a connection, is watched: pooled connections close when idle
// and reconnect, so a closed one does not mean a dead driver.

// driverPollInterval is how often the watched drivers' processes are
// checked: it bounds how late a dead driver is noticed (the job-end path
// then takes well under a second on a healthy cluster).
const driverPollInterval = 250 * time.Millisecond

// maxWatchedDrivers bounds the drivers one node watches at once (each a
// map entry; Job.Register comes from the network).
const maxWatchedDrivers = 4096

// driverProc is a watched driver: its PID, and its start time (clock ticks
// since boot, /proc/<pid>/stat field 22; 0 where unknown), so that a reused
// PID is not mistaken for the driver.
type driverProc struct {
	pid   int
	start uint64
}

// driverWatch holds the drivers this node watches, by job ID.
type driverWatch struct {
	mu      sync.Mutex
	drivers map[string]driverProc
}

// watch starts watching job's driver, the process pid on this machine. It
// returns false, watching nothing, when the process is not visible here
// (a driver in another PID namespace): that job then ends only at Shutdown.
// It fails when maxWatchedDrivers drivers are watched already.
func (w *driverWatch) watch(job string, pid int) (bool, error) {
	if pid <= 0 {
		return false, nil
	}
	start, ok := processStart(pid)
	if !ok {
		return false, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.drivers == nil {
		w.drivers = map[string]driverProc{}
	}
	if _, dup := w.drivers[job]; !dup && len(w.drivers) >= maxWatchedDrivers {
		return false, fmt.Errorf("job %s: this node already watches %d drivers (the most it does)", job, maxWatchedDrivers)
	}
	w.drivers[job] = driverProc{pid: pid, start: start}
	return true, nil
}

// forget stops watching job's driver (its job ended).
func (w *driverWatch) forget(job string) {
	w.mu.Lock()
	delete(w.drivers, job)
	w.mu.Unlock()
}

// gone removes and returns the jobs whose driver process has exited.
func (w *driverWatch) gone() []string {
	w.mu.Lock()
	ds := make(map[string]driverProc, len(w.drivers))
	for j, d := range w.drivers {
		ds[j] = d
	}
	w.mu.Unlock()
	var jobs []string
	for j, d := range ds {
		if start, ok := processStart(d.pid); ok && start == d.start {
			continue
		}
		jobs = append(jobs, j)
	}
	w.mu.Lock()
	for _, j := range jobs {
		delete(w.drivers, j)
	}
	w.mu.Unlock()
	return jobs
}

// watchDrivers ends the job of each watched driver whose process exits,
// until the node stops.
func (n *Node) watchDrivers() {
	t := time.NewTicker(driverPollInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		for _, job := range n.drivers.gone() {
			n.endJob(job, "driver exited")
		}
	}
}
