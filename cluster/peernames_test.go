package cluster

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// badHashes are names a peer might send where a binary hash belongs: paths
// out of the cache (one exactly 64 characters long, the length the old
// check wanted, that climbs to /bin/sh), absolute paths, empty and near-miss
// strings.
func badHashes() []string {
	climb := strings.Repeat("../", 18) + "././bin/sh" // 64 characters
	return []string{
		climb, "../../../../../../../../etc/passwd", "/etc/passwd", "/bin/sh", "", ".", "..",
		strings.Repeat("A", 64), strings.Repeat("a", 63), strings.Repeat("a", 65), strings.Repeat("ab", 31) + "/x",
		strings.Repeat("ab", 31) + "\x00z",
	}
}

// wantBadInput fails unless err is an rpc error with code bad_input.
func wantBadInput(t *testing.T, what string, err error) {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != wire.CodeBadInput {
		t.Errorf("%s: got %v, want a bad_input error", what, err)
	}
}

// Issue 15, item 1: every hash or ID that names a file on a node is
// checked where it arrives. The old node served any file for a Binary.Fetch
// of "../../etc/passwd" and accepted a 64-character path to /bin/sh as a
// job's binary.
func TestPeerNamesCannotReachFiles(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh")
	}
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	nd := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := func(method string, req, rep any) error { return nd.pool.Call(ctx, nd.RPCAddr(), method, req, rep) }
	good := strings.Repeat("ab", 32)
	for _, h := range badHashes() {
		var rep wire.BinaryFetchReply
		err := call(wire.MethodBinaryFetch, &wire.BinaryFetchRequest{Hash: h, Length: 4096}, &rep)
		if len(rep.Data) > 0 {
			t.Errorf("Binary.Fetch %q served %d bytes: %.40q", h, len(rep.Data), rep.Data)
		}
		wantBadInput(t, "Binary.Fetch "+h, err)
		exe, _ := os.Executable()
		wantBadInput(t, "Job.Register "+h, call(wire.MethodJobRegister, &wire.JobRegisterRequest{JobID: "j0b", BinaryHash: h, BinaryPath: exe}, &wire.JobRegisterReply{}))
		wantBadInput(t, "Sched.Lease "+h, call(wire.MethodLease, &wire.LeaseRequest{JobID: "j0b", BinaryHash: h,
			Resources: sched.ResourceSet{sched.CPU: sched.Unit}}, &wire.LeaseReply{}))
		wantBadInput(t, "Actor.Start "+h, call(wire.MethodActorStart, &wire.ActorStartRequest{ActorID: "a0", JobID: "j0b", BinaryHash: h}, &wire.ActorStartReply{}))
	}
	for _, id := range []string{"../../../tmp/x", "/tmp/x", "", "..", "a/b", strings.Repeat("j", 200)} {
		wantBadInput(t, "Sched.Lease job "+id, call(wire.MethodLease, &wire.LeaseRequest{JobID: id, BinaryHash: good,
			Resources: sched.ResourceSet{sched.CPU: sched.Unit}}, &wire.LeaseReply{}))
		wantBadInput(t, "Actor.Start actor "+id, call(wire.MethodActorStart, &wire.ActorStartRequest{ActorID: id, JobID: "j0b", BinaryHash: good}, &wire.ActorStartReply{}))
	}
}
