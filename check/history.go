// Package check is a Jepsen-style invariant checker for nodeup's scheduler.
//
// A workload (workload.go) runs tasks and actors whose own code appends
// events to a trace file: when a task was submitted, when it started, on
// which node and in which process, with which resources and GPUs, when it
// blocked in Get and woke up, when it ended or crashed. That client-side
// history is black-box: it records what the user's code saw, not what the
// scheduler believes. Pure functions (checker.go) then check the history
// against the cluster's node capacities and report every instant at which
// an invariant was broken, with the nodes, resources and tasks involved.
//
// docs/checker.md describes each invariant and its tolerance.
package check

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"
)

// EnvTrace is the environment variable through which the workload passes
// the trace file's path to its tasks and actors (set as the job's runtime
// env; NODEUP_* names are reserved for nodeup itself).
const EnvTrace = "CHECK_TRACE"

// Kind is what an event records.
type Kind string

// Event kinds. Task kinds are recorded by the task's own code (start, end,
// block, unblock, crash) or by the driver (submit, result); actor
// incarnations use start (in the constructor) and kill/killed (driver);
// placement groups and phases are recorded by the driver.
const (
	Submit    Kind = "submit"     // driver, just before Remote
	Start     Kind = "start"      // task or actor constructor, first thing
	End       Kind = "end"        // task, last thing before returning
	Block     Kind = "block"      // task, just before Get/Wait/Signal.Wait
	Unblock   Kind = "unblock"    // task, just after Get/Wait returned
	Crash     Kind = "crash"      // task, just before os.Exit: its process dies
	Result    Kind = "result"     // driver, once the task's ref resolved
	Kill      Kind = "kill"       // driver, just before Kill of an actor
	Killed    Kind = "killed"     // driver, after Kill returned
	PGCreate  Kind = "pg_create"  // driver, just before CreatePlacementGroup
	PGReady   Kind = "pg_ready"   // driver, after Ready: the bundles' nodes
	PGRemove  Kind = "pg_remove"  // driver, just before Remove
	PGRemoved Kind = "pg_removed" // driver, after Remove returned
	Phase     Kind = "phase"      // driver, at the start of a workload phase
	Leak      Kind = "leak"       // driver: a node did not get its resources back after a phase
	Cluster   Kind = "cluster"    // driver, first: the nodes (Event.Nodes), so a trace checks alone
)

// Error kinds of a Result event.
const (
	ErrCrashed = "crashed" // *worker.WorkerCrashedError: retries used up
	ErrTask    = "task"    // *worker.TaskError
	ErrOther   = "other"   // anything else (lost object, timeout, option)
)

// Bundle is one placement-group bundle: its index, resources (units) and,
// once the group is ready, the name of the node holding it.
type Bundle struct {
	Index  int                `json:"index"`
	Demand map[string]float64 `json:"demand"`
	Node   string             `json:"node,omitempty"`
	// GPUIDs are the devices reserved for the bundle, when the API says
	// (it does not yet: the checker infers them from the bundle's tasks).
	GPUIDs []int `json:"gpu_ids,omitempty"`
}

// Event is one line of the trace file. Times are Unix nanoseconds of the
// machine clock, which every process of a single-machine test shares.
// Resource amounts are in units (CPU 1, GPU 0.5, "slot" 1).
type Event struct {
	Time int64 `json:"t"`
	Kind Kind  `json:"kind"`
	// Task is the workload's own ID of the task or actor (not nodeup's).
	Task string `json:"task,omitempty"`
	// Attempt counts this task's starts before this one (0: first run).
	Attempt int    `json:"attempt,omitempty"`
	Node    string `json:"node,omitempty"` // worker.NodeName() where it ran
	PID     int    `json:"pid,omitempty"`  // process that recorded the event
	Actor   bool   `json:"actor,omitempty"`
	// Demand is what the task or actor asked for (CPU, GPU, custom).
	Demand map[string]float64 `json:"demand,omitempty"`
	// Strategy is "default", "spread", "affinity:<node name>",
	// "labels:<key>=<v1>|<v2>,..." or "pg:<group>:<bundle index or -1>".
	Strategy string `json:"strategy,omitempty"`
	// GPUIDs are worker.GPUIDs as the task or actor saw them.
	GPUIDs []int `json:"gpu_ids,omitempty"`

	// Submit only.
	Deps       []string `json:"deps,omitempty"`  // tasks whose results are direct arguments
	Dur        float64  `json:"dur,omitempty"`   // planned run time, seconds
	Burst      string   `json:"burst,omitempty"` // SPREAD burst it belongs to
	Phase      string   `json:"phase,omitempty"` // workload phase (Phase events too)
	WC         bool     `json:"wc,omitempty"`    // subject to the work-conservation check
	MaxRetries int      `json:"max_retries,omitempty"`

	// Result only: the ref's error ("" = success), its kind and, for
	// ErrCrashed, the worker deaths the SDK counted.
	Err      string `json:"err,omitempty"`
	ErrKind  string `json:"err_kind,omitempty"`
	Attempts int    `json:"attempts,omitempty"`

	// Placement groups (Task is empty; Group names the group).
	Group      string   `json:"group,omitempty"`
	PGStrategy string   `json:"pg_strategy,omitempty"`
	Bundles    []Bundle `json:"bundles,omitempty"`
	// PGIdle (PGCreate only): the group was created alone onto idle nodes
	// (GroupPlan.Idle), so SPREAD and PACK must place it as such.
	PGIdle bool `json:"pg_idle,omitempty"`

	// Detail is free text (a Leak's description).
	Detail string `json:"detail,omitempty"`
	// Nodes are the cluster's nodes (Cluster only).
	Nodes []Node `json:"nodes,omitempty"`
}

// At returns the event's time.
func (e Event) At() time.Time { return time.Unix(0, e.Time) }

// History is a trace's events in time order.
type History []Event

// Recorder appends events to a trace file, one JSON line per write(2) with
// O_APPEND, so concurrent processes never interleave within a line.
type Recorder struct {
	path string
}

// NewRecorder returns a recorder for path (created on first Record).
func NewRecorder(path string) *Recorder { return &Recorder{path: path} }

// RecorderFromEnv returns the recorder named by $CHECK_TRACE, or nil when
// it is unset (a task run outside the checker records nothing).
func RecorderFromEnv() *Recorder {
	if p := os.Getenv(EnvTrace); p != "" {
		return NewRecorder(p)
	}
	return nil
}

// Path returns the trace file's path.
func (r *Recorder) Path() string { return r.path }

// Record stamps e with the time and this process's PID (when unset) and
// appends it. A nil recorder records nothing.
func (r *Recorder) Record(e Event) error {
	if r == nil {
		return nil
	}
	if e.Time == 0 {
		e.Time = time.Now().UnixNano()
	}
	if e.PID == 0 {
		e.PID = os.Getpid()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("record %s event of %q: %w", e.Kind, e.Task, err)
	}
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("record %s event of %q: %w", e.Kind, e.Task, err)
	}
	_, werr := f.Write(append(b, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("record %s event of %q in %s: %w", e.Kind, e.Task, r.path, werr)
	}
	return nil
}

// NextAttempt returns how many times task has started before (0 the first
// time), counting starts in marker files next to the trace (<trace>.d/),
// which every process on the machine sees. Each call claims one attempt.
func (r *Recorder) NextAttempt(task string) (int, error) {
	dir := r.path + ".d"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("attempt markers of %q: %w", task, err)
	}
	for n := 0; n < 1000; n++ {
		f, err := os.OpenFile(dir+"/"+task+"."+strconv.Itoa(n), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("attempt marker %d of %q: %w", n, task, err)
		}
		return n, f.Close()
	}
	return 0, fmt.Errorf("task %q: more than 1000 attempts", task)
}

// ReadHistory reads a trace file and returns its events sorted by time
// (stable: events of one process keep their order).
func ReadHistory(path string) (History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	defer f.Close()
	var h History
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for line := 1; sc.Scan(); line++ {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("read history %s line %d: %w", path, line, err)
		}
		h = append(h, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read history %s: %w", path, err)
	}
	h.Sort()
	return h, nil
}

// Sort orders the history by time, keeping the order of equal times.
func (h History) Sort() { sort.SliceStable(h, func(i, j int) bool { return h[i].Time < h[j].Time }) }
