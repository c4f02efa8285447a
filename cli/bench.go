package cli

import (
	"fmt"
	"os"
	"regexp"
	"runtime/pprof"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/bench"
)

func benchCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "bench",
		Usage:     "run Ray's microbenchmark suite with physical baselines (progress on stderr, results on stdout)",
		ArgsUsage: " ",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "address", EnvVars: []string{"NODEUP_ADDRESS"},
				Usage: "host:port of a node of the cluster to measure (default: an embedded single node in this process)"},
			&ucli.BoolFlag{Name: "json", Usage: "print the results as JSON"},
			&ucli.StringFlag{Name: "filter", Usage: "run only metrics whose name matches this regular expression (and the baselines they need)"},
			&ucli.DurationFlag{Name: "duration", Value: bench.DefaultDuration, Usage: "length of one timed run of a metric"},
			&ucli.IntFlag{Name: "runs", Value: bench.DefaultRuns, Usage: "timed runs per metric after a warm-up; the median is reported"},
			&ucli.Float64Flag{Name: "scale", Value: 1, Usage: "multiplies the sizes of the scalability metrics"},
			&ucli.BoolFlag{Name: "list", Usage: "list the metrics and exit"},
			&ucli.BoolFlag{Name: "python", Usage: "run the Python SDK's benchmarks (python3 -m nodeup.bench: tasks, actor calls, put, get) instead of the Go suite"},
			&ucli.StringFlag{Name: "python-interpreter", Usage: "interpreter for --python (default: /usr/bin/python3, else python3)"},
			&ucli.StringFlag{Name: "cpuprofile", Usage: "write a Go CPU profile of this process (the driver, and the embedded node) to this file; worker processes are not in it"},
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("nodeup bench takes no arguments (got %q)", c.Args().First())
			}
			opts := bench.Options{Address: c.String("address"), Duration: c.Duration("duration"), Runs: c.Int("runs"),
				Scale: c.Float64("scale"), Version: Version, Progress: c.App.ErrWriter}
			if f := c.String("filter"); f != "" {
				re, err := regexp.Compile(f)
				if err != nil {
					return fmt.Errorf("--filter %q: %w", f, err)
				}
				opts.Filter = re
			}
			if c.Bool("list") {
				for _, m := range bench.Select(opts.Filter) {
					fmt.Fprintf(c.App.Writer, "%-46s %-12s %s\n", m.Name, m.Group, m.Unit)
				}
				return nil
			}
			if opts.Duration <= 0 || opts.Runs <= 0 || opts.Scale <= 0 {
				return fmt.Errorf("--duration, --runs and --scale must be positive")
			}
			if c.Bool("python") {
				return runPythonBench(c, opts)
			}
			if path := c.String("cpuprofile"); path != "" {
				f, err := os.Create(path)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile %s: %w", path, err)
				}
				defer pprof.StopCPUProfile()
			}
			rep, err := bench.Run(c.Context, opts)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				err = rep.WriteJSON(c.App.Writer)
			} else {
				err = rep.WriteTable(c.App.Writer)
			}
			if err != nil {
				return err
			}
			if failed := rep.Failed(); len(failed) > 0 {
				return fmt.Errorf("%d metrics failed: %s", len(failed), strings.Join(failed, ", "))
			}
			return nil
		},
	}
}
