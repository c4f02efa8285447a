package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/wire"
)

func testJob(id string, st wire.JobStatus) JobRecord {
	return JobRecord{ID: id, Status: st, Entrypoint: []string{"./driver", "-n", "3"}, Resources: map[string]float64{"CPU": 1},
		Env: map[string]string{"K": "V"}, WorkingDir: "abc", NodeID: "n1", NodeName: "node1", SubmittedAt: 100}
}

// A job's record goes PENDING → RUNNING → final and then never changes; a
// duplicate create and a write of an unknown job are refused; the table
// survives a snapshot round trip.
func TestJobWriteLifecycleAndSnapshot(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	mustApply(t, f, 1, JobWriteType, JobWriteRequest{Job: testJob("j1", wire.JobPending), Create: true})
	if err := applyErr(t, f, 2, JobWriteType, JobWriteRequest{Job: testJob("j1", wire.JobPending), Create: true}); !errors.Is(err, ErrJobExists) {
		t.Errorf("second create of j1: %v, want ErrJobExists", err)
	}
	if err := applyErr(t, f, 3, JobWriteType, JobWriteRequest{Job: testJob("nope", wire.JobRunning)}); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("update of an unknown job: %v, want ErrJobNotFound", err)
	}
	run := testJob("j1", wire.JobRunning)
	run.PID, run.StartedAt = 42, 200
	mustApply(t, f, 4, JobWriteType, JobWriteRequest{Job: run})
	failed := run
	failed.Status, failed.Message, failed.ExitCode, failed.EndedAt = wire.JobFailed, "node node1 died", -1, 300
	mustApply(t, f, 5, JobWriteType, JobWriteRequest{Job: failed})
	late := run
	late.Status = wire.JobSucceeded
	if err := applyErr(t, f, 6, JobWriteType, JobWriteRequest{Job: late}); !errors.Is(err, ErrJobFinal) {
		t.Errorf("write over a FAILED job: %v, want ErrJobFinal", err)
	}
	mustApply(t, f, 7, JobWriteType, JobWriteRequest{Job: testJob("j2", wire.JobPending), Create: true})
	j1, err := f.State().JobByID("j1")
	if err != nil || j1 == nil || j1.Status != wire.JobFailed || j1.CreateIndex != 1 || j1.ModifyIndex != 5 || j1.Message != "node node1 died" {
		t.Fatalf("j1: %+v, %v", j1, err)
	}
	want, _ := f.State().Jobs()
	got, err := restored(t, f).State().Jobs()
	if err != nil || !reflect.DeepEqual(got, want) || len(got) != 2 {
		t.Fatalf("jobs after snapshot round trip: %+v, %v; want %+v", got, err, want)
	}
}

func TestJobWriteChecksTheRecord(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	for _, bad := range []func(*JobRecord){
		func(r *JobRecord) { r.ID = "" },
		func(r *JobRecord) { r.ID = "../x" },
		func(r *JobRecord) { r.Status = "DONE" },
		func(r *JobRecord) { r.Entrypoint = nil },
		func(r *JobRecord) { r.Message = string(make([]byte, wire.MaxJobMessageBytes+1)) },
	} {
		r := testJob("j1", wire.JobPending)
		bad(&r)
		if err := applyErr(t, f, 1, JobWriteType, JobWriteRequest{Job: r, Create: true}); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("create %+v: %v, want ErrInvalidRequest", r.ID, err)
		}
	}
}

// A finished job's record can be deleted; a PENDING or RUNNING one, an
// unknown one and a malformed ID are refused, the error naming the status.
func TestJobDeleteOnlyFinished(t *testing.T) {
	t.Parallel()
	f := NewFSM(nil)
	mustApply(t, f, 1, JobWriteType, JobWriteRequest{Job: testJob("j1", wire.JobPending), Create: true})
	err := applyErr(t, f, 2, JobDeleteType, JobDeleteRequest{ID: "j1"})
	if !errors.Is(err, ErrJobNotFinal) || !strings.Contains(err.Error(), "PENDING") {
		t.Errorf("delete of a PENDING job: %v, want ErrJobNotFinal naming PENDING", err)
	}
	mustApply(t, f, 3, JobWriteType, JobWriteRequest{Job: testJob("j1", wire.JobRunning)})
	if err := applyErr(t, f, 4, JobDeleteType, JobDeleteRequest{ID: "j1"}); !errors.Is(err, ErrJobNotFinal) || !strings.Contains(err.Error(), "RUNNING") {
		t.Errorf("delete of a RUNNING job: %v, want ErrJobNotFinal naming RUNNING", err)
	}
	if r, _ := f.State().JobByID("j1"); r == nil {
		t.Fatal("a refused delete removed the record")
	}
	mustApply(t, f, 5, JobWriteType, JobWriteRequest{Job: testJob("j1", wire.JobStopped)})
	mustApply(t, f, 6, JobDeleteType, JobDeleteRequest{ID: "j1"})
	if r, err := f.State().JobByID("j1"); r != nil || err != nil {
		t.Fatalf("j1 after delete: %+v, %v", r, err)
	}
	if err := applyErr(t, f, 7, JobDeleteType, JobDeleteRequest{ID: "j1"}); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("second delete: %v, want ErrJobNotFound", err)
	}
	if err := applyErr(t, f, 8, JobDeleteType, JobDeleteRequest{ID: "../x"}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("delete of a malformed ID: %v, want ErrInvalidRequest", err)
	}
	// The ID can be used again.
	mustApply(t, f, 9, JobWriteType, JobWriteRequest{Job: testJob("j1", wire.JobPending), Create: true})
}
