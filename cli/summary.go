package cli

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/wire"
)

// actorStates are the actor states (wire.ActorState), in the order
// `nodeup summary actors` prints them.
var actorStates = []string{string(wire.ActorPending), string(wire.ActorAlive), string(wire.ActorRestarting), string(wire.ActorDead)}

// summaryCommand is Ray's `ray summary tasks|actors`: counts by name (or
// class) and state.
func summaryCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "summary",
		Usage:     "count tasks by name and state, or actors by class and state",
		ArgsUsage: "tasks | actors",
		Subcommands: []*ucli.Command{{
			Name:  "tasks",
			Usage: "count the tasks of every node by name and state",
			Flags: append(clientFlags(),
				&ucli.BoolFlag{Name: "json", Usage: "print JSON"},
				&ucli.StringSliceFlag{Name: "filter", Usage: "key=value; repeatable; keys: " + strings.Join(taskFilterKeys, ", ")},
			),
			Action: func(c *ucli.Context) error {
				if c.NArg() > 0 {
					return fmt.Errorf("nodeup summary tasks takes no arguments, got %q", c.Args().First())
				}
				req, err := taskListRequest(c.StringSlice("filter"))
				if err != nil {
					return err
				}
				req.Summary = true
				var list wire.TaskEventsList
				if err := call(c, wire.MethodTaskEventsList, req, &list); err != nil {
					return err
				}
				rows := map[string]map[string]int{}
				for _, s := range list.Summary {
					if rows[s.Name] == nil {
						rows[s.Name] = map[string]int{}
					}
					rows[s.Name][s.State] += s.Count
				}
				if err := printSummary(c, "NAME", wire.TaskStates, rows, list.Total); err != nil {
					return err
				}
				if !c.Bool("json") {
					printListFooter(c, "tasks", list.Total, list.Total, 0, list.Dropped, list.Unreachable)
				}
				return nil
			},
		}, {
			Name:  "actors",
			Usage: "count actors by class and state",
			Flags: append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}),
			Action: func(c *ucli.Context) error {
				if c.NArg() > 0 {
					return fmt.Errorf("nodeup summary actors takes no arguments, got %q", c.Args().First())
				}
				var list wire.ActorList
				if err := call(c, wire.MethodActorList, &wire.Empty{}, &list); err != nil {
					return err
				}
				rows := map[string]map[string]int{}
				for _, a := range list.Actors {
					if rows[a.Class] == nil {
						rows[a.Class] = map[string]int{}
					}
					rows[a.Class][a.State]++
				}
				return printSummary(c, "CLASS", actorStates, rows, len(list.Actors))
			},
		}},
		Action: func(c *ucli.Context) error {
			if c.NArg() == 0 {
				return fmt.Errorf("nodeup summary needs what to count: tasks or actors")
			}
			return fmt.Errorf("nodeup summary %q: unknown kind; use tasks or actors", c.Args().First())
		},
	}
}

// summaryJSON is one row of `nodeup summary tasks|actors --json`: a name
// (or class), its total and its count per state.
type summaryJSON struct {
	Name   string         `json:"name"`
	Total  int            `json:"total"`
	States map[string]int `json:"state_counts"`
}

// printSummary prints rows (name → state → count) as a table with a
// column per state (states first, in order, then any other state seen),
// or as JSON.
func printSummary(c *ucli.Context, first string, states []string, rows map[string]map[string]int, total int) error {
	names := make([]string, 0, len(rows))
	cols := slices.Clone(states)
	for name, byState := range rows {
		names = append(names, name)
		for s := range byState {
			if !slices.Contains(cols, s) {
				cols = append(cols, s)
			}
		}
	}
	slices.Sort(names)
	if c.Bool("json") {
		out := make([]summaryJSON, 0, len(names))
		for _, n := range names {
			r := summaryJSON{Name: n, States: rows[n]}
			for _, v := range rows[n] {
				r.Total += v
			}
			out = append(out, r)
		}
		slices.SortFunc(out, func(a, b summaryJSON) int { return cmp.Compare(a.Name, b.Name) })
		return writeJSONOut(c.App.Writer, out)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tTOTAL\t%s\n", first, strings.Join(cols, "\t"))
	for _, n := range names {
		sum := 0
		var cells []string
		for _, s := range cols {
			sum += rows[n][s]
			cells = append(cells, fmt.Sprint(rows[n][s]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", dash(n), sum, strings.Join(cells, "\t"))
	}
	fmt.Fprintf(tw, "total\t%d\n", total)
	return tw.Flush()
}
