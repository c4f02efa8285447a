package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/nodeup/nodeup/wire"
)

// The jobs HTTP API (docs/jobs.md#http-api), as Ray's job REST API
// (/api/jobs/): the same handlers as the Job.* RPCs behind the roles
// wire.HTTPRoles gives each pattern. A job submitted over HTTP has no
// working dir (the chunks are uploaded over RPC: nodeup job submit
// --working-dir); its entrypoint, env and entrypoint resources are as the
// CLI's.

// handleJobsHTTP registers the jobs endpoints on mux.
func (n *Node) handleJobsHTTP(mux *http.ServeMux) {
	n.handleHTTP(mux, "POST /v1/jobs", http.HandlerFunc(n.httpJobSubmit))
	n.handleHTTP(mux, "GET /v1/jobs", http.HandlerFunc(n.httpJobList))
	n.handleHTTP(mux, "GET /v1/jobs/{id}", http.HandlerFunc(n.httpJobGet))
	n.handleHTTP(mux, "GET /v1/jobs/{id}/logs", http.HandlerFunc(n.httpJobLogs))
	n.handleHTTP(mux, "POST /v1/jobs/{id}/stop", http.HandlerFunc(n.httpJobStop))
	n.handleHTTP(mux, "DELETE /v1/jobs/{id}", http.HandlerFunc(n.httpJobDelete))
}

// jobSubmitJSON is POST /v1/jobs's body, named as Ray's JobSubmitRequest.
// Entrypoint is a string (run by /bin/sh -c, as Ray's shell entrypoint)
// or an array (the argv, no shell).
type jobSubmitJSON struct {
	SubmissionID        string             `json:"submission_id"`
	Entrypoint          json.RawMessage    `json:"entrypoint"`
	EntrypointResources map[string]float64 `json:"entrypoint_resources"`
	EntrypointNumCPUs   float64            `json:"entrypoint_num_cpus"`
	EntrypointNumGPUs   float64            `json:"entrypoint_num_gpus"`
	RuntimeEnv          *struct {
		EnvVars map[string]string `json:"env_vars"`
	} `json:"runtime_env"`
}

// jobJSON is a job's record as the HTTP API answers it, named as Ray's
// JobDetails; times are unix milliseconds, 0 when not yet, and
// driver_exit_code is null until the job is final.
type jobJSON struct {
	SubmissionID        string             `json:"submission_id"`
	Status              wire.JobStatus     `json:"status"`
	Message             string             `json:"message"`
	Entrypoint          []string           `json:"entrypoint"`
	EntrypointResources map[string]float64 `json:"entrypoint_resources"`
	EnvVars             map[string]string  `json:"env_vars"`
	WorkingDir          string             `json:"working_dir"`
	Submitter           string             `json:"submitter"`
	NodeID              string             `json:"driver_node_id"`
	NodeName            string             `json:"driver_node_name"`
	SubmittedAt         int64              `json:"submitted_at"`
	StartTime           int64              `json:"start_time"`
	EndTime             int64              `json:"end_time"`
	DriverExitCode      *int               `json:"driver_exit_code"`
	PID                 int                `json:"pid"`
}

func toJobJSON(r *wire.JobRecord) *jobJSON {
	ms := func(ns int64) int64 { return ns / int64(time.Millisecond) }
	j := &jobJSON{SubmissionID: r.ID, Status: r.Status, Message: r.Message, Entrypoint: r.Entrypoint,
		EntrypointResources: r.Resources, EnvVars: r.Env, WorkingDir: r.WorkingDir, Submitter: r.Submitter,
		NodeID: r.NodeID, NodeName: r.NodeName, SubmittedAt: ms(r.SubmittedAt), StartTime: ms(r.StartedAt),
		EndTime: ms(r.EndedAt), PID: r.PID}
	if r.Status.Final() {
		code := r.ExitCode
		j.DriverExitCode = &code
	}
	return j
}

// parseJobSubmit decodes and checks POST /v1/jobs's body into a
// JobSubmitRequest; unknown fields are refused, so a misspelt one is not
// silently dropped.
func parseJobSubmit(body io.Reader) (*wire.JobSubmitRequest, error) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var in jobSubmitJSON
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("body: %w (want JSON {\"entrypoint\": \"cmd args\" or [\"cmd\", \"args\"], \"submission_id\", \"entrypoint_resources\", \"entrypoint_num_cpus\", \"entrypoint_num_gpus\", \"runtime_env\": {\"env_vars\"}})", err)
	}
	if dec.More() {
		return nil, errors.New("body: more than one JSON value")
	}
	req := &wire.JobSubmitRequest{ID: in.SubmissionID, Resources: in.EntrypointResources}
	raw := bytes.TrimSpace(in.Entrypoint)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return nil, errors.New(`"entrypoint" is missing: want a command string or an argv array`)
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf(`"entrypoint": %w`, err)
		}
		if s == "" {
			return nil, errors.New(`"entrypoint" is empty: want a command`)
		}
		req.Entrypoint = []string{"/bin/sh", "-c", s}
	case raw[0] == '[':
		if err := json.Unmarshal(raw, &req.Entrypoint); err != nil {
			return nil, fmt.Errorf(`"entrypoint" %s: want a command string or an array of strings: %w`, truncate(string(raw), 64), err)
		}
		if len(req.Entrypoint) == 0 {
			return nil, errors.New(`"entrypoint" is an empty array: want the command and its arguments`)
		}
	default:
		return nil, fmt.Errorf(`"entrypoint" %s: want a command string or an array of strings`, truncate(string(raw), 64))
	}
	for _, f := range []struct {
		field, res string
		v          float64
	}{{"entrypoint_num_cpus", "CPU", in.EntrypointNumCPUs}, {"entrypoint_num_gpus", "GPU", in.EntrypointNumGPUs}} {
		if f.v == 0 {
			continue
		}
		if _, dup := req.Resources[f.res]; dup {
			return nil, fmt.Errorf("%s and entrypoint_resources both give %s: give one", f.field, f.res)
		}
		if req.Resources == nil {
			req.Resources = map[string]float64{}
		}
		req.Resources[f.res] = f.v
	}
	if in.RuntimeEnv != nil {
		req.Env = in.RuntimeEnv.EnvVars
	}
	return req, nil
}

// httpJobError answers err from a job handler: its wire code as an HTTP
// status (500 for an error without one), the message in {"error": ...}.
func httpJobError(w http.ResponseWriter, err error) {
	writeJSON(w, httpStatusOf(err, http.StatusInternalServerError), map[string]string{"error": err.Error()})
}

func (n *Node) httpJobSubmit(w http.ResponseWriter, r *http.Request) {
	req, err := parseJobSubmit(r.Body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "POST /v1/jobs: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	rec, err := n.jobSubmit(ctx, req)
	if err != nil {
		httpJobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"submission_id": rec.ID, "job": toJobJSON(rec)})
}

func (n *Node) httpJobList(w http.ResponseWriter, r *http.Request) {
	resp, err := n.jobList(r.Context(), &wire.Empty{})
	if err != nil {
		httpJobError(w, err)
		return
	}
	out := make([]*jobJSON, 0, len(resp.Jobs))
	for i := range resp.Jobs {
		out = append(out, toJobJSON(&resp.Jobs[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

func (n *Node) httpJobGet(w http.ResponseWriter, r *http.Request) {
	rec, err := n.jobByID(r.PathValue("id"))
	if err != nil {
		httpJobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toJobJSON(rec))
}

// httpJobLogs answers {"logs", "next_offset", "size"}: up to limit bytes
// (default and at most wire.MaxJobLogRead) of the job's log from offset
// (default 0); bytes that are not UTF-8 come as U+FFFD.
func (n *Node) httpJobLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &wire.JobLogsRequest{ID: r.PathValue("id")}
	if s := q.Get("offset"); s != "" {
		off, err := strconv.ParseInt(s, 10, 64)
		if err != nil || off < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("offset %q: want a byte offset, 0 or more", s)})
			return
		}
		req.Offset = off
	}
	if s := q.Get("limit"); s != "" {
		max, err := strconv.Atoi(s)
		if err != nil || max <= 0 || max > wire.MaxJobLogRead {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("limit %q: want 1 to %d bytes", s, wire.MaxJobLogRead)})
			return
		}
		req.Max = max
	}
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	resp, err := n.jobLogs(ctx, req)
	if err != nil {
		httpJobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": string(resp.Data), "next_offset": resp.Next, "size": resp.Size})
}

// httpJobStop stops a job (grace: a Go duration, default the node's) and
// answers at once {"stopped": false when it had already ended (as Ray's),
// "job"}; the record turns STOPPED once the process group is gone.
func (n *Node) httpJobStop(w http.ResponseWriter, r *http.Request) {
	req := &wire.JobStopRequest{ID: r.PathValue("id")}
	before, err := n.jobByID(req.ID)
	if err != nil {
		httpJobError(w, err)
		return
	}
	if s := r.URL.Query().Get("grace"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("grace %q: want a duration such as 3s, 0 or more", s)})
			return
		}
		req.GraceNanos = int64(d)
	}
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	rec, err := n.jobStop(ctx, req)
	if err != nil {
		httpJobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"stopped": !before.Status.Final(), "job": toJobJSON(rec)})
}

func (n *Node) httpJobDelete(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	rec, err := n.jobDelete(ctx, &wire.JobDeleteRequest{ID: r.PathValue("id")})
	if err != nil {
		httpJobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": true, "job": toJobJSON(rec)})
}
