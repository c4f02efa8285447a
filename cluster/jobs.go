package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// Job submission (issue 17, docs/jobs.md), as Ray Jobs: `nodeup job
// submit` uploads a working dir to the node it reaches (the entry node),
// which picks a node with the entrypoint resources, records the job
// PENDING in Raft, and asks that node (Job.Run) to run the entrypoint
// under its supervisor (jobsupervisor.go). The record is in Raft, so it
// survives a leader's loss; the supervisor, in the node daemon, outlives
// the client. The leader marks FAILED the jobs of a node that died.

// jobReapInterval is how often the leader looks for jobs on dead nodes.
const jobReapInterval = time.Second

func (n *Node) jobEndpoints() {
	rpc.Handle(n.rpcServer, wire.MethodJobMissing, n.jobMissing)
	rpc.Handle(n.rpcServer, wire.MethodJobUpload, n.jobUpload)
	rpc.Handle(n.rpcServer, wire.MethodJobSubmit, n.jobSubmit)
	rpc.Handle(n.rpcServer, wire.MethodJobGet, n.jobGet)
	rpc.Handle(n.rpcServer, wire.MethodJobList, n.jobList)
	rpc.Handle(n.rpcServer, wire.MethodJobLogs, n.jobLogs)
	rpc.Handle(n.rpcServer, wire.MethodJobStop, n.jobStop)
	rpc.Handle(n.rpcServer, wire.MethodJobRun, n.jobRun)
	rpc.Handle(n.rpcServer, wire.MethodJobChunk, n.jobChunk)
	rpc.Handle(n.rpcServer, wire.MethodJobDelete, n.jobDelete)
	handleLeader(n, wire.MethodJobWrite, func(ctx context.Context, req *wire.JobWriteRequest) (*wire.Empty, error) {
		if err := n.applyJobWrite(req); err != nil {
			return nil, jobErr(err)
		}
		return &wire.Empty{}, nil
	})
}

// applyJobWrite applies req here, the leader.
func (n *Node) applyJobWrite(req *wire.JobWriteRequest) error {
	var err error
	if req.Delete {
		_, err = n.apply(store.JobDeleteType, &store.JobDeleteRequest{ID: req.Job.ID})
	} else {
		_, err = n.apply(store.JobWriteType, &store.JobWriteRequest{Job: req.Job, Create: req.Create})
	}
	return err
}

// jobErr gives the store's job errors their wire codes.
func jobErr(err error) error {
	var re *rpc.Error
	switch {
	case errors.Is(err, store.ErrJobExists):
		return &rpc.Error{Code: wire.CodeAlreadyExists, Message: err.Error(), Err: err}
	case errors.Is(err, store.ErrJobNotFound):
		return &rpc.Error{Code: wire.CodeNotFound, Message: err.Error(), Err: err}
	case errors.Is(err, store.ErrJobNotFinal):
		return &rpc.Error{Code: wire.CodeBadInput, Message: err.Error() + " (stop it first: nodeup job stop)", Err: err}
	case errors.As(err, &re):
		return err
	}
	return err
}

// writeJob records rec through the leader (see store.JobWriteRequest).
func (n *Node) writeJob(ctx context.Context, rec *wire.JobRecord, create bool) error {
	return n.jobWrite(ctx, &wire.JobWriteRequest{Job: *rec, Create: create})
}

// jobWrite applies req at the leader: here when this node leads, else
// forwarded to it.
func (n *Node) jobWrite(ctx context.Context, req *wire.JobWriteRequest) error {
	if n.IsLeader() {
		err := n.applyJobWrite(req)
		if err == nil {
			return nil
		}
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != wire.CodeNotLeader {
			return jobErr(err)
		}
	}
	return n.forward(ctx, wire.MethodJobWrite, req, &wire.Empty{})
}

func (n *Node) jobMissing(ctx context.Context, req *wire.JobMissingRequest) (*wire.JobMissingResponse, error) {
	if len(req.Chunks) > wire.MaxJobChunks {
		return nil, badInput("Job.Missing: %d chunks, at most %d", len(req.Chunks), wire.MaxJobChunks)
	}
	resp := &wire.JobMissingResponse{MaxBytes: n.cfg.MaxWorkingDirBytes, Missing: []string{}}
	for _, h := range req.Chunks {
		if err := wire.CheckChunkHash(h); err != nil {
			return nil, badInput("Job.Missing: %v", err)
		}
		if !n.jobs.chunks.has(h) {
			resp.Missing = append(resp.Missing, h)
		}
	}
	return resp, nil
}

func (n *Node) jobUpload(ctx context.Context, req *wire.JobUploadRequest) (*wire.Empty, error) {
	if err := n.jobs.chunks.put(req.Hash, req.Data); err != nil {
		return nil, badInput("Job.Upload: %v", err)
	}
	return &wire.Empty{}, nil
}

func (n *Node) jobChunk(ctx context.Context, req *wire.JobChunkRequest) (*wire.JobChunkResponse, error) {
	b, err := n.jobs.chunks.get(req.Hash)
	if err != nil {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("Job.Chunk: %v", err)}
	}
	return &wire.JobChunkResponse{Data: b}, nil
}

// jobResources turns the wire's floats into a resource set.
func jobResources(m map[string]float64) (sched.ResourceSet, error) {
	rs := sched.ResourceSet{}
	for k, v := range m {
		if k == "" || len(k) > 256 {
			return nil, fmt.Errorf("resource name %q: want 1 to 256 bytes", k)
		}
		q, err := sched.QuantityFromFloat(v)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("resource %s=%v: want a non-negative number (%v)", k, v, err)
		}
		rs[k] = q
	}
	return rs, nil
}

// pickJobNode returns where a job's entrypoint runs
// (sched.EntrypointNode over the node table: a live node whose totals
// cover want, this node when it does, else the first by name), infeasible
// when none.
func (n *Node) pickJobNode(want sched.ResourceSet) (*store.Node, error) {
	nodes, err := n.fsm.State().Nodes()
	if err != nil {
		return nil, err
	}
	view := make([]sched.Node, len(nodes))
	for i, nd := range nodes {
		view[i] = sched.Node{ID: nd.ID, Name: nd.Name, Total: nd.Resources, Labels: nd.Labels, Alive: nd.Status.Live()}
	}
	id, err := sched.EntrypointNode(view, want, n.ID())
	if err != nil {
		return nil, &rpc.Error{Code: wire.CodeInfeasible, Message: strings.TrimPrefix(err.Error(), "infeasible: "), Err: err}
	}
	for _, nd := range nodes {
		if nd.ID == id {
			return nd, nil
		}
	}
	return nil, fmt.Errorf("placement chose node %s, not in the table", id)
}

func checkSubmit(req *wire.JobSubmitRequest) error {
	if req.ID != "" {
		if err := wire.CheckJobID(req.ID); err != nil {
			return err
		}
	}
	if len(req.Entrypoint) == 0 || req.Entrypoint[0] == "" {
		return fmt.Errorf("empty entrypoint: give the command after --")
	}
	if len(req.Entrypoint) > wire.MaxJobEntrypointArgs {
		return fmt.Errorf("entrypoint of %d arguments: at most %d", len(req.Entrypoint), wire.MaxJobEntrypointArgs)
	}
	for _, a := range req.Entrypoint {
		if len(a) > wire.MaxJobArgBytes || strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("entrypoint argument of %d bytes: at most %d, no NUL", len(a), wire.MaxJobArgBytes)
		}
	}
	if len(req.Env) > wire.MaxJobEnvVars {
		return fmt.Errorf("%d env vars: at most %d", len(req.Env), wire.MaxJobEnvVars)
	}
	return wire.ValidateEnvVars(req.Env)
}

func (n *Node) jobSubmit(ctx context.Context, req *wire.JobSubmitRequest) (*wire.JobRecord, error) {
	if err := checkSubmit(req); err != nil {
		return nil, badInput("job submit: %v", err)
	}
	want, err := jobResources(req.Resources)
	if err != nil {
		return nil, badInput("job submit: --entrypoint-resources: %v", err)
	}
	rec := &wire.JobRecord{ID: req.ID, Status: wire.JobPending, Entrypoint: req.Entrypoint, Resources: req.Resources,
		Env: req.Env, Submitter: "via " + n.Name(), SubmittedAt: time.Now().UnixNano()}
	if rec.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		rec.ID = "job_" + hex.EncodeToString(b[:])
	}
	if m := req.Manifest; m != nil {
		if err := checkManifest(m, n.cfg.MaxWorkingDirBytes); err != nil {
			return nil, badInput("job %s: %v", rec.ID, err)
		}
		missing := 0
		for _, c := range m.Chunks {
			if !n.jobs.chunks.has(c) {
				missing++
			}
		}
		if missing > 0 {
			return nil, badInput("job %s: %d of the working dir's %d chunks were not uploaded to this node", rec.ID, missing, len(m.Chunks))
		}
		rec.WorkingDir = manifestHash(m)
		if err := n.jobs.keepManifest(m); err != nil {
			return nil, fmt.Errorf("job %s: %w", rec.ID, err)
		}
	}
	target, err := n.pickJobNode(want)
	if err != nil {
		return nil, err
	}
	rec.NodeID, rec.NodeName = target.ID, target.Name
	if err := n.writeJob(ctx, rec, true); err != nil {
		return nil, err
	}
	n.logger.Info("job submitted", "job", rec.ID, "node", target.Name, "entrypoint", rec.Entrypoint)
	run := &wire.JobRunRequest{Job: *rec, Manifest: req.Manifest, Source: n.rpcAddr}
	var out *wire.JobRecord
	if target.ID == n.ID() {
		out, err = n.jobRun(ctx, run)
	} else {
		out = new(wire.JobRecord)
		err = n.pool.Call(ctx, target.Address, wire.MethodJobRun, run, out)
	}
	if err != nil {
		// The job's node could not start it: the record says why.
		failed := rec.Copy()
		failed.Status, failed.ExitCode, failed.EndedAt = wire.JobFailed, -1, time.Now().UnixNano()
		failed.Message = truncate(fmt.Sprintf("could not start on node %s: %v", target.Name, err), wire.MaxJobMessageBytes)
		if werr := n.writeJob(context.WithoutCancel(ctx), failed, false); werr != nil {
			n.logger.Warn("record a job that failed to start", "job", rec.ID, "err", werr)
		}
		n.waitJobSeen(ctx, failed.ID)
		return failed, nil
	}
	n.waitJobSeen(ctx, out.ID)
	return out, nil
}

// waitJobSeen waits (up to a few seconds) until this node's copy of the
// state holds job id past PENDING, so the caller's next Job.Get or
// Job.Logs here finds it: a follower trails the leader's commit.
func (n *Node) waitJobSeen(ctx context.Context, id string) {
	n.waitJobState(ctx, id, func(rec *wire.JobRecord) bool { return rec != nil && rec.Status != wire.JobPending })
}

// waitJobState waits (up to a few seconds) until done holds for job id's
// record (nil: none) in this node's copy of the state.
func (n *Node) waitJobState(ctx context.Context, id string, done func(*wire.JobRecord) bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		if rec, err := n.fsm.State().JobByID(id); err != nil || done(rec) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func (n *Node) jobByID(id string) (*wire.JobRecord, error) {
	if err := wire.CheckJobID(id); err != nil {
		return nil, badInput("%v", err)
	}
	rec, err := n.fsm.State().JobByID(id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("job %s: no such job (nodeup job list shows them)", id)}
	}
	return rec, nil
}

func (n *Node) jobGet(ctx context.Context, req *wire.JobGetRequest) (*wire.JobRecord, error) {
	return n.jobByID(req.ID)
}

func (n *Node) jobList(ctx context.Context, _ *wire.Empty) (*wire.JobListResponse, error) {
	recs, err := n.fsm.State().Jobs()
	if err != nil {
		return nil, err
	}
	resp := &wire.JobListResponse{Jobs: make([]wire.JobRecord, 0, len(recs))}
	for _, r := range recs {
		resp.Jobs = append(resp.Jobs, *r)
	}
	return resp, nil
}

// jobNodeAddr is the RPC address of the node that runs rec, "" for this one.
func (n *Node) jobNodeAddr(rec *wire.JobRecord) (string, error) {
	if rec.NodeID == n.ID() {
		return "", nil
	}
	nd, err := n.fsm.State().NodeByID(rec.NodeID)
	if err != nil {
		return "", err
	}
	if nd == nil {
		return "", &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("job %s: its node %s is no longer in the cluster", rec.ID, rec.NodeName)}
	}
	return nd.Address, nil
}

// onJobNode calls method with fwd (the request, Local set) on the node
// that runs rec, into resp, and reports true when that node is another:
// the answer is then resp or the error. local is the request's own Local:
// a hop that reached a node that does not run the job is refused, not
// passed on again.
func (n *Node) onJobNode(ctx context.Context, rec *wire.JobRecord, local bool, method string, fwd, resp any) (bool, error) {
	addr, err := n.jobNodeAddr(rec)
	if err != nil {
		return true, err
	}
	if addr == "" {
		return false, nil
	}
	if local {
		return true, badInput("job %s runs on node %s, not this one", rec.ID, rec.NodeName)
	}
	if err := n.pool.Call(ctx, addr, method, fwd, resp); err != nil {
		return true, fmt.Errorf("job %s: %s on node %s: %w", rec.ID, method, rec.NodeName, err)
	}
	return true, nil
}

func (n *Node) jobLogs(ctx context.Context, req *wire.JobLogsRequest) (*wire.JobLogsResponse, error) {
	rec, err := n.jobByID(req.ID)
	if err != nil {
		return nil, err
	}
	fwd, resp := *req, new(wire.JobLogsResponse)
	fwd.Local = true
	if there, err := n.onJobNode(ctx, rec, req.Local, wire.MethodJobLogs, &fwd, resp); there || err != nil {
		return resp, err
	}
	return n.jobs.readLog(rec.ID, req.Offset, req.Max)
}

func (n *Node) jobStop(ctx context.Context, req *wire.JobStopRequest) (*wire.JobRecord, error) {
	rec, err := n.jobByID(req.ID)
	if err != nil {
		return nil, err
	}
	if rec.Status.Final() {
		return rec, nil
	}
	if req.GraceNanos < 0 {
		return nil, badInput("job stop: grace period %s: must not be negative", time.Duration(req.GraceNanos))
	}
	fwd, resp := *req, new(wire.JobRecord)
	fwd.Local = true
	if there, err := n.onJobNode(ctx, rec, req.Local, wire.MethodJobStop, &fwd, resp); there || err != nil {
		return resp, err
	}
	grace := time.Duration(req.GraceNanos)
	if grace == 0 {
		grace = n.cfg.JobStopGrace
	}
	if n.jobs.stop(rec.ID, grace) {
		n.logger.Info("stopping job", "job", rec.ID, "grace", grace)
		return rec, nil
	}
	// Not running here (PENDING, or its process already gone): record it.
	stopped := rec.Copy()
	stopped.Status, stopped.Message, stopped.EndedAt, stopped.ExitCode = wire.JobStopped, "stopped before it ran", time.Now().UnixNano(), -1
	if err := n.writeJob(ctx, stopped, false); err != nil {
		return nil, err
	}
	return stopped, nil
}

// jobDelete deletes a finished job, as Ray's delete_job: its log and
// unpacked working dir on its node (skipped when that node is gone or
// dead: its files went or go with it), then its record through Raft. A
// PENDING or RUNNING job is refused, naming its status.
func (n *Node) jobDelete(ctx context.Context, req *wire.JobDeleteRequest) (*wire.JobRecord, error) {
	if req.Local {
		return n.jobDeleteFiles(ctx, req.ID)
	}
	rec, err := n.jobByID(req.ID)
	if err != nil {
		return nil, err
	}
	if !rec.Status.Final() {
		return nil, badInputWrap(store.ErrJobNotFinal, "job %s is %s: only a finished job (SUCCEEDED, FAILED, STOPPED) can be deleted; stop it first (nodeup job stop %s)", rec.ID, rec.Status, rec.ID)
	}
	nd, err := n.fsm.State().NodeByID(rec.NodeID)
	if err != nil {
		return nil, err
	}
	if nd != nil && nd.Status.Live() {
		fwd := &wire.JobDeleteRequest{ID: rec.ID, Local: true}
		if _, err := n.onJobNode(ctx, rec, false, wire.MethodJobDelete, fwd, new(wire.JobRecord)); err != nil {
			return nil, err
		}
		if nd.ID == n.ID() {
			if _, err := n.jobDeleteFiles(ctx, rec.ID); err != nil {
				return nil, err
			}
		}
	} else {
		n.logger.Info("job delete: its node is gone, its files with it", "job", rec.ID, "node", rec.NodeName)
	}
	if err := n.jobWrite(ctx, &wire.JobWriteRequest{Job: wire.JobRecord{ID: rec.ID}, Delete: true}); err != nil {
		return nil, err
	}
	n.waitJobState(ctx, rec.ID, func(r *wire.JobRecord) bool { return r == nil })
	n.logger.Info("job deleted", "job", rec.ID)
	return rec, nil
}

// jobDeleteFiles removes finished job id's log and unpacked working dir
// here, the job's node. This node's copy of the record may trail the
// entry node's, and the supervisor lets go of a job just after recording
// its end, so it waits a moment for both; a job that still runs here is
// refused.
func (n *Node) jobDeleteFiles(ctx context.Context, id string) (*wire.JobRecord, error) {
	n.waitJobState(ctx, id, func(r *wire.JobRecord) bool { return r == nil || r.Status.Final() && n.jobs.running(id) == nil })
	rec, err := n.jobByID(id)
	if err != nil {
		return nil, err
	}
	if rec.NodeID != n.ID() {
		return nil, badInput("job %s runs on node %s, not this one", rec.ID, rec.NodeName)
	}
	if !rec.Status.Final() || n.jobs.running(id) != nil {
		return nil, badInputWrap(store.ErrJobNotFinal, "job %s is %s here: only a finished job's files can be deleted", rec.ID, rec.Status)
	}
	if err := n.jobs.removeFiles(rec); err != nil {
		return nil, fmt.Errorf("job %s: delete its files on node %s: %w", rec.ID, n.Name(), err)
	}
	return rec, nil
}

// badInputWrap is a bad_input answer whose cause is err (for errors.Is
// here; the wire carries the message).
func badInputWrap(err error, format string, a ...any) error {
	return &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf(format, a...), Err: err}
}

// jobRun runs a job here: fetch the working dir's chunks this node lacks
// from the entry node, unpack it (once per manifest), start the
// entrypoint under the supervisor and record it RUNNING.
func (n *Node) jobRun(ctx context.Context, req *wire.JobRunRequest) (*wire.JobRecord, error) {
	if err := wire.CheckJobID(req.Job.ID); err != nil {
		return nil, badInput("Job.Run: %v", err)
	}
	if req.Job.NodeID != n.ID() {
		return nil, badInput("Job.Run: job %s is for node %s, not this one", req.Job.ID, req.Job.NodeName)
	}
	if len(req.Job.Entrypoint) == 0 {
		return nil, badInput("Job.Run: job %s has no entrypoint", req.Job.ID)
	}
	if rec := n.jobs.running(req.Job.ID); rec != nil {
		return rec, nil
	}
	wd := n.jobs.emptyDir()
	if m := req.Manifest; m != nil {
		if err := checkManifest(m, n.cfg.MaxWorkingDirBytes); err != nil {
			return nil, badInput("job %s: %v", req.Job.ID, err)
		}
		if err := n.fetchChunks(ctx, req.Source, m); err != nil {
			return nil, fmt.Errorf("job %s: fetch the working dir from %s: %w", req.Job.ID, req.Source, err)
		}
		if err := n.jobs.keepManifest(m); err != nil {
			return nil, fmt.Errorf("job %s: %w", req.Job.ID, err)
		}
		var err error
		if wd, err = n.jobs.unpack(m); err != nil {
			return nil, badInput("job %s: %v", req.Job.ID, err)
		}
		defer n.jobs.pin(wd, -1) // start has it in procs by then
	} else if err := os.MkdirAll(wd, 0o755); err != nil {
		return nil, err
	}
	return n.jobs.start(ctx, &req.Job, wd)
}

// fetchChunks copies the chunks of m this node lacks from src.
func (n *Node) fetchChunks(ctx context.Context, src string, m *wire.JobManifest) error {
	for _, h := range m.Chunks {
		if n.jobs.chunks.has(h) {
			continue
		}
		if src == "" || src == n.rpcAddr {
			return fmt.Errorf("chunk %s is missing here", h)
		}
		var resp wire.JobChunkResponse
		if err := n.pool.Call(ctx, src, wire.MethodJobChunk, &wire.JobChunkRequest{Hash: h}, &resp); err != nil {
			return err
		}
		if err := n.jobs.chunks.put(h, resp.Data); err != nil {
			return err
		}
	}
	return nil
}

// failJob records j FAILED with why (exit code -1, no process), and logs
// the outcome: a job whose process is gone with its node or its run.
func (n *Node) failJob(ctx context.Context, j *wire.JobRecord, why string) {
	failed := j.Copy()
	failed.Status, failed.Message, failed.ExitCode, failed.EndedAt, failed.PID = wire.JobFailed, why, -1, time.Now().UnixNano(), 0
	if err := n.writeJob(ctx, failed, false); err != nil {
		n.logger.Warn("record a job FAILED", "job", j.ID, "why", why, "err", err)
		return
	}
	n.logger.Info("job failed", "job", j.ID, "why", why)
}

// reapJobs runs on the leader: every jobReapInterval, a job that is not
// final and whose node is dead, left or gone from the table is recorded
// FAILED with that reason (its supervisor died with the node).
func (n *Node) reapJobs(ctx context.Context) {
	t := time.NewTicker(jobReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		jobs, err := n.fsm.State().Jobs()
		if err != nil {
			continue
		}
		for _, j := range jobs {
			if j.Status.Final() || j.NodeID == "" {
				continue
			}
			nd, err := n.fsm.State().NodeByID(j.NodeID)
			if err != nil || (nd != nil && nd.Status.Live()) {
				continue
			}
			why := fmt.Sprintf("node %s died while the job ran", j.NodeName)
			if nd == nil || nd.Status == store.NodeLeft {
				why = fmt.Sprintf("node %s left the cluster while the job ran", j.NodeName)
			}
			n.failJob(ctx, j, why)
		}
	}
}
