package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/wire"
)

// defaultTaskLimit is how many tasks `nodeup list tasks` prints unless
// --limit says otherwise (Ray's state API default, 100).
const defaultTaskLimit = 100

// taskFilterKeys are the keys --filter takes, as Ray's `ray list tasks
// --filter` names them.
var taskFilterKeys = []string{"job_id", "state", "name", "node_id", "node_name", "actor_id"}

// taskListRequest builds a TaskEvents.List request from --filter
// key=value flags (each key once).
func taskListRequest(filters []string) (*wire.TaskEventsListRequest, error) {
	req := &wire.TaskEventsListRequest{}
	seen := map[string]bool{}
	for _, f := range filters {
		k, v, ok := strings.Cut(f, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return nil, fmt.Errorf("--filter %q: want key=value, key one of %s", f, strings.Join(taskFilterKeys, ", "))
		}
		if seen[k] {
			return nil, fmt.Errorf("--filter %s given twice: each key at most once", k)
		}
		seen[k] = true
		switch k {
		case "job_id":
			req.JobID = v
		case "state":
			req.State = strings.ToUpper(v)
		case "name":
			req.Name = v
		case "node_id", "node_name":
			if req.Node != "" {
				return nil, fmt.Errorf("--filter: node_id and node_name together: give one")
			}
			req.Node = v
		case "actor_id":
			req.ActorID = v
		default:
			return nil, fmt.Errorf("--filter %q: unknown key %q; use %s", f, k, strings.Join(taskFilterKeys, ", "))
		}
	}
	return req, wire.CheckTaskEventsListRequest(req)
}

// listTasksCommand is Ray's `ray list tasks`.
func listTasksCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "tasks",
		Usage: "list tasks (Go SDK tasks and actor calls) of every node: ID, attempt, name, state, job, node, PID, error",
		Flags: append(clientFlags(),
			&ucli.BoolFlag{Name: "json", Usage: "print JSON"},
			&ucli.StringSliceFlag{Name: "filter", Usage: "key=value; repeatable; keys: " + strings.Join(taskFilterKeys, ", ")},
			&ucli.IntFlag{Name: "limit", Value: defaultTaskLimit, Usage: fmt.Sprintf("most tasks to print (1 to %d); the output says how many were left out", wire.MaxTaskEventList)},
		),
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("nodeup list tasks takes no arguments, got %q (filter with --filter key=value)", c.Args().First())
			}
			req, err := taskListRequest(c.StringSlice("filter"))
			if err != nil {
				return err
			}
			if req.Limit = c.Int("limit"); req.Limit < 1 || req.Limit > wire.MaxTaskEventList {
				return fmt.Errorf("--limit %d: use 1 to %d", req.Limit, wire.MaxTaskEventList)
			}
			var list wire.TaskEventsList
			if err := call(c, wire.MethodTaskEventsList, req, &list); err != nil {
				return err
			}
			if c.Bool("json") {
				out := tasksJSON{Tasks: make([]taskJSON, 0, len(list.Tasks)), Total: list.Total, LeftOut: list.LeftOut, Dropped: list.Dropped, Unreachable: list.Unreachable}
				for _, ev := range list.Tasks {
					out.Tasks = append(out.Tasks, toTaskJSON(ev))
				}
				return writeJSONOut(c.App.Writer, out)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK ID\tATTEMPT\tNAME\tSTATE\tJOB\tNODE\tPID\tACTOR\tDURATION\tERROR")
			for _, ev := range list.Tasks {
				pid := "-"
				if ev.PID > 0 {
					pid = strconv.Itoa(ev.PID)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ev.TaskID, ev.Attempt, ev.Name, ev.State, ev.JobID,
					dash(ev.NodeName), pid, dash(ev.ActorID), taskDuration(ev), dash(oneLine(ev.Error)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			printListFooter(c, "tasks", len(list.Tasks), list.Total, list.LeftOut, list.Dropped, list.Unreachable)
			return nil
		},
	}
}

// printListFooter says how many of how many were printed and what the
// limit left out (never a silent cut), and on stderr what the record lost
// and which nodes did not answer.
func printListFooter(c *ucli.Context, what string, shown, total, leftOut int, dropped int64, unreachable []string) {
	if leftOut > 0 {
		fmt.Fprintf(c.App.Writer, "%d of %d %s shown; %d left out by --limit (raise it, or narrow with --filter)\n", shown, total, what, leftOut)
	}
	if dropped > 0 {
		fmt.Fprintf(c.App.ErrWriter, "note: %d task records were lost (the nodes' records are bounded, reporters drop events when their buffer is full); the listing may be incomplete\n", dropped)
	}
	for _, u := range unreachable {
		fmt.Fprintf(c.App.ErrWriter, "warning: node did not answer, its tasks are missing: %s\n", u)
	}
}

// taskDuration is how long a task ran (to now while running), "-" if it
// has not started.
func taskDuration(ev wire.TaskEvent) string {
	if ev.Times.Running == 0 {
		return "-"
	}
	end := ev.Times.Finished
	if ev.Times.Failed != 0 && (end == 0 || ev.Times.Failed < end) {
		end = ev.Times.Failed
	}
	if end == 0 {
		end = time.Now().UnixNano()
	}
	return time.Duration(end - ev.Times.Running).Round(time.Millisecond).String()
}

// tasksJSON is `nodeup list tasks --json`: the tasks, how many matched,
// how many the limit left out, how many records the cluster lost, and the
// nodes that did not answer.
type tasksJSON struct {
	Tasks       []taskJSON `json:"tasks"`
	Total       int        `json:"total"`
	LeftOut     int        `json:"left_out"`
	Dropped     int64      `json:"dropped"`
	Unreachable []string   `json:"unreachable,omitempty"`
}

// taskJSON is one task, named as Ray's state API (ray list tasks --format
// json --detail); times are unix nanoseconds by state.
type taskJSON struct {
	TaskID     string           `json:"task_id"`
	Attempt    int              `json:"attempt_number"`
	Name       string           `json:"name"`
	State      string           `json:"state"`
	JobID      string           `json:"job_id"`
	Type       string           `json:"type"`
	Function   string           `json:"func_or_class_name"`
	ActorID    string           `json:"actor_id,omitempty"`
	NodeID     string           `json:"node_id,omitempty"`
	NodeName   string           `json:"node_name,omitempty"`
	WorkerID   string           `json:"worker_id,omitempty"`
	PID        int              `json:"worker_pid,omitempty"`
	Owner      string           `json:"owner_address,omitempty"`
	Error      string           `json:"error_message,omitempty"`
	StateTimes map[string]int64 `json:"state_times_ns"`
}

func toTaskJSON(ev wire.TaskEvent) taskJSON {
	typ := ev.Type
	if typ == "" {
		typ = wire.TaskTypeNormal
	}
	times := map[string]int64{}
	for _, s := range wire.TaskStates {
		if v := *ev.Times.At(s); v != 0 {
			times[s] = v
		}
	}
	return taskJSON{TaskID: ev.TaskID, Attempt: ev.Attempt, Name: ev.Name, State: ev.State, JobID: ev.JobID, Type: typ, Function: ev.Function,
		ActorID: ev.ActorID, NodeID: ev.NodeID, NodeName: ev.NodeName, WorkerID: ev.WorkerID, PID: ev.PID, Owner: ev.Owner, Error: ev.Error, StateTimes: times}
}

// listWorkersCommand is Ray's `ray list workers`: every node's worker
// processes.
func listWorkersCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "workers",
		Usage: "list the worker processes of every node: worker ID, job, node, PID, address, actor",
		Flags: append(append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}), rowFlags[workerJSON]()...),
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("nodeup list workers takes no arguments, got %q", c.Args().First())
			}
			var list wire.WorkerList
			if err := call(c, wire.MethodWorkerList, &wire.WorkerListRequest{}, &list); err != nil {
				return err
			}
			rows := make([]workerJSON, 0, len(list.Workers))
			for _, w := range list.Workers {
				rows = append(rows, workerJSON{WorkerID: w.WorkerID, JobID: w.JobID, NodeID: w.NodeID, NodeName: w.NodeName, PID: w.PID, Addr: w.Addr, ActorID: w.ActorID})
			}
			rows, total, err := selectRows(c, rows)
			if err != nil {
				return err
			}
			defer printLeftOut(c, "workers", len(rows), total)
			if c.Bool("json") {
				return writeJSONOut(c.App.Writer, workersJSON{Workers: nonNil(rows), LeftOut: list.LeftOut + total - len(rows), Unreachable: list.Unreachable})
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKER ID\tJOB\tNODE\tPID\tADDRESS\tACTOR")
			for _, w := range rows {
				pid := "-"
				if w.PID > 0 {
					pid = strconv.Itoa(w.PID)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.WorkerID, w.JobID, w.NodeName, pid, dash(w.Addr), dash(w.ActorID))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if list.LeftOut > 0 {
				fmt.Fprintf(c.App.Writer, "%d workers shown; %d left out (at most %d per node)\n", len(list.Workers), list.LeftOut, wire.MaxWorkerList)
			}
			for _, u := range list.Unreachable {
				fmt.Fprintf(c.App.ErrWriter, "warning: node did not answer, its workers are missing: %s\n", u)
			}
			return nil
		},
	}
}

// workersJSON is `nodeup list workers --json`.
type workersJSON struct {
	Workers     []workerJSON `json:"workers"`
	LeftOut     int          `json:"left_out"`
	Unreachable []string     `json:"unreachable,omitempty"`
}

// workerJSON is one worker process, named as Ray's `ray list workers`.
type workerJSON struct {
	WorkerID string `json:"worker_id"`
	JobID    string `json:"job_id"`
	NodeID   string `json:"node_id"`
	NodeName string `json:"node_name"`
	PID      int    `json:"pid"`
	Addr     string `json:"address"`
	ActorID  string `json:"actor_id,omitempty"`
}
