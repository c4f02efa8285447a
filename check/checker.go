package check

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Invariant names, as Violation.Invariant reports them.
const (
	InvCapacity   = "capacity"          // no node, bundle or group holds more than it has
	InvWork       = "work-conservation" // no task waits while a node that fits it is idle
	InvMakespan   = "makespan"          // N tasks of D seconds on C CPUs take about ceil(N/C)·D
	InvSpread     = "spread"            // a SPREAD burst puts no node 2 tasks ahead of another
	InvGPU        = "gpu"               // GPU IDs: the right count, bundle devices, no over-share
	InvRetry      = "retry"             // retries run in a new process; deaths are not double-counted
	InvPlacement  = "placement"         // affinity, labels, bundles and PG strategies are honoured
	InvCompletion = "completion"        // every task resolves, every started attempt ends
	InvLeak       = "leak"              // a node gets all its resources back once work ends
)

// Node is one node of the cluster under test: its name (worker.NodeName()),
// total resources in units and labels.
type Node struct {
	Name   string             `json:"name"`
	Total  map[string]float64 `json:"total"`
	Labels map[string]string  `json:"labels,omitempty"`
}

// Config is what the checker knows besides the history.
type Config struct {
	// Nodes are the cluster's nodes; when empty, those of the history's
	// Cluster event.
	Nodes []Node
	// WorkBound is how long a ready task may wait while some node
	// continuously has room for it (B; default 1.5 s).
	WorkBound time.Duration
	// BlockGrace: a task that was blocked in Get/Wait at any time within
	// this long before another task's start counts as lending its CPU at
	// that start (the lease may have been granted a little before the task
	// started). Default 1 s.
	BlockGrace time.Duration
	// ReleaseGrace: for work conservation, resources count as held this
	// long after the task ended, the actor was killed or the group removed
	// (the release travels back to the node). Default 250 ms.
	ReleaseGrace time.Duration
	// MakespanSlack is added to ceil(N/C)·D in makespan phases (default 2 s).
	MakespanSlack time.Duration
}

func (c Config) withDefaults(m *model) Config {
	if len(c.Nodes) == 0 {
		c.Nodes = m.nodes
	}
	if c.WorkBound == 0 {
		c.WorkBound = 1500 * time.Millisecond
	}
	if c.BlockGrace == 0 {
		c.BlockGrace = time.Second
	}
	if c.ReleaseGrace == 0 {
		c.ReleaseGrace = 250 * time.Millisecond
	}
	if c.MakespanSlack == 0 {
		c.MakespanSlack = 2 * time.Second
	}
	return c
}

func (c Config) node(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Violation is one broken invariant: when, where, what was held against
// what total, by which tasks (task#attempt), and a sentence saying it.
type Violation struct {
	Invariant string
	At        time.Time
	Node      string
	Resource  string
	Held      float64
	Total     float64
	Tasks     []string
	Detail    string
}

// String is one line: invariant, time, node, resource and the detail.
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s at %s", v.Invariant, v.At.Format("15:04:05.000"))
	if v.Node != "" {
		fmt.Fprintf(&b, " node %s", v.Node)
	}
	if v.Resource != "" {
		fmt.Fprintf(&b, " %s held %g of %g", v.Resource, v.Held, v.Total)
	}
	fmt.Fprintf(&b, ": %s", v.Detail)
	if len(v.Tasks) > 0 {
		fmt.Fprintf(&b, " [tasks: %s]", strings.Join(v.Tasks, ", "))
	}
	return b.String()
}

// run checks one invariant over h, with cfg's unset fields filled in from
// h's cluster.
func run(h History, cfg Config, check func(*model, Config) []Violation) []Violation {
	m := build(h)
	return check(m, cfg.withDefaults(m))
}

// Check runs every invariant over h and returns the violations, ordered by
// invariant then time.
func Check(h History, cfg Config) []Violation {
	m := build(h)
	cfg = cfg.withDefaults(m)
	var out []Violation
	for _, f := range []func(*model, Config) []Violation{
		checkCapacity, checkWork, checkMakespan, checkSpread, checkGPUs, checkRetries, checkPlacement, checkCompletion, checkLeaks,
	} {
		out = append(out, f(m, cfg)...)
	}
	return out
}

// CheckCapacity reports instants when a node, bundle or placement group on
// a node held more of a resource than it has. For CPU, tasks blocked in
// Get/Wait (within BlockGrace) do not count at other tasks' starts.
func CheckCapacity(h History, cfg Config) []Violation { return run(h, cfg, checkCapacity) }

// CheckWorkConservation reports ready tasks (default strategy, flagged WC
// at submit) that waited more than WorkBound while a node had room.
func CheckWorkConservation(h History, cfg Config) []Violation { return run(h, cfg, checkWork) }

// CheckMakespan reports makespan phases that took longer than
// ceil(N/C)·D + MakespanSlack.
func CheckMakespan(h History, cfg Config) []Violation { return run(h, cfg, checkMakespan) }

// CheckSpread reports SPREAD bursts that left a node two or more tasks
// ahead of another.
func CheckSpread(h History, cfg Config) []Violation { return run(h, cfg, checkSpread) }

// CheckGPUs reports wrong GPU ID counts, bundle work outside its bundle's
// devices, and devices shared beyond 1.0.
func CheckGPUs(h History, cfg Config) []Violation { return run(h, cfg, checkGPUs) }

// CheckRetries reports retries in the process that crashed and tasks that
// counted more worker deaths than processes died.
func CheckRetries(h History, cfg Config) []Violation { return run(h, cfg, checkRetries) }

// CheckPlacement reports work off its affinity node, labels or bundle node,
// placement groups that broke STRICT_PACK or STRICT_SPREAD, and SPREAD or
// PACK groups created onto idle nodes (Event.PGIdle) that SPREAD over fewer
// nodes than could each hold a bundle, or PACK onto several nodes when one
// could hold them all.
func CheckPlacement(h History, cfg Config) []Violation { return run(h, cfg, checkPlacement) }

// CheckCompletion reports tasks that failed or never resolved, and
// attempts that started but neither ended nor crashed.
func CheckCompletion(h History, cfg Config) []Violation { return run(h, cfg, checkCompletion) }

// Summary formats violations for a test log: a count per invariant, then
// up to perInvariant lines of each.
func Summary(vs []Violation, perInvariant int) string {
	byInv := map[string][]Violation{}
	var names []string
	for _, v := range vs {
		if byInv[v.Invariant] == nil {
			names = append(names, v.Invariant)
		}
		byInv[v.Invariant] = append(byInv[v.Invariant], v)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		list := byInv[n]
		fmt.Fprintf(&b, "%s: %d violation(s)\n", n, len(list))
		for i, v := range list {
			if i == perInvariant {
				fmt.Fprintf(&b, "  ... %d more\n", len(list)-i)
				break
			}
			fmt.Fprintf(&b, "  %s\n", v)
		}
	}
	return b.String()
}

// ns converts Unix nanoseconds to a time.
func ns(t int64) time.Time { return time.Unix(0, t) }

// secs formats a duration in nanoseconds as seconds.
func secs(d int64) string { return fmt.Sprintf("%.2fs", time.Duration(d).Seconds()) }
