package cluster

import (
	"context"
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
