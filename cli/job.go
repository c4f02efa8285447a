package cli

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

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
				Flags: append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}),
				Action: func(c *ucli.Context) error {
					var resp wire.JobListResponse
					if err := call(c, wire.MethodJobList, &wire.Empty{}, &resp); err != nil {
						return err
					}
					if c.Bool("json") {
						return writeJSONOut(c.App.Writer, resp.Jobs)
					}
					printJobs(c.App.Writer, resp.Jobs)
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

// uploadWorkingDir packs dir as a tar (less what exclude matches), cuts it
// into chunks of wire.MaxJobChunkBytes named by sha256, uploads those the
// node lacks, and returns the manifest.
func uploadWorkingDir(c *ucli.Context, dir string, exclude []string) (*wire.JobManifest, error) {
	for _, p := range exclude {
		if _, err := filepath.Match(p, ""); err != nil {
			return nil, fmt.Errorf("--exclude %q: %w", p, err)
		}
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("--working-dir: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("--working-dir %s: not a directory", dir)
	}
	tmp, err := os.CreateTemp("", "nodeup-wd-*.tar")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := packDir(tmp, dir, exclude); err != nil {
		return nil, fmt.Errorf("--working-dir %s: %w", dir, err)
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	m := &wire.JobManifest{Size: size}
	buf := make([]byte, wire.MaxJobChunkBytes)
	for off := int64(0); off < size; off += wire.MaxJobChunkBytes {
		k, err := tmp.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if err != nil && err != io.EOF {
			return nil, err
		}
		sum := sha256.Sum256(buf[:k])
		m.Chunks = append(m.Chunks, hex.EncodeToString(sum[:]))
	}
	var miss wire.JobMissingResponse
	if err := call(c, wire.MethodJobMissing, &wire.JobMissingRequest{Chunks: m.Chunks}, &miss); err != nil {
		return nil, err
	}
	if size > miss.MaxBytes {
		return nil, fmt.Errorf("--working-dir %s packs to %d bytes; the node takes at most %d (its --max-working-dir): leave large files out with --exclude", dir, size, miss.MaxBytes)
	}
	need := map[string]bool{}
	for _, h := range miss.Missing {
		need[h] = true
	}
	for i, h := range m.Chunks {
		if !need[h] {
			continue
		}
		off := int64(i) * wire.MaxJobChunkBytes
		k, err := tmp.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if err != nil && err != io.EOF {
			return nil, err
		}
		if err := call(c, wire.MethodJobUpload, &wire.JobUploadRequest{Hash: h, Data: buf[:k]}, &wire.Empty{}); err != nil {
			return nil, err
		}
		delete(need, h)
	}
	fmt.Fprintf(c.App.ErrWriter, "nodeup: working dir %s: %d bytes in %d chunks, %d uploaded\n", dir, size, len(m.Chunks), len(miss.Missing))
	return m, nil
}

// excluded reports whether rel (slash-separated) matches a pattern, by its
// whole relative path or by its name.
func excluded(rel string, patterns []string) bool {
	for _, p := range patterns {
		p = strings.TrimSuffix(p, "/")
		if ok, _ := filepath.Match(p, rel); ok {
			return true
		}
		if ok, _ := filepath.Match(p, filepath.Base(rel)); ok {
			return true
		}
	}
	return false
}

// packDir writes dir's tree as a tar to w: dirs, regular files and
// symlinks, names relative and slash-separated, in a stable order.
func packDir(w io.Writer, dir string, exclude []string) error {
	tw := tar.NewWriter(w)
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if excluded(rel, exclude) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		paths = append(paths, rel)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	for _, rel := range paths {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			continue // sockets, devices, pipes: not part of a working dir
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, fi.Size())
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
	}
	return tw.Close()
}
