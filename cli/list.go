package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/wire"
)

// listCommand is Ray's state API (`ray list actors`) for what the leader
// remembers.
func listCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "list",
		Usage:     "list cluster state: actors, placement-groups, tasks, workers, nodes, jobs, objects",
		ArgsUsage: "actors | placement-groups | tasks | workers | nodes | jobs | objects",
		Subcommands: []*ucli.Command{{
			Name:  "actors",
			Usage: "list actors: ID, class, name, namespace, state, node, restarts, PID",
			Flags: append(append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}), rowFlags[actorJSON]()...),
			Action: func(c *ucli.Context) error {
				if c.NArg() > 0 {
					return fmt.Errorf("nodeup list actors takes no arguments, got %q", c.Args().First())
				}
				var list wire.ActorList
				if err := call(c, wire.MethodActorList, &wire.Empty{}, &list); err != nil {
					return err
				}
				rows := make([]actorJSON, 0, len(list.Actors))
				for _, a := range list.Actors {
					rows = append(rows, actorJSON{ActorID: a.ActorID, ClassName: a.Class, Name: a.Name, Namespace: a.Namespace, JobID: a.JobID,
						State: a.State, NodeID: a.NodeID, NodeName: a.NodeName, NumRestarts: a.Incarnation, PID: a.PID,
						DeathCause: a.DeathCause, PendingReason: a.PendingReason, Infeasible: a.Infeasible != nil, Detached: a.Detached, Resources: a.Resources.Floats()})
				}
				rows, total, err := selectRows(c, rows)
				if err != nil {
					return err
				}
				defer printLeftOut(c, "actors", len(rows), total)
				if c.Bool("json") {
					return writeJSONOut(c.App.Writer, nonNil(rows))
				}
				tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ACTOR ID\tCLASS\tNAME\tNAMESPACE\tSTATE\tNODE\tRESTARTS\tPID\tDETAIL")
				for _, r := range rows {
					pid := "-"
					if r.PID > 0 {
						pid = strconv.Itoa(r.PID)
					}
					detail := r.DeathCause
					if r.State != "DEAD" {
						detail = pendingDetail(r.PendingReason, r.Infeasible)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ActorID, r.ClassName, dash(r.Name), r.Namespace, r.State,
						dash(r.NodeName), r.NumRestarts, pid, dash(detail))
				}
				return tw.Flush()
			},
		}, listPlacementGroupsCommand(), listTasksCommand(), listWorkersCommand(),
			listAlias(nodesCommand(), "nodes", "", "nodeup nodes"),
			listAlias(jobCommand(), "jobs", "list", "nodeup job list"),
			listAlias(memoryCommand(), "objects", "", "nodeup memory")},
		Action: func(c *ucli.Context) error {
			if c.NArg() == 0 {
				return fmt.Errorf("nodeup list needs what to list: %s", listKinds)
			}
			return fmt.Errorf("nodeup list %q: unknown kind; use %s", c.Args().First(), listKinds)
		},
	}
}

// actorJSON is one row of `nodeup list actors --json`, named as Ray's state
// API (ray list actors --format json).
type actorJSON struct {
	ActorID       string             `json:"actor_id"`
	ClassName     string             `json:"class_name"`
	Name          string             `json:"name"`
	Namespace     string             `json:"ray_namespace"`
	JobID         string             `json:"job_id"`
	State         string             `json:"state"`
	NodeID        string             `json:"node_id"`
	NodeName      string             `json:"node_name"`
	NumRestarts   int                `json:"num_restarts"`
	PID           int                `json:"pid"`
	Detached      bool               `json:"is_detached"`
	DeathCause    string             `json:"death_cause,omitempty"`
	PendingReason string             `json:"pending_reason,omitempty"`
	Infeasible    bool               `json:"infeasible,omitempty"`
	Resources     map[string]float64 `json:"required_resources"`
}

// listPlacementGroupsCommand is Ray's `ray list placement-groups`.
func listPlacementGroupsCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "placement-groups",
		Usage: "list placement groups: ID, name, strategy, state, bundles with their nodes",
		Flags: append(append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}), rowFlags[pgJSON]()...),
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("nodeup list placement-groups takes no arguments, got %q", c.Args().First())
			}
			var list wire.PGList
			if err := call(c, wire.MethodPGList, &wire.Empty{}, &list); err != nil {
				return err
			}
			rows := make([]pgJSON, 0, len(list.Groups))
			for _, g := range list.Groups {
				r := pgJSON{ID: g.ID, Name: g.Name, Namespace: g.Namespace, JobID: g.JobID, State: g.State, Strategy: g.Strategy,
					Detached: g.Detached, PendingReason: g.PendingReason, Infeasible: g.Infeasible != nil, Bundles: []bundleJSON{}}
				for _, b := range g.Bundles {
					r.Bundles = append(r.Bundles, bundleJSON{Index: b.Index, Resources: b.Resources.Floats(), NodeID: b.NodeID, NodeName: b.NodeName,
						text: b.Resources.String()})
				}
				rows = append(rows, r)
			}
			rows, total, err := selectRows(c, rows)
			if err != nil {
				return err
			}
			defer printLeftOut(c, "placement groups", len(rows), total)
			if c.Bool("json") {
				return writeJSONOut(c.App.Writer, nonNil(rows))
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PLACEMENT GROUP ID\tNAME\tSTRATEGY\tSTATE\tBUNDLES\tDETAIL")
			for _, g := range rows {
				var bs []string
				for _, b := range g.Bundles {
					bs = append(bs, fmt.Sprintf("%d:{%s}@%s", b.Index, b.text, dash(b.NodeName)))
				}
				detail := pendingDetail(g.PendingReason, g.Infeasible)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", g.ID, dash(g.Name), g.Strategy, g.State, strings.Join(bs, " "), dash(detail))
			}
			return tw.Flush()
		},
	}
}

// pgJSON is one row of `nodeup list placement-groups --json`, named as Ray's
// state API (ray list placement-groups --format json --detail).
type pgJSON struct {
	ID            string       `json:"placement_group_id"`
	Name          string       `json:"name"`
	Namespace     string       `json:"ray_namespace"`
	JobID         string       `json:"creator_job_id"`
	State         string       `json:"state"`
	Strategy      string       `json:"strategy"`
	Detached      bool         `json:"is_detached"`
	PendingReason string       `json:"pending_reason,omitempty"`
	Infeasible    bool         `json:"infeasible,omitempty"`
	Bundles       []bundleJSON `json:"bundles"`
}

// bundleJSON is one bundle: its index, resources and node.
type bundleJSON struct {
	Index     int                `json:"bundle_index"`
	Resources map[string]float64 `json:"unit_resources"`
	NodeID    string             `json:"node_id"`
	NodeName  string             `json:"node_name"`
	text      string             // the resources as the text table shows them
}

// pendingDetail is the DETAIL column of a waiting actor or group: its
// reason, marked when no node can ever hold it.
func pendingDetail(reason string, infeasible bool) string {
	if infeasible {
		return "infeasible: " + reason
	}
	return reason
}

// nonNil is rows, or an empty slice for none (JSON [] rather than null).
func nonNil[T any](rows []T) []T {
	if rows == nil {
		return []T{}
	}
	return rows
}

// listKinds are what `nodeup list` lists.
const listKinds = "actors, placement-groups, tasks, workers, nodes, jobs or objects"

// listAlias is `nodeup list <name>` as another verb: cmd itself, or its
// subcommand sub, renamed, its usage saying which verb it is.
func listAlias(cmd *ucli.Command, name, sub, verb string) *ucli.Command {
	if sub != "" {
		for _, s := range cmd.Subcommands {
			if s.Name == sub {
				cmd = s
				break
			}
		}
	}
	cmd.Name = name
	cmd.Usage = cmd.Usage + " (as " + verb + ")"
	return cmd
}
