package wire

import (
	"fmt"
)

// Job submission methods (docs/jobs.md), as Ray Jobs: the CLI uploads a
// working dir to the node it reaches (the entry node) in content-addressed
// chunks, then submits an entrypoint; the entry node picks a node with the
// entrypoint resources, records the job in Raft and has that node run it
// under its supervisor. Distinct from Job.Register/Job.Finish, which a
// running driver calls for its own (Go SDK) job.
const (
	// MethodJobMissing: CLI → entry node. JobMissingRequest →
	// JobMissingResponse: which chunks the node lacks.
	MethodJobMissing = "Job.Missing"
	// MethodJobUpload: CLI → entry node. JobUploadRequest → Empty: one
	// chunk, at most MaxJobChunkBytes, named by its sha256.
	MethodJobUpload = "Job.Upload"
	// MethodJobSubmit: CLI → entry node. JobSubmitRequest → JobRecord (as
	// recorded once the entrypoint started, or FAILED).
	MethodJobSubmit = "Job.Submit"
	// MethodJobGet: CLI → any node. JobGetRequest → JobRecord.
	MethodJobGet = "Job.Get"
	// MethodJobList: CLI → any node. Empty → JobListResponse.
	MethodJobList = "Job.List"
	// MethodJobLogs: CLI → any node (forwarded to the job's node).
	// JobLogsRequest → JobLogsResponse.
	MethodJobLogs = "Job.Logs"
	// MethodJobStop: CLI → any node (forwarded to the job's node).
	// JobStopRequest → JobRecord.
	MethodJobStop = "Job.Stop"
	// MethodJobDelete: CLI → any node. JobDeleteRequest → JobRecord (the
	// record deleted): a finished job's record, log and unpacked working
	// dir go, as Ray's delete_job; the files on the job's node (forwarded
	// with Local set).
	MethodJobDelete = "Job.Delete"
	// MethodJobWrite: node → leader. JobWriteRequest → Empty: a job
	// record's change, applied through Raft.
	MethodJobWrite = "Job.Write"
	// MethodJobRun: entry node → the job's node. JobRunRequest → JobRecord.
	MethodJobRun = "Job.Run"
	// MethodJobChunk: the job's node → entry node. JobChunkRequest →
	// JobChunkResponse: one chunk the job's node lacks.
	MethodJobChunk = "Job.Chunk"
)

// JobStatus is a submitted job's state, as Ray's JobStatus.
type JobStatus string

// The job states. PENDING until the entrypoint starts; SUCCEEDED, FAILED
// and STOPPED are final.
const (
	JobPending   JobStatus = "PENDING"
	JobRunning   JobStatus = "RUNNING"
	JobSucceeded JobStatus = "SUCCEEDED"
	JobFailed    JobStatus = "FAILED"
	JobStopped   JobStatus = "STOPPED"
)

// Valid reports whether s is one of the job states.
func (s JobStatus) Valid() bool {
	switch s {
	case JobPending, JobRunning, JobSucceeded, JobFailed, JobStopped:
		return true
	}
	return false
}

// Final reports whether s is SUCCEEDED, FAILED or STOPPED.
func (s JobStatus) Final() bool {
	return s == JobSucceeded || s == JobFailed || s == JobStopped
}

// Bounds on what a submission carries; every one comes from the network.
const (
	// MaxJobChunkBytes bounds one uploaded chunk (1 MiB).
	MaxJobChunkBytes = 1 << 20
	// DefaultMaxWorkingDirBytes is a node's default cap on a working dir's
	// archive (and on what it unpacks to), as Ray's 100 MiB (ray#55877).
	DefaultMaxWorkingDirBytes = 100 << 20
	// MaxJobChunks bounds a manifest's chunk list (64 GiB of 1 MiB chunks).
	MaxJobChunks = 1 << 16
	// MaxJobEntrypointArgs bounds the entrypoint's argv; each argument is
	// at most MaxJobArgBytes.
	MaxJobEntrypointArgs = 1024
	MaxJobArgBytes       = 64 << 10
	// MaxJobEnvVars bounds --env entries.
	MaxJobEnvVars = 256
	// MaxJobLogRead bounds one Job.Logs answer.
	MaxJobLogRead = 1 << 20
	// MaxJobMessageBytes bounds a record's message.
	MaxJobMessageBytes = 4096
)

// Environment of a submitted job's entrypoint, besides NODEUP_ADDRESS
// (the node's Unix socket, else its RPC address).
const (
	// EnvJobSubmissionID is the job's ID (Ray's submission_id).
	EnvJobSubmissionID = "NODEUP_JOB_SUBMISSION_ID"
	// EnvAddress is the node address a driver connects to (worker.Init).
	EnvAddress = "NODEUP_ADDRESS"
)

// CheckJobID checks a job ID: 1 to 64 characters of letters, digits, '_',
// '.' and '-', starting with a letter or digit (so it is a safe file name).
func CheckJobID(id string) error {
	if !validJobID(id) {
		return fmt.Errorf("job ID %q: want 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", id)
	}
	return nil
}

// validJobID is ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$, by hand: regexp would
// add about 0.2 MB to every driver (wire is in the SDK).
func validJobID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// CheckChunkHash checks a chunk's name: 64 lowercase hex characters (sha256).
func CheckChunkHash(h string) error {
	if len(h) != 64 {
		return fmt.Errorf("chunk hash %q: want 64 lowercase hex characters (sha256)", h)
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("chunk hash %q: want 64 lowercase hex characters (sha256)", h)
		}
	}
	return nil
}

// JobRecord is a submitted job as the cluster keeps it in Raft (the store's
// jobs table). Times are unix nanoseconds, 0 when not yet.
type JobRecord struct {
	// ID is the submission ID (CheckJobID), --job-id or made up.
	ID string
	// Status is the job's state; Message says why it is what it is.
	Status  JobStatus
	Message string
	// Entrypoint is the command and its arguments, run in the working dir.
	Entrypoint []string
	// Resources is what the entrypoint's node must have (sched units
	// rendered as floats: {"CPU": 1}).
	Resources map[string]float64
	// Env is the --env variables.
	Env map[string]string
	// WorkingDir is the content address of the uploaded working dir (the
	// sha256 of its manifest), "" for none.
	WorkingDir string
	// Submitter is the principal that submitted it (its role), and the
	// entry node's name.
	Submitter string
	// NodeID and NodeName are the node that runs it.
	NodeID, NodeName string
	// SubmittedAt, StartedAt and EndedAt are the job's times.
	SubmittedAt, StartedAt, EndedAt int64
	// ExitCode is the entrypoint's exit status once final (-1 when killed
	// by a signal or never started).
	ExitCode int
	// PID is the entrypoint's process on its node, 0 when not running.
	PID int
	// CreateIndex and ModifyIndex are Raft indexes, set by the FSM.
	CreateIndex, ModifyIndex uint64
}

// Copy returns a deep copy of r; a nil r yields nil.
func (r *JobRecord) Copy() *JobRecord {
	if r == nil {
		return nil
	}
	c := *r
	c.Entrypoint = append([]string(nil), r.Entrypoint...)
	if r.Resources != nil {
		c.Resources = make(map[string]float64, len(r.Resources))
		for k, v := range r.Resources {
			c.Resources[k] = v
		}
	}
	if r.Env != nil {
		c.Env = make(map[string]string, len(r.Env))
		for k, v := range r.Env {
			c.Env[k] = v
		}
	}
	return &c
}

// JobManifest names a working dir's archive (an uncompressed tar) as the
// sha256s of its chunks, in order; every chunk but the last is
// MaxJobChunkBytes long.
type JobManifest struct {
	Chunks []string
	// Size is the archive's length in bytes.
	Size int64
}

// JobMissingRequest asks which of Chunks the node lacks.
type JobMissingRequest struct {
	Chunks []string
}

// JobMissingResponse lists the chunks to upload, and the node's cap on a
// working dir (bytes), so the CLI can refuse a larger one before it sends.
type JobMissingResponse struct {
	Missing  []string
	MaxBytes int64
}

// JobUploadRequest carries one chunk; Hash is the sha256 of Data.
type JobUploadRequest struct {
	Hash string
	Data []byte
}

// JobSubmitRequest submits a job. ID "" lets the node make one up.
type JobSubmitRequest struct {
	ID         string
	Entrypoint []string
	Resources  map[string]float64
	Env        map[string]string
	// Manifest is the uploaded working dir; nil for none (the entrypoint
	// then runs in an empty dir).
	Manifest *JobManifest
}

// JobGetRequest names one job.
type JobGetRequest struct {
	ID string
}

// JobListResponse lists every job by submission time.
type JobListResponse struct {
	Jobs []JobRecord
}

// JobLogsRequest reads a job's log (its entrypoint's stdout and stderr)
// from byte Offset, at most Max bytes (0 or more than MaxJobLogRead:
// MaxJobLogRead). Local is set on the hop to the job's node.
type JobLogsRequest struct {
	ID     string
	Offset int64
	Max    int
	Local  bool
}

// JobLogsResponse is the bytes read and the offset to ask from next; Size
// is the log's length now.
type JobLogsResponse struct {
	Data []byte
	Next int64
	Size int64
}

// JobStopRequest stops a job: SIGTERM to its process group, then SIGKILL
// after GraceNanos (0: the node's default). Local is set on the hop to the
// job's node.
type JobStopRequest struct {
	ID         string
	GraceNanos int64
	Local      bool
}

// JobWriteRequest records a job's change through the leader. Create
// refuses an ID already recorded; Delete removes the record of the
// finished job Job.ID instead (the rest of Job is ignored).
type JobWriteRequest struct {
	Job    JobRecord
	Create bool
	Delete bool
}

// JobDeleteRequest deletes a finished job. Local is set on the hop to the
// job's node, which removes its log and unpacked working dir.
type JobDeleteRequest struct {
	ID    string
	Local bool
}

// JobRunRequest asks the job's node to run it: fetch the chunks it lacks
// from Source (the entry node's RPC address), unpack, start.
type JobRunRequest struct {
	Job      JobRecord
	Manifest *JobManifest
	Source   string
}

// JobChunkRequest asks for one chunk by hash.
type JobChunkRequest struct {
	Hash string
}

// JobChunkResponse is the chunk's bytes.
type JobChunkResponse struct {
	Data []byte
}
