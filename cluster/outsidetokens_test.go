package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// outsideRaft returns the node of nodes that is not in the leader's Raft
// configuration, failing t when there is not exactly one.
func outsideRaft(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	var leader *Node
	for _, nd := range nodes {
		if nd.IsLeader() {
			leader = nd
		}
	}
	if leader == nil {
		t.Fatal("no leader among the nodes")
	}
	in := map[raft.ServerID]bool{}
	f := leader.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		in[s.ID] = true
	}
	var out []*Node
	for _, nd := range nodes {
		if !in[raft.ServerID(nd.id.NodeID)] {
			out = append(out, nd)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d nodes outside the Raft configuration of %d servers, want 1", len(out), len(in))
	}
	return out[0]
}

// A server-eligible node left outside the Raft group (a fourth node with
// the default three voters) has no replicated state of its own: it
// resolves every token through the leader, over TLS, for the node's own
// Auth.Check, and for a driver registering on its Unix socket; the job's
// token is revoked when the job ends there. On the old code it refused
// every valid token as unknown to this cluster.
func TestNodeOutsideRaftResolvesTokensAtLeader(t *testing.T) {
	nodes := testCluster(t, 4, nil)
	waitFormed(t, nodes, 4, 3)
	out := outsideRaft(t, nodes)
	if out.hasRaftState() {
		t.Fatalf("%s is outside the Raft configuration but says it has Raft state", out.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, role := range []string{"read", "submit", "admin"} {
		tok := createToken(t, nodes[0], role, time.Hour).Token
		if err := dialTLS(t, out, tok).Call(ctx, wire.MethodStatus, &wire.Empty{}, &wire.StatusResponse{}); err != nil {
			t.Fatalf("a valid %s token calling Cluster.Status over TLS on %s (outside Raft): %v", role, out.Name(), err)
		}
		var rep wire.AuthCheckReply
		if err := out.pool.Call(ctx, out.RPCAddr(), wire.MethodAuthCheck, &wire.AuthCheckRequest{Token: tok}, &rep); err != nil || rep.Role != role {
			t.Fatalf("Auth.Check of a %s token on %s: %+v, %v", role, out.Name(), rep, err)
		}
	}
	// A made-up token of this cluster is still refused, naming why.
	fake, err := pki.NewToken(out.sec.ca.Hash())
	if err != nil {
		t.Fatal(err)
	}
	wantDenied(t, dialTLS(t, out, fake.String()).Call(ctx, wire.MethodStatus, &wire.Empty{}, nil), "token "+fake.ID, "unknown to this cluster")

	// A driver registers on the outside node: its job token is minted and
	// handed to the job's workers there, and revoked when the job ends.
	rep := registerTestJob(t, ctx, out, "outjob1")
	if !strings.HasPrefix(rep.JobToken, "nodeup1.") {
		t.Fatalf("JobRegisterReply.JobToken = %q, want a token", rep.JobToken)
	}
	if tok, err := out.jobTokenFor(ctx, "outjob1"); err != nil || tok != rep.JobToken {
		t.Fatalf("jobTokenFor on %s = %q, %v; want the job's token", out.Name(), tok, err)
	}
	if err := out.pool.Call(ctx, out.RPCAddr(), wire.MethodJobFinish, &wire.JobFinishRequest{JobID: "outjob1"}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 15*time.Second, "the job token refused at the leader after the job ended on "+out.Name(), func() error {
		var r wire.AuthCheckReply
		err := nodes[0].pool.Call(ctx, nodes[0].RPCAddr(), wire.MethodAuthCheck, &wire.AuthCheckRequest{Token: rep.JobToken}, &r)
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == wire.CodePermissionDenied {
			return nil
		}
		return fmt.Errorf("Auth.Check still answers %+v, %v", r, err)
	})
}
