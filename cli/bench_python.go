package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/bench"
	pyembed "github.com/nodeup/nodeup/python"
)

// runPythonBench runs the Python SDK's benchmarks (python/nodeup/bench.py)
// with the package inside this binary on PYTHONPATH and this binary as
// the node it starts when no --address is given. --json prints the
// results in the Dask peer's JSON shape (bench/peers/compare.py reads it).
func runPythonBench(c *ucli.Context, opts bench.Options) error {
	dir, err := pyembed.Path()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	py := interpreter(c.String("python-interpreter"))
	args := []string{"-m", "nodeup.bench", "--reps", strconv.Itoa(opts.Runs),
		"--rep-time", strconv.FormatFloat(opts.Duration.Seconds(), 'f', -1, 64)}
	if opts.Address != "" {
		args = append(args, "--address", opts.Address)
	}
	if opts.Filter != nil {
		args = append(args, "--filter", opts.Filter.String())
	}
	var out string
	if c.Bool("json") {
		tmp, err := os.MkdirTemp("", "nodeup-bench-python-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		out = filepath.Join(tmp, "bench.json")
		args = append(args, "--out", out)
	}
	cmd := exec.CommandContext(c.Context, py, args...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir+string(os.PathListSeparator)+os.Getenv("PYTHONPATH"), "NODEUP_BIN="+self, "NODEUP_VERSION="+Version)
	cmd.Stderr = c.App.ErrWriter
	if out == "" {
		cmd.Stdout = c.App.Writer
	} else {
		cmd.Stdout = c.App.ErrWriter
	}
	runErr := cmd.Run()
	if out != "" {
		if data, err := os.ReadFile(out); err == nil {
			if _, err := c.App.Writer.Write(data); err != nil {
				return err
			}
		}
	}
	if runErr != nil {
		return fmt.Errorf("%s -m nodeup.bench: %w", py, runErr)
	}
	return nil
}
