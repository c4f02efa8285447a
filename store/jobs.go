package store

import (
	"cmp"
	"errors"
	"fmt"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nodeup/nodeup/wire"
)

// JobRecord is a submitted job (nodeup job submit) as the jobs table keeps it.
type JobRecord = wire.JobRecord

// JobWriteRequest creates or changes a submitted job's record. With Create
// an ID already recorded is ErrJobExists; without it the record must exist
// (ErrJobNotFound). A record in a final state (SUCCEEDED, FAILED, STOPPED)
// never changes again (ErrJobFinal): a supervisor's late write cannot undo
// the leader's FAILED, nor the reverse. Errors: ErrInvalidRequest (bad ID,
// status or sizes).
type JobWriteRequest struct {
	Job    JobRecord
	Create bool
}

var (
	// ErrJobExists means a create named a job ID already recorded.
	ErrJobExists = errors.New("job ID taken")
	// ErrJobNotFound means a write named a job that is not recorded.
	ErrJobNotFound = errors.New("job not found")
	// ErrJobFinal means a write would change a job that already ended.
	ErrJobFinal = errors.New("job already ended")
	// ErrJobNotFinal means a delete named a job that has not ended
	// (PENDING or RUNNING): as Ray's delete_job, only a finished job's
	// record goes.
	ErrJobNotFinal = errors.New("job not finished")
)

// JobDeleteRequest removes a finished job's record (nodeup job delete, as
// Ray's delete_job). Errors: ErrJobNotFound when it is not recorded,
// ErrJobNotFinal when it is PENDING or RUNNING, ErrInvalidRequest for a
// malformed ID.
type JobDeleteRequest struct {
	ID string
}

// MaxJobs bounds the jobs table: a create beyond it is refused until jobs
// are deleted (a record is a few hundred bytes).
const MaxJobs = 10000

// validJob checks a record's shape; every field came from the network.
func validJob(j *JobRecord) error {
	if err := wire.CheckJobID(j.ID); err != nil {
		return fmt.Errorf("%v: %w", err, ErrInvalidRequest)
	}
	if !j.Status.Valid() {
		return fmt.Errorf("job %s: status %q: want PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED: %w", j.ID, j.Status, ErrInvalidRequest)
	}
	if len(j.Entrypoint) == 0 || len(j.Entrypoint) > wire.MaxJobEntrypointArgs {
		return fmt.Errorf("job %s: entrypoint of %d arguments: want 1 to %d: %w", j.ID, len(j.Entrypoint), wire.MaxJobEntrypointArgs, ErrInvalidRequest)
	}
	for _, a := range j.Entrypoint {
		if len(a) > wire.MaxJobArgBytes {
			return fmt.Errorf("job %s: entrypoint argument of %d bytes: at most %d: %w", j.ID, len(a), wire.MaxJobArgBytes, ErrInvalidRequest)
		}
	}
	if len(j.Env) > wire.MaxJobEnvVars || len(j.Resources) > wire.MaxJobEnvVars {
		return fmt.Errorf("job %s: %d env vars, %d resources: at most %d each: %w", j.ID, len(j.Env), len(j.Resources), wire.MaxJobEnvVars, ErrInvalidRequest)
	}
	if len(j.Message) > wire.MaxJobMessageBytes {
		return fmt.Errorf("job %s: message of %d bytes: at most %d: %w", j.ID, len(j.Message), wire.MaxJobMessageBytes, ErrInvalidRequest)
	}
	return nil
}

// JobByID returns the job with the given ID, or (nil, nil) if there is none.
func (s *StateStore) JobByID(id string) (*JobRecord, error) {
	return first[*JobRecord](s, "job "+id, tableJobs, "id", id)
}

// Jobs returns every job record by submission time, then ID.
func (s *StateStore) Jobs() ([]*JobRecord, error) {
	return all(s, "jobs", tableJobs, "id", func(a, b *JobRecord) int {
		return cmp.Or(cmp.Compare(a.SubmittedAt, b.SubmittedAt), cmp.Compare(a.ID, b.ID))
	})
}

// writeJob applies req at index (see JobWriteRequest).
func (s *StateStore) writeJob(index uint64, req *JobWriteRequest) error {
	if err := validJob(&req.Job); err != nil {
		return err
	}
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableJobs, "id", req.Job.ID)
		if err != nil {
			return false, err
		}
		rec := req.Job.Copy()
		switch {
		case req.Create && raw != nil:
			return false, fmt.Errorf("job %s: %w", rec.ID, ErrJobExists)
		case req.Create:
			n, err := txn.Get(tableJobs, "id")
			if err != nil {
				return false, err
			}
			c := 0
			for r := n.Next(); r != nil; r = n.Next() {
				c++
			}
			if c >= MaxJobs {
				return false, fmt.Errorf("job %s: the cluster keeps %d jobs, the most it does: %w", rec.ID, c, ErrInvalidRequest)
			}
			rec.CreateIndex = index
		case raw == nil:
			return false, fmt.Errorf("job %s: %w", rec.ID, ErrJobNotFound)
		default:
			cur := raw.(*JobRecord)
			if cur.Status.Final() {
				return false, fmt.Errorf("job %s is %s: %w", rec.ID, cur.Status, ErrJobFinal)
			}
			rec.CreateIndex = cur.CreateIndex
		}
		rec.ModifyIndex = index
		return true, txn.Insert(tableJobs, rec)
	})
}

// deleteJob applies a JobDeleteRequest for id at index.
func (s *StateStore) deleteJob(index uint64, id string) error {
	if err := wire.CheckJobID(id); err != nil {
		return fmt.Errorf("%v: %w", err, ErrInvalidRequest)
	}
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableJobs, "id", id)
		if err != nil {
			return false, err
		}
		if raw == nil {
			return false, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
		}
		cur := raw.(*JobRecord)
		if !cur.Status.Final() {
			return false, fmt.Errorf("job %s is %s, want SUCCEEDED, FAILED or STOPPED: %w", id, cur.Status, ErrJobNotFinal)
		}
		return true, txn.Delete(tableJobs, cur)
	})
}
