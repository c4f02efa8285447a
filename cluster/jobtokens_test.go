package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// registerTestJob registers job on nd (over its own socket, the local
// principal) with this test binary as the job's binary.
func registerTestJob(t *testing.T, ctx context.Context, nd *Node, job string) *wire.JobRegisterReply {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var rep wire.JobRegisterReply
	req := &wire.JobRegisterRequest{JobID: job, BinaryHash: hex.EncodeToString(h.Sum(nil)), BinaryPath: exe}
	if err := nd.pool.Call(ctx, nd.RPCAddr(), wire.MethodJobRegister, req, &rep); err != nil {
		t.Fatalf("Job.Register %s: %v", job, err)
	}
	return &rep
}

// A job registered on a node that does not lead gets a job token minted
// through Raft: every node resolves it to role submit and the job (Auth.Check),
// listings do not show it, and it stops working when the job ends.
func TestJobTokenMintedCheckedAndRevoked(t *testing.T) {
	nodes := testCluster(t, 2, nil)
	waitFormed(t, nodes, 2, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	follower := nodes[1]
	if follower.IsLeader() {
		follower = nodes[0]
	}
	rep := registerTestJob(t, ctx, follower, "jobtok1")
	if !strings.HasPrefix(rep.JobToken, "nodeup1.") {
		t.Fatalf("JobRegisterReply.JobToken = %q, want a token", rep.JobToken)
	}
	if again := registerTestJob(t, ctx, follower, "jobtok1"); again.JobToken != rep.JobToken {
		t.Fatalf("a second Job.Register of the job made another token: %q, want %q", again.JobToken, rep.JobToken)
	}
	check := func(nd *Node, tok string) (*wire.AuthCheckReply, error) {
		var r wire.AuthCheckReply
		err := nd.pool.Call(ctx, nd.RPCAddr(), wire.MethodAuthCheck, &wire.AuthCheckRequest{Token: tok}, &r)
		return &r, err
	}
	for _, nd := range nodes {
		var got *wire.AuthCheckReply
		testutil.Until(t, 10*time.Second, "the job token on "+nd.cfg.NodeName, func() error {
			var err error
			got, err = check(nd, rep.JobToken)
			return err
		})
		if got.Job != "jobtok1" || got.Role != "submit" {
			t.Fatalf("Auth.Check on %s = %+v, want job jobtok1, role submit", nd.cfg.NodeName, got)
		}
	}
	// A worker started for the job on either node gets it.
	for _, nd := range nodes {
		if tok, err := nd.jobTokenFor(ctx, "jobtok1"); err != nil || tok != rep.JobToken {
			t.Fatalf("jobTokenFor on %s = %q, %v; want the job's token", nd.cfg.NodeName, tok, err)
		}
	}
	var list wire.TokenListResponse
	if err := nodes[0].forward(ctx, wire.MethodTokenList, &wire.Empty{}, &list); err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Tokens {
		if r.JobToken != "" || r.SecretHash != "" {
			t.Fatalf("Token.List shows a secret: %+v", r)
		}
	}
	// A token that is not one is refused, naming why.
	var re *rpc.Error
	if _, err := check(nodes[0], "nodeup1.00000000.x.y"); !errors.As(err, &re) || re.Code != wire.CodePermissionDenied {
		t.Fatalf("Auth.Check of a bad token: %v, want permission_denied", err)
	}
	if err := follower.pool.Call(ctx, follower.RPCAddr(), wire.MethodJobFinish, &wire.JobFinishRequest{JobID: "jobtok1"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		testutil.Until(t, 10*time.Second, "the job token refused on "+nd.cfg.NodeName+" after the job ended", func() error {
			_, err := check(nd, rep.JobToken)
			if errors.As(err, &re) && re.Code == wire.CodePermissionDenied && strings.Contains(re.Message, "unknown to this cluster") {
				return nil
			}
			return errors.New("Auth.Check still answers " + errString(err))
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// An --insecure cluster makes no job tokens.
func TestNoJobTokenWhenInsecure(t *testing.T) {
	nodes := testCluster(t, 1, insecure)
	waitFormed(t, nodes, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if rep := registerTestJob(t, ctx, nodes[0], "jobtok2"); rep.JobToken != "" {
		t.Fatalf("JobRegisterReply.JobToken = %q on an insecure cluster, want none", rep.JobToken)
	}
	if tok, err := nodes[0].jobTokenFor(ctx, "jobtok2"); err != nil || tok != "" {
		t.Fatalf("jobTokenFor = %q, %v; want none", tok, err)
	}
}

func TestActorOfJobID(t *testing.T) {
	for job, want := range map[string]string{actorJobID("ab12-cd", 3): "ab12-cd", actorJobID("x", 0): "x", "1a2b3c4d": "", "a-": "", "a-x-y": "", "a--1": ""} {
		got, ok := actorOfJobID(job)
		if got != want || ok != (want != "") {
			t.Errorf("actorOfJobID(%q) = %q, %v; want %q", job, got, ok, want)
		}
	}
}

// A node that is not a Raft server has no copy of the token table: a job
// registered there still gets one token (also when registered again), a
// worker it starts gets that token from the leader, and its Auth.Check
// answers through the leader (the cross-node pull bench failed here with
// "no job token in this node's state").
func TestJobTokenOnANodeWithoutRaftState(t *testing.T) {
	nodes := testCluster(t, 2, func(i int, c *Config) { c.Server = i == 0 })
	waitFormed(t, nodes, 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := nodes[1]
	if client.raft != nil {
		t.Fatal("node 1 runs Raft; want a node without Raft state")
	}
	rep := registerTestJob(t, ctx, client, "jobtok2")
	if !strings.HasPrefix(rep.JobToken, "nodeup1.") {
		t.Fatalf("JobRegisterReply.JobToken = %q, want a token", rep.JobToken)
	}
	if again := registerTestJob(t, ctx, client, "jobtok2"); again.JobToken != rep.JobToken {
		t.Fatalf("a second Job.Register of the job made another token: %q, want %q", again.JobToken, rep.JobToken)
	}
	if tok, err := client.jobTokenFor(ctx, "jobtok2"); err != nil || tok != rep.JobToken {
		t.Fatalf("jobTokenFor on the node without Raft state = %q, %v; want the job's token", tok, err)
	}
	var got wire.AuthCheckReply
	if err := client.pool.Call(ctx, client.RPCAddr(), wire.MethodAuthCheck, &wire.AuthCheckRequest{Token: rep.JobToken}, &got); err != nil || got.Job != "jobtok2" {
		t.Fatalf("Auth.Check on the node without Raft state = %+v, %v; want job jobtok2", got, err)
	}
}
