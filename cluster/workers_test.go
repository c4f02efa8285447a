package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// A lease request that arrives after its job finished (the driver shut
// down with requests in flight) must not start a worker or keep resources:
// nobody would ever return that lease.
func TestLeaseForFinishedJobHoldsNothing(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	n := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n.jobFinish(ctx, &wire.JobFinishRequest{JobID: "f1n1shed", FromNode: true}); err != nil {
		t.Fatal(err)
	}
	_, err := n.leaseWorker(ctx, &wire.LeaseRequest{JobID: "f1n1shed", BinaryHash: strings.Repeat("ab", 32),
		Resources: sched.ResourceSet{sched.CPU: sched.QuantityOf(1)}})
	if err == nil || !strings.Contains(err.Error(), "has finished") {
		t.Fatalf("lease for a finished job: %v (want an error saying it has finished)", err)
	}
	if got, want := n.local.available()[sched.CPU], n.local.totals()[sched.CPU]; got != want {
		t.Fatalf("CPU free after the refused lease: %s of %s", got, want)
	}
}

// TestWorkerPoolKeyFollowsEnv: a task worker's pool key and the environment
// it starts with come from the same procSpec, so leases with different
// runtime envs never share a process and equal envs (in any map order) do.
func TestWorkerPoolKeyFollowsEnv(t *testing.T) {
	base := procSpec{job: "j1", env: []string{"NODEUP_NAMESPACE=ns"}}
	a1, a2, b := base, base, base
	a1.envVars = map[string]string{"A": "1", "B": "2"}
	a2.envVars = map[string]string{"B": "2", "A": "1"}
	b.envVars = map[string]string{"A": "1", "B": "3"}
	if a1.poolKey() != a2.poolKey() {
		t.Errorf("equal envs got pool keys %q and %q", a1.poolKey(), a2.poolKey())
	}
	if a1.poolKey() == b.poolKey() || a1.poolKey() == base.poolKey() {
		t.Errorf("different envs share pool key %q", a1.poolKey())
	}
	if plain := (procSpec{job: "j1"}); plain.poolKey() != taskPoolKey("j1", nil) {
		t.Errorf("a spec without env should keep the plain key, got %q", plain.poolKey())
	}
	env := a1.userEnv()
	want := []string{"NODEUP_NAMESPACE=ns", "A=1", "B=2", wire.EnvRuntimeEnv + `={"A":"1","B":"2"}`}
	if !slices.Equal(env, want) {
		t.Errorf("process env %q, want %q", env, want)
	}
}

func TestValidateEnvVar(t *testing.T) {
	for _, ok := range [][2]string{{"OMP_NUM_THREADS", "32"}, {"EMPTY", ""}, {"lower_case", "a=b c"}} {
		if err := wire.ValidateEnvVar(ok[0], ok[1]); err != nil {
			t.Errorf("%q=%q: %v", ok[0], ok[1], err)
		}
	}
	for _, bad := range [][3]string{
		{"", "v", "empty"}, {"A=B", "v", "'='"}, {"A\x00", "v", "NUL"}, {"A", "v\x00", "value"},
		{"NODEUP_JOB_ID", "v", "reserved"}, {"CUDA_VISIBLE_DEVICES", "0", "reserved"}, {"NVIDIA_VISIBLE_DEVICES", "0", "reserved"},
	} {
		err := wire.ValidateEnvVar(bad[0], bad[1])
		if err == nil || !strings.Contains(err.Error(), bad[2]) || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad[0])) {
			t.Errorf("%q=%q: error %v should name the key and say %q", bad[0], bad[1], err, bad[2])
		}
	}
}
