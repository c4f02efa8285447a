// Package bench is nodeup's microbenchmark suite, run by `nodeup bench`: the
// metrics of Ray's `ray microbenchmark` under Ray's names, physical baselines
// measured in the same run (memcpy bandwidth, a Unix-socket round trip between
// two processes, loopback TCP bandwidth) next to the metrics they bound, and
// extras (cross-node object pull, task latency percentiles, idle node RSS,
// Ray's single-node scalability set at reduced size).
//
// Each metric lives in a registry filled by one small file per group
// (baselines.go, tasks.go, objects.go, actors.go, placement.go,
// transfer.go, latency.go, node.go, scalability.go). A metric that cannot run
// against the cluster measured (a two-node metric on a one-node cluster) is
// reported as skipped with the reason, never measured by something else.
//
// The remote functions the metrics use are registered at package init, so a
// binary that links this package (nodeup itself) can serve as the worker of a
// bench job: its main must call RunIfChild before anything else.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Groups, in the order the suite runs and prints them.
const (
	GroupBaseline    = "baseline"    // physical bounds measured in the same run
	GroupTasks       = "tasks"       // Ray's task metrics
	GroupObjects     = "objects"     // Ray's put/get/wait metrics
	GroupActors      = "actors"      // Ray's actor metrics
	GroupPlacement   = "placement"   // Ray's placement group metric
	GroupTransfer    = "transfer"    // cross-node object pull
	GroupLatency     = "latency"     // task latency percentiles
	GroupNode        = "node"        // node daemon footprint
	GroupScalability = "scalability" // Ray's single-node scalability set, reduced
)

var groupOrder = []string{GroupBaseline, GroupTasks, GroupObjects, GroupActors, GroupPlacement,
	GroupTransfer, GroupLatency, GroupNode, GroupScalability}

// Metric is one benchmark: what it is called, what it reports, and how to
// measure it.
type Metric struct {
	// Name is Ray's metric name where Ray has the metric (e.g.
	// "single_client_tasks_sync"), else a name in the same style.
	Name string
	// Unit of the value, e.g. "tasks/s", "GB/s" (10^9 bytes per second),
	// "µs" or "µs/item".
	Unit string
	// Group is one of the Group constants.
	Group string
	// Desc says in one sentence what one operation of the metric does.
	Desc string
	// Baseline names the baseline metric that bounds this one ("" for none).
	Baseline string
	// LowerIsBetter marks latencies, times per item and memory sizes.
	LowerIsBetter bool
	// Also names further values each run reports after the first, sharing
	// its runs (task_latency_p99 next to task_latency_p50).
	Also []Also
	// NoJob: the metric needs no cluster (baselines, the idle node).
	NoJob bool
	// FreshJob: every run gets its own job (Init … Shutdown), because a run
	// fills the object store or the owner's memory, which only a job's end
	// frees. Setup runs once per job and does its own warm-up; otherwise
	// Setup runs once and a warm-up run precedes the timed runs.
	FreshJob bool
	// WarmJob (with FreshJob): one untimed job runs first, its run going on
	// for up to warmJobFactor times the run length, so the timed jobs find
	// the store warm: its pages resident and this process's mapping of them
	// already written, as for a driver that has been running (the first
	// writes to a page are page faults, far slower than the copy on some
	// machines; see objstore.Mapping).
	WarmJob bool
	// TwoNodes: the metric needs a second node (Env.SecondNode).
	TwoNodes bool
	// MaxRuns caps Options.Runs for metrics whose one run is long (0: no cap).
	MaxRuns int
	// RunFactor: one run lasts RunFactor times Options.Duration (0 means
	// 1), so the metric's time limit (metricTimeout) grows with it.
	RunFactor int
	// StoreBytes, when set, runs the metric's jobs against a single-node
	// cluster of its own whose object store has this capacity in bytes
	// (Env.StoreNode), started for the metric and stopped after it; with
	// Options.Address the metric is skipped.
	StoreBytes int64
	// Items is the number of items one run handles at scale 1
	// (scalability metrics), reported with the result.
	Items int
	// Setup prepares the metric inside its job and returns the measurement.
	Setup func(ctx context.Context, e *Env) (RunFunc, error)
}

// Also is a further value a metric's runs report.
type Also struct {
	Name, Unit string
	// LowerIsBetter marks a size or latency; NoBaseline a value the
	// metric's baseline does not bound (a peak store use next to a
	// throughput).
	LowerIsBetter, NoBaseline bool
}

// RunFunc measures once, for about d (at least one operation), and returns
// the metric's value followed by one value per Metric.Also.
type RunFunc func(ctx context.Context, d time.Duration) ([]float64, error)

var registry []*Metric

// register adds metrics to the suite; each group's file calls it from init.
func register(ms ...*Metric) { registry = append(registry, ms...) }

// Metrics returns every registered metric in suite order.
func Metrics() []*Metric {
	out := slices.Clone(registry)
	sort.SliceStable(out, func(i, j int) bool {
		return slices.Index(groupOrder, out[i].Group) < slices.Index(groupOrder, out[j].Group)
	})
	return out
}

// skipError makes a metric skipped at run time (e.g. a cluster with one node
// for a two-node metric).
type skipError struct{ reason string }

func (s *skipError) Error() string { return "skipped: " + s.reason }

func skip(format string, args ...any) error { return &skipError{reason: fmt.Sprintf(format, args...)} }

// partialError is a run that stopped early for a reason worth reporting as
// the metric's error (object_store_full) but measured something until then:
// its values are kept as the run's sample.
type partialError struct {
	values []float64
	err    error
}

func (p *partialError) Error() string { return p.err.Error() }
func (p *partialError) Unwrap() error { return p.err }

func isSkip(err error) (string, bool) {
	var s *skipError
	if errors.As(err, &s) {
		return s.reason, true
	}
	return "", false
}

// throughput turns op, one batch of work returning how many units it did,
// into a RunFunc reporting units per second: op repeats until d has passed.
func throughput(op func(ctx context.Context) (float64, error)) RunFunc {
	return throughputMax(op, 0)
}

// throughputMax is throughput with at most maxOps operations per run (0: no
// limit), for operations that fill the object store.
func throughputMax(op func(ctx context.Context) (float64, error), maxOps int) RunFunc {
	return func(ctx context.Context, d time.Duration) ([]float64, error) {
		units, elapsed, err := repeat(ctx, d, maxOps, op)
		if err != nil {
			return nil, err
		}
		return []float64{units / elapsed.Seconds()}, nil
	}
}

func repeat(ctx context.Context, d time.Duration, maxOps int, op func(ctx context.Context) (float64, error)) (float64, time.Duration, error) {
	var units float64
	start := time.Now()
	for n := 1; ; n++ {
		u, err := op(ctx)
		if err != nil {
			return 0, 0, err
		}
		units += u
		if time.Since(start) >= d || (maxOps > 0 && n >= maxOps) {
			break
		}
	}
	elapsed := time.Since(start)
	if units <= 0 || elapsed <= 0 {
		return 0, 0, fmt.Errorf("no work measured (%v units in %v)", units, elapsed)
	}
	return units, elapsed, nil
}

// percentile returns the p-th percentile (0..100) of sorted values, by the
// nearest-rank method.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
