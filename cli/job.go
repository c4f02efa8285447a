package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/internal/wdpack"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// exitCodeError ends the command with its exit code, as `ray job submit`
// exits with its job's; Run prints msg (if any) and nothing else.
type exitCodeError struct {
	code int
	msg  string
}

func (e *exitCodeError) Error() string { return e.msg }

// jobPollInterval is how often submit, logs -f and stop poll the job.
const jobPollInterval = 200 * time.Millisecond

func jobCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "job",
		Usage: "submit a job (an entrypoint and its working dir) to the cluster, and follow, list, stop and delete jobs",
		Subcommands: []*ucli.Command{
			{
				Name:      "submit",
				Usage:     "upload a working dir and run an entrypoint in it on a node, streaming its output (as ray job submit)",
				ArgsUsage: "-- <entrypoint> [args...]",
				Flags: append(clientFlags(),
					&ucli.StringFlag{Name: "working-dir", Usage: "directory to upload; the entrypoint runs in its copy on the node"},
					&ucli.StringSliceFlag{Name: "exclude", Usage: "leave out files and dirs matching this glob (by relative path or by name); repeatable"},
					&ucli.StringFlag{Name: "entrypoint-resources", Usage: "resources the entrypoint's node must have, as CPU=1,GPU=1,name=2"},
					&ucli.StringSliceFlag{Name: "env", Usage: "K=V set in the entrypoint's environment; repeatable"},
					&ucli.StringFlag{Name: "job-id", Usage: "the job's ID (default: made up)"},
					&ucli.BoolFlag{Name: "no-wait", Usage: "return once the job started instead of streaming its logs until it ends"},
				),
				Action: jobSubmit,
			},
			{
				Name: "status", Usage: "print one job's record", ArgsUsage: "<job-id>",
				Flags: append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}),
				Action: func(c *ucli.Context) error {
					id, err := oneJobID(c, "status")
					if err != nil {
						return err
					}
					var rec wire.JobRecord
					if err := call(c, wire.MethodJobGet, &wire.JobGetRequest{ID: id}, &rec); err != nil {
						return err
					}
					if c.Bool("json") {
						return writeJSONOut(c.App.Writer, &rec)
					}
					printJobs(c.App.Writer, []wire.JobRecord{rec})
					return nil
				},
			},
			{
				Name: "list", Usage: "list the cluster's jobs",
				Flags: append(append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}), rowFlags[wire.JobRecord]()...),
				Action: func(c *ucli.Context) error {
					var resp wire.JobListResponse
					if err := call(c, wire.MethodJobList, &wire.Empty{}, &resp); err != nil {
						return err
					}
					jobs, total, err := selectRows(c, resp.Jobs)
					if err != nil {
						return err
					}
					defer printLeftOut(c, "jobs", len(jobs), total)
					if c.Bool("json") {
						return writeJSONOut(c.App.Writer, nonNil(jobs))
					}
					printJobs(c.App.Writer, jobs)
					return nil
				},
			},
			{
				Name: "logs", Usage: "print a job's output (its entrypoint's stdout and stderr)", ArgsUsage: "<job-id>",
				Flags: append(clientFlags(), &ucli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing until the job ends"}),
				Action: func(c *ucli.Context) error {
					id, err := oneJobID(c, "logs")
					if err != nil {
						return err
					}
					_, err = streamJob(c, id, 0, c.Bool("follow"))
					return err
				},
			},
			{
				Name: "stop", Usage: "stop a job: SIGTERM to its process group, SIGKILL after the grace period", ArgsUsage: "<job-id>",
				Flags: append(clientFlags(),
					&ucli.DurationFlag{Name: "grace", Usage: "wait this long after SIGTERM before SIGKILL (default: the node's, 3s as Ray's)"},
					&ucli.BoolFlag{Name: "no-wait", Usage: "return once the job was signalled"}),
				Action: func(c *ucli.Context) error {
					id, err := oneJobID(c, "stop")
					if err != nil {
						return err
					}
					var rec wire.JobRecord
					if err := call(c, wire.MethodJobStop, &wire.JobStopRequest{ID: id, GraceNanos: int64(c.Duration("grace"))}, &rec); err != nil {
						return err
					}
					if !c.Bool("no-wait") {
						deadline := time.Now().Add(c.Duration("grace") + 30*time.Second)
						for !rec.Status.Final() && time.Now().Before(deadline) {
							time.Sleep(jobPollInterval)
							if err := call(c, wire.MethodJobGet, &wire.JobGetRequest{ID: id}, &rec); err != nil {
								return err
							}
						}
					}
					fmt.Fprintf(c.App.Writer, "job %s %s\n", rec.ID, rec.Status)
					return nil
				},
			},
			{
				Name: "delete", Usage: "delete a finished job: its record, its log and its working dir on its node (as ray job delete)", ArgsUsage: "<job-id>",
				Flags: clientFlags(),
				Action: func(c *ucli.Context) error {
					id, err := oneJobID(c, "delete")
					if err != nil {
						return err
					}
					var rec wire.JobRecord
					if err := call(c, wire.MethodJobDelete, &wire.JobDeleteRequest{ID: id}, &rec); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "job %s deleted (was %s)\n", rec.ID, rec.Status)
					return nil
				},
			},
		},
	}
}

func oneJobID(c *ucli.Context, verb string) (string, error) {
	if c.NArg() != 1 {
		return "", fmt.Errorf("nodeup job %s takes one job ID, got %d arguments", verb, c.NArg())
	}
	id := c.Args().First()
	return id, wire.CheckJobID(id)
}

func printJobs(w io.Writer, jobs []wire.JobRecord) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tNODE\tSTARTED\tENDED\tEXIT\tENTRYPOINT\tMESSAGE")
	ts := func(ns int64) string {
		if ns == 0 {
			return "-"
		}
		return time.Unix(0, ns).UTC().Format(time.RFC3339)
	}
	for _, j := range jobs {
		exit := "-"
		if j.Status.Final() {
			exit = fmt.Sprint(j.ExitCode)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Status, j.NodeName, ts(j.StartedAt), ts(j.EndedAt), exit,
			strings.Join(j.Entrypoint, " "), j.Message)
	}
	tw.Flush()
}

func jobSubmit(c *ucli.Context) error {
	argv := c.Args().Slice()
	if len(argv) == 0 {
		return fmt.Errorf("nodeup job submit: give the entrypoint after --, e.g. nodeup job submit --working-dir . -- ./driver")
	}
	req := &wire.JobSubmitRequest{ID: c.String("job-id"), Entrypoint: argv}
	if req.ID != "" {
		if err := wire.CheckJobID(req.ID); err != nil {
			return fmt.Errorf("--job-id: %w", err)
		}
	}
	if s := c.String("entrypoint-resources"); s != "" {
		rs, err := sched.ParseResources(s)
		if err != nil {
			return fmt.Errorf("--entrypoint-resources: %w", err)
		}
		req.Resources = rs.Floats()
	}
	for _, kv := range c.StringSlice("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		if err := wire.ValidateEnvVar(k, v); err != nil {
			return fmt.Errorf("--env: %w", err)
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	if dir := c.String("working-dir"); dir != "" {
		m, err := uploadWorkingDir(c, dir, c.StringSlice("exclude"))
		if err != nil {
			return err
		}
		req.Manifest = m
	}
	var rec wire.JobRecord
	if err := call(c, wire.MethodJobSubmit, req, &rec); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "nodeup: job %s %s on node %s\n", rec.ID, rec.Status, rec.NodeName)
	if rec.Status.Final() || c.Bool("no-wait") {
		if rec.Status == wire.JobFailed {
			return &exitCodeError{code: 1, msg: fmt.Sprintf("job %s FAILED: %s", rec.ID, rec.Message)}
		}
		if !c.Bool("no-wait") {
			fmt.Fprintln(c.App.Writer, rec.ID)
		}
		return nil
	}
	end, err := streamJob(c, rec.ID, 0, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "nodeup: job %s %s: %s\n", end.ID, end.Status, end.Message)
	if end.Status != wire.JobSucceeded {
		code := end.ExitCode
		if code <= 0 {
			code = 1
		}
		return &exitCodeError{code: code}
	}
	return nil
}

// streamJob copies job id's log to the app's writer from offset; with
// follow it polls until the job is final and its log drained, and returns
// the final record.
func streamJob(c *ucli.Context, id string, offset int64, follow bool) (*wire.JobRecord, error) {
	var rec wire.JobRecord
	for {
		// The record first: once it is final, the log read after it holds
		// everything the entrypoint wrote.
		if follow {
			if err := call(c, wire.MethodJobGet, &wire.JobGetRequest{ID: id}, &rec); err != nil {
				return nil, err
			}
		}
		for {
			var resp wire.JobLogsResponse
			if err := call(c, wire.MethodJobLogs, &wire.JobLogsRequest{ID: id, Offset: offset}, &resp); err != nil {
				return nil, err
			}
			if len(resp.Data) > 0 {
				if _, err := c.App.Writer.Write(resp.Data); err != nil {
					return nil, err
				}
			}
			offset = resp.Next
			if len(resp.Data) < wire.MaxJobLogRead {
				break
			}
		}
		if !follow || rec.Status.Final() {
			return &rec, nil
		}
		time.Sleep(jobPollInterval)
	}
}

// uploadWorkingDir packs dir (less what exclude matches), uploads the
// chunks the node lacks (wdpack.Upload), and returns the manifest.
func uploadWorkingDir(c *ucli.Context, dir string, exclude []string) (*wire.JobManifest, error) {
	rpcCall := func(_ context.Context, method string, req, resp any) error { return call(c, method, req, resp) }
	res, err := wdpack.Upload(c.Context, rpcCall, dir, exclude, false)
	if err != nil {
		return nil, fmt.Errorf("--working-dir: %w", err)
	}
	fmt.Fprintf(c.App.ErrWriter, "nodeup: working dir %s: %d bytes in %d chunks, %d uploaded\n", dir, res.Manifest.Size, len(res.Manifest.Chunks), res.Uploaded)
	return res.Manifest, nil
}
