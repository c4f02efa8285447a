package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/wire"
)

// gpuFlags are start's and join's GPU flags (docs/gpus.md, docs/cli.md).
func gpuFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "num-gpus", Usage: "declare N GPUs instead of detecting them (0: none; default: detect with NVML, then nvidia-smi)"},
		&ucli.StringFlag{Name: "gpu-model", Usage: "model of the declared GPUs, full (\"NVIDIA H100 80GB HBM3\") or short (H100); gives accelerator_type:<model>"},
		&ucli.StringFlag{Name: "gpu-memory", Usage: "memory of each declared GPU, e.g. 80GiB (gives the gpu_memory resource)"},
		&ucli.StringFlag{Name: "gpu-interval", Usage: "how often GPU telemetry is sampled (default 5s)"},
	}
}

// gpuConfig reads the GPU flags; errors name the flag, the bad value and
// what is accepted. (nodeConfig refuses GPU and gpu_memory in --resources.)
func gpuConfig(c *ucli.Context) (cluster.GPUConfig, error) {
	var g cluster.GPUConfig
	if s := strings.TrimSpace(c.String("num-gpus")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return g, fmt.Errorf("--num-gpus %q: must be a whole number, 0 or more (GPUs are devices; fractions are requested by tasks)", c.String("num-gpus"))
		}
		g.Declare, g.Count = true, n
	}
	g.Model = strings.TrimSpace(c.String("gpu-model"))
	if s := c.String("gpu-memory"); s != "" {
		b, err := parseBytes(s)
		if err != nil {
			return g, fmt.Errorf("--gpu-memory: %w", err)
		}
		g.MemoryBytes = uint64(b)
	}
	if (g.Model != "" || g.MemoryBytes != 0) && !g.Declare {
		return g, fmt.Errorf("--gpu-model %q / --gpu-memory %q need --num-gpus N: detected GPUs report their own model and memory", g.Model, c.String("gpu-memory"))
	}
	if s := c.String("gpu-interval"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 100*time.Millisecond {
			return g, fmt.Errorf("--gpu-interval %q: must be a duration of at least 100ms, e.g. 5s", s)
		}
		g.Interval = d
	}
	return g, nil
}

// printGPUs is `nodeup status --gpus`: one row per device of every node
// that reported GPUs, with health, reservations and the latest telemetry.
func printGPUs(w io.Writer, st *wire.StatusResponse) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tGPU\tMODEL\tSOURCE\tHEALTH\tRESERVED\tLEASES\tUTIL\tMEMORY USED/TOTAL\tTEMP\tPOWER\tFOREIGN PROCS\tAGE")
	rows := 0
	for _, nv := range st.Nodes {
		if nv.GPUs == nil {
			continue
		}
		for _, d := range nv.GPUs.Devices {
			rows++
			health := "ok"
			if !d.Healthy {
				health = "UNHEALTHY: " + d.Reason
			}
			util, mem, temp, power, foreign, age := "-", "-", "-", "-", "-", "-"
			if d.Device.MemoryBytes > 0 {
				mem = "-/" + formatBytes(float64(d.Device.MemoryBytes))
			}
			if s := d.Sample; s != nil {
				if s.UtilizationPercent >= 0 {
					util = strconv.Itoa(s.UtilizationPercent) + "%"
				}
				used := "-"
				if s.MemoryUsedBytes >= 0 {
					used = formatBytes(float64(s.MemoryUsedBytes))
				}
				mem = used + "/" + formatBytes(float64(s.MemoryTotalBytes))
				if s.TemperatureC >= 0 {
					temp = strconv.Itoa(s.TemperatureC) + "C"
				}
				if s.PowerWatts >= 0 {
					power = strconv.FormatFloat(s.PowerWatts, 'f', 0, 64) + "W"
				}
				var pids []string
				for _, p := range s.Processes {
					if p.Foreign {
						pids = append(pids, strconv.Itoa(p.PID))
					}
				}
				foreign = strconv.Itoa(len(pids))
				if len(pids) > 0 {
					foreign += " (" + strings.Join(pids, ",") + ")"
				}
				if !s.At.IsZero() {
					age = time.Since(s.At).Round(time.Second).String()
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", nv.Name, d.Index, dash(d.Model), nv.GPUs.Source,
				health, d.GPU.String(), d.Leases, util, mem, temp, power, foreign, age)
		}
	}
	tw.Flush()
	if rows == 0 {
		fmt.Fprintln(w, "(no node reported GPUs)")
	}
}
