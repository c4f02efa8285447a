package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Options configure a bench run. Zero values take the defaults noted.
type Options struct {
	// Address is host:port of a node of the cluster to measure; "" starts an
	// embedded single node in this process (and a second one for two-node
	// metrics).
	Address string
	// Filter selects metrics by name (nil: all). Baselines that a selected
	// metric needs run too.
	Filter *regexp.Regexp
	// Duration is how long one timed run lasts, at least one operation
	// (default DefaultDuration).
	Duration time.Duration
	// Runs is how many timed runs each metric gets; the reported value is
	// their median (default DefaultRuns).
	Runs int
	// Scale multiplies the sizes of the scalability metrics (default 1;
	// tests use 0.01).
	Scale float64
	// NodeBinary is the nodeup binary the idle-RSS metric starts as a node
	// (default: this executable).
	NodeBinary string
	// Version is the nodeup version, reported with the machine facts.
	Version string
	// Progress receives one line per metric as it finishes (nil: none).
	Progress io.Writer
	// Logger receives the SDK's warnings (default slog.Default()).
	Logger *slog.Logger
}

// Defaults of Options: a whole run with them takes under 3 minutes on 2 cores.
const (
	DefaultDuration = 500 * time.Millisecond
	DefaultRuns     = 5
)

// Report is the outcome of a bench run.
type Report struct {
	// Date is when the run started (RFC 3339, UTC).
	Date string `json:"date"`
	// Machine describes where it ran.
	Machine Machine `json:"machine"`
	// Cluster says what was measured: "embedded single node" or the address.
	Cluster string `json:"cluster"`
	// DurationPerRun is Options.Duration in seconds.
	DurationPerRun float64 `json:"duration_per_run_s"`
	// Runs is Options.Runs: timed runs per metric.
	Runs int `json:"runs"`
	// Scale is Options.Scale: the factor on the scalability sizes.
	Scale float64 `json:"scale"`
	// Elapsed is the wall time of the whole run, in seconds.
	Elapsed float64 `json:"elapsed_s"`
	// Metrics holds one result per metric (and per Also value), suite order.
	Metrics []Result `json:"metrics"`
}

// Machine is the facts about the machine a report was measured on.
type Machine struct {
	CPUs          int     `json:"cpus"`      // logical CPUs
	CPUModel      string  `json:"cpu_model"` // from /proc/cpuinfo
	MemoryGiB     float64 `json:"memory_gib"`
	OS            string  `json:"os"` // GOOS/GOARCH and kernel release
	GoVersion     string  `json:"go_version"`
	NodeupVersion string  `json:"nodeup_version"`
}

// Result is one metric's outcome.
type Result struct {
	// Name and Group are the metric's (or its Also value's) name and group.
	Name  string `json:"name"`
	Group string `json:"group"`
	// Value is the median of the runs, in Unit (e.g. "tasks/s", "GB/s", "µs").
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// LowerIsBetter marks latencies, times per item and sizes.
	LowerIsBetter bool `json:"lower_is_better,omitempty"`
	// Baseline names the baseline metric bounding this one, BaselineValue is
	// its value in this run, and Ratio is the fraction of that bound reached:
	// the metric's rate over the baseline's rate (for a latency in µs, the
	// baseline's round-trip time over the latency).
	Baseline      string   `json:"baseline,omitempty"`
	BaselineValue float64  `json:"baseline_value,omitempty"`
	Ratio         *float64 `json:"ratio_to_baseline,omitempty"`
	// Runs is the number of timed runs; Min, Median and Max summarise them.
	Runs   int     `json:"runs"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	// Samples are the runs' values, in order.
	Samples []float64 `json:"samples,omitempty"`
	// Items is the number of items per run (scalability metrics).
	Items int `json:"items,omitempty"`
	// Skipped is why the metric did not run; Error why it failed.
	Skipped string `json:"skipped,omitempty"`
	Error   string `json:"error,omitempty"`
	// Seconds is the wall time spent on the metric, setup included.
	Seconds float64 `json:"seconds"`
	// Desc says what one operation of the metric does.
	Desc string `json:"description"`
}

// Failed returns the names of the metrics that failed.
func (r *Report) Failed() []string {
	var out []string
	for _, m := range r.Metrics {
		if m.Error != "" {
			out = append(out, m.Name)
		}
	}
	return out
}

// Select returns the metrics Options.Filter selects, plus the baselines
// they need, in suite order.
func Select(filter *regexp.Regexp) []*Metric {
	all := Metrics()
	if filter == nil {
		return all
	}
	want := map[string]bool{}
	for _, m := range all {
		names := []string{m.Name}
		for _, a := range m.Also {
			names = append(names, a.Name)
		}
		if slices.ContainsFunc(names, filter.MatchString) {
			want[m.Name] = true
			if m.Baseline != "" {
				want[m.Baseline] = true
			}
		}
	}
	var out []*Metric
	for _, m := range all {
		if want[m.Name] {
			out = append(out, m)
		}
	}
	return out
}

// Run runs the selected metrics and returns their results. A metric that
// fails is reported with its error and the run goes on; the error returned
// is about the run as a whole (the embedded node did not start).
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Duration <= 0 {
		opts.Duration = DefaultDuration
	}
	if opts.Runs <= 0 {
		opts.Runs = DefaultRuns
	}
	if opts.Scale <= 0 {
		opts.Scale = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.NodeBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		opts.NodeBinary = exe
	}
	start := time.Now()
	rep := &Report{Date: start.UTC().Format(time.RFC3339), Machine: machine(opts.Version), Cluster: "embedded single node",
		DurationPerRun: opts.Duration.Seconds(), Runs: opts.Runs, Scale: opts.Scale}
	if opts.Address != "" {
		rep.Cluster = opts.Address
	}
	metrics := Select(opts.Filter)
	e, err := newEnv(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer e.close()
	values := map[string]float64{}
	for i, m := range metrics {
		results := runMetric(ctx, e, m)
		for j := range results {
			r := &results[j]
			if r.Skipped == "" && r.Runs > 0 { // a run stopped early (partialError) has its values too
				values[r.Name] = r.Value
				if b, ok := values[r.Baseline]; ok && r.Baseline != "" && b > 0 && r.Value > 0 {
					ratio := r.Value / b
					if r.LowerIsBetter { // a latency in µs against a rate per second
						ratio = 1e6 / b / r.Value
					}
					r.BaselineValue, r.Ratio = b, &ratio
				}
			}
			rep.Metrics = append(rep.Metrics, *r)
			if opts.Progress != nil {
				fmt.Fprintf(opts.Progress, "[%2d/%d] %s\n", i+1, len(metrics), progressLine(r))
			}
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	rep.Elapsed = time.Since(start).Seconds()
	return rep, nil
}

// warmJobFactor is how many run lengths a WarmJob's untimed run may take:
// enough for a run bounded by its operation count to do all of them.
const warmJobFactor = 10

// metricTimeout bounds one metric beyond the time its runs are meant to
// take, so a hang fails that metric only.
const metricTimeout = 5 * time.Minute

// timeLimit is how long m may take: metricTimeout plus its runs (and a
// warm-up or a warm job) at their length, so `--duration 30s` for
// object_churn's 10-minute run is not cut off at 5 minutes.
func timeLimit(m *Metric, runs int, d time.Duration) time.Duration {
	factor := time.Duration(max(m.RunFactor, 1))
	if m.WarmJob {
		factor += warmJobFactor
	}
	return metricTimeout + time.Duration(runs+1)*factor*d
}

func runMetric(ctx context.Context, e *Env, m *Metric) []Result {
	base := Result{Name: m.Name, Group: m.Group, Unit: m.Unit, LowerIsBetter: m.LowerIsBetter, Baseline: m.Baseline,
		Desc: m.Desc}
	if m.Items > 0 {
		base.Items = e.Scale(m.Items)
	}
	results := []Result{base}
	for _, a := range m.Also {
		r := base
		r.Name, r.Unit = a.Name, a.Unit
		r.LowerIsBetter = r.LowerIsBetter || a.LowerIsBetter
		if a.NoBaseline {
			r.Baseline = ""
		}
		results = append(results, r)
	}
	start := time.Now()
	runs := e.opts.Runs
	if m.MaxRuns > 0 {
		runs = min(runs, m.MaxRuns)
	}
	ctx, cancel := context.WithTimeout(ctx, timeLimit(m, runs, e.opts.Duration))
	defer cancel()
	defer e.runCleanups()
	var samples [][]float64
	add := func(v []float64) error {
		if len(v) != len(results) {
			return fmt.Errorf("a run returned %d values, want %d", len(v), len(results))
		}
		samples = append(samples, v)
		return nil
	}
	measure := func(ctx context.Context) error {
		run, err := m.Setup(ctx, e)
		if err != nil {
			return err
		}
		timed := runs
		if m.FreshJob {
			timed = 1
		} else if _, err := run(ctx, e.opts.Duration); err != nil { // warm-up
			return err
		}
		for range timed {
			v, err := run(ctx, e.opts.Duration)
			if p, ok := err.(*partialError); ok {
				if aerr := add(p.values); aerr != nil {
					return aerr
				}
				return err
			}
			if err != nil {
				return err
			}
			if err := add(v); err != nil {
				return err
			}
		}
		return nil
	}
	addr := e.addr
	var err error
	if m.StoreBytes > 0 {
		addr, err = e.StoreNode(ctx, m.StoreBytes)
	}
	switch {
	case err != nil:
	case m.NoJob:
		err = measure(ctx)
	case m.FreshJob:
		if m.WarmJob {
			err = e.job(ctx, addr, func(ctx context.Context) error {
				run, err := m.Setup(ctx, e)
				if err == nil {
					_, err = run(ctx, warmJobFactor*e.opts.Duration)
				}
				return err
			})
			if err != nil {
				break
			}
		}
		for range runs {
			if err = e.job(ctx, addr, measure); err != nil {
				break
			}
		}
	default:
		err = e.job(ctx, addr, measure)
	}
	for i := range results {
		r := &results[i]
		r.Seconds = time.Since(start).Seconds()
		if reason, ok := isSkip(err); ok {
			r.Skipped = reason
			continue
		}
		if err != nil {
			r.Error = oneLine(err.Error())
			if _, partial := err.(*partialError); !partial || len(samples) == 0 {
				continue
			}
		}
		for _, s := range samples {
			r.Samples = append(r.Samples, s[i])
		}
		r.Runs = len(r.Samples)
		r.Min, r.Max = slices.Min(r.Samples), slices.Max(r.Samples)
		r.Median = median(r.Samples)
		r.Value = r.Median
	}
	return results
}

func progressLine(r *Result) string {
	switch {
	case r.Skipped != "":
		return fmt.Sprintf("%s: skipped (%s)", r.Name, r.Skipped)
	case r.Error != "":
		return fmt.Sprintf("%s: FAILED: %s", r.Name, r.Error)
	}
	s := fmt.Sprintf("%s: %s %s (%d runs, %.1fs)", r.Name, formatValue(r.Value), r.Unit, r.Runs, r.Seconds)
	if r.Ratio != nil {
		s += fmt.Sprintf(", %.3g of %s", *r.Ratio, r.Baseline)
	}
	return s
}

func machine(version string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), NodeupVersion: version,
		OS: runtime.GOOS + "/" + runtime.GOARCH}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemoryGiB = float64(si.Totalram) * float64(si.Unit) / (1 << 30)
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		m.OS += " " + unix.ByteSliceToString(uts.Release[:])
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
