package bench

import (
	"context"
	"slices"
	"time"
)

// minLatencySamples is the fewest sync tasks a latency run times, however
// short the run.
const minLatencySamples = 20

func init() {
	register(&Metric{Name: "task_latency_p50", Unit: "µs", Group: GroupLatency, LowerIsBetter: true, Baseline: BaselineUnixRTT,
		Also:  []Also{{Name: "task_latency_p99", Unit: "µs"}},
		Desc:  "time from Remote to the result of one no-op task, submitted one at a time: median and 99th percentile per run",
		Setup: setupLatency})
}

func setupLatency(ctx context.Context, e *Env) (RunFunc, error) {
	return func(ctx context.Context, d time.Duration) ([]float64, error) {
		var lat []float64
		start := time.Now()
		for len(lat) < minLatencySamples || time.Since(start) < d {
			t0 := time.Now()
			v, err := smallValue.Remote(ctx).Get(ctx)
			if err != nil {
				return nil, err
			}
			if err := checkOK(v); err != nil {
				return nil, err
			}
			lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e3)
		}
		slices.Sort(lat)
		return []float64{percentile(lat, 50), percentile(lat, 99)}, nil
	}, nil
}
