package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/internal/logfollow"
	"github.com/nodeup/nodeup/wire"
)

// logsPollInterval is how often `nodeup logs -f` asks for new output.
const logsPollInterval = 500 * time.Millisecond

func logsCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "logs",
		Usage: "list or print the output of worker and actor processes on every node (as Ray's `ray logs`)",
		Description: "Without --job or --actor, lists the log files of every node (or --node's): node, file, job, actor, pid, size, last write.\n" +
			"With --job or --actor, prints their lines, each prefixed (<actor class or task> pid=<pid> node=<node>);\n" +
			"-f keeps following new output until interrupted.",
		Flags: append(clientFlags(),
			&ucli.StringFlag{Name: "node", Usage: "only this node's files (name, node ID or RPC address)"},
			&ucli.StringFlag{Name: "job", Usage: "the files of this job's task workers and actors"},
			&ucli.StringFlag{Name: "actor", Usage: "the files of this actor (its ID)"},
			&ucli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new lines until interrupted"},
			&ucli.IntFlag{Name: "tail", Value: 1000, Usage: "start each file at its last N lines (0: from its start)"},
			&ucli.BoolFlag{Name: "list", Usage: "list the matching files instead of printing them"},
		),
		Action: logsAction,
	}
}

func logsAction(c *ucli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("nodeup logs takes no arguments, got %q (use --job, --actor, --node)", c.Args().First())
	}
	job, actor := c.String("job"), c.String("actor")
	for _, f := range []struct{ flag, v string }{{"job", job}, {"actor", actor}} {
		if f.v != "" {
			if err := wire.CheckID("--"+f.flag, f.v); err != nil {
				return err
			}
		}
	}
	tail := c.Int("tail")
	if tail < 0 {
		return fmt.Errorf("--tail %d: want 0 (from the start) or more lines", tail)
	}
	fl := &logfollow.Follower{
		Call: func(ctx context.Context, method string, req, resp any) error { return call(c, method, req, resp) },
		List: wire.LogsListRequest{Job: job, Actor: actor, Cluster: true},
		Node: c.String("node"),
		Tail: tail,
		Line: func(f wire.LogFile, line []byte) {
			fmt.Fprintf(c.App.Writer, "%s%s\n", logfollow.Prefix(f), line)
		},
	}
	if c.Bool("list") || job == "" && actor == "" {
		return listLogs(c, fl)
	}
	for {
		if err := fl.Poll(c.Context); err != nil {
			return err
		}
		if !c.Bool("follow") {
			return nil
		}
		select {
		case <-c.Context.Done():
			return nil
		case <-time.After(logsPollInterval):
		}
	}
}

// listLogs prints the files as a table, and the nodes that did not answer.
func listLogs(c *ucli.Context, fl *logfollow.Follower) error {
	var l wire.LogsList
	if err := call(c, wire.MethodLogsList, &fl.List, &l); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tFILE\tJOB\tACTOR\tPID\tSIZE\tMODIFIED\tRUNNING")
	n := 0
	for _, f := range l.Files {
		if fl.Node != "" && fl.Node != f.NodeName && fl.Node != f.NodeID && fl.Node != f.Addr {
			continue
		}
		n++
		actor := f.Actor
		if f.Class != "" {
			actor += " (" + f.Class + ")"
		}
		running := ""
		if f.Live {
			running = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", f.NodeName, f.Name, dash(f.Job), dash(actor), f.PID, f.Size,
			time.Unix(0, f.ModTime).UTC().Format(time.RFC3339), running)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.LeftOut > 0 {
		fmt.Fprintf(c.App.Writer, "(%d more files left out: filter with --node, --job or --actor)\n", l.LeftOut)
	}
	if len(l.Errors) > 0 {
		var names []string
		for _, e := range l.Errors {
			names = append(names, fmt.Sprintf("%s (%s): %s", e.NodeName, e.Addr, e.Error))
		}
		return fmt.Errorf("%d node(s) did not answer; their files are missing: %s", len(l.Errors), strings.Join(names, "; "))
	}
	if n == 0 {
		fmt.Fprintln(c.App.ErrWriter, "nodeup: no worker or actor log files match")
	}
	return nil
}
