package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as a text table: one row per metric with its
// median, unit, spread, and its baseline and the ratio to it.
func (r *Report) WriteTable(w io.Writer) error {
	m := r.Machine
	fmt.Fprintf(w, "# nodeup bench %s: nodeup %s, %s, %s, %d CPUs (%s), %.1f GiB RAM; %s; %d runs of %gs, scale %g; took %.0fs\n",
		r.Date, m.NodeupVersion, m.GoVersion, m.OS, m.CPUs, m.CPUModel, m.MemoryGiB, r.Cluster, r.Runs, r.DurationPerRun, r.Scale, r.Elapsed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METRIC\tVALUE\tUNIT\tMIN\tMAX\tBASELINE\tRATIO\t")
	group := ""
	for _, res := range r.Metrics {
		if res.Group != group {
			group = res.Group
			fmt.Fprintf(tw, "[%s]\t\t\t\t\t\t\t\n", group)
		}
		switch {
		case res.Skipped != "":
			fmt.Fprintf(tw, "%s\t-\t%s\t\t\t\t\tskipped: %s\n", res.Name, res.Unit, res.Skipped)
			continue
		case res.Error != "":
			fmt.Fprintf(tw, "%s\t-\t%s\t\t\t\t\tFAILED: %s\n", res.Name, res.Unit, res.Error)
			continue
		}
		ratio := ""
		if res.Ratio != nil {
			ratio = strconv.FormatFloat(*res.Ratio, 'g', 3, 64)
		}
		unit := res.Unit
		if res.Items > 0 {
			unit += fmt.Sprintf(" (%d items)", res.Items)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", res.Name, formatValue(res.Value), unit,
			formatValue(res.Min), formatValue(res.Max), res.Baseline, ratio)
	}
	return tw.Flush()
}

// formatValue prints 4 significant digits without exponent for usual sizes.
func formatValue(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1e4:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 4-len(strconv.FormatFloat(math.Floor(a), 'f', 0, 64)), 64)
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}
