package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// run runs `nodeup args...` and returns its stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := App()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.RunContext(context.Background(), append([]string{"nodeup"}, args...))
	return out.String(), err
}

// nodeCall calls method on nd over its Unix socket, as a local client.
func nodeCall(t *testing.T, nd *cluster.Node, method string, req, resp any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, "unix", strings.TrimPrefix(nd.SocketAddr(), rpc.UnixPrefix), []byte{wire.PreambleRPC}, wire.ProtocolVersion)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Call(ctx, method, req, resp); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
}

// nodeup kill actor ends an actor found by name (in --namespace) or by ID,
// and nodeup remove placement-group a group by name or ID; an unknown name
// is an error naming it.
func TestKillActorAndRemovePlacementGroup(t *testing.T) {
	nd := clustertest.Start(t, 1, func(_ int, c *cluster.Config) { c.Insecure = true })[0]
	addr := nd.SocketAddr()
	// Actors no node can hold stay PENDING, so only the kill ends them.
	huge := sched.ResourceSet{sched.CPU: sched.QuantityOf(1000)}
	for id, name := range map[string]string{"00112233aabbccdd": "counter", "99887766aabbccdd": ""} {
		nodeCall(t, nd, wire.MethodActorCreate, &wire.ActorCreateRequest{ActorID: id, JobID: "job1", Class: "Counter", Name: name, Namespace: "default",
			Constructor: "Counter", BinaryHash: strings.Repeat("ab", 32), MaxConcurrency: 1, Resources: huge}, &wire.ActorInfo{})
	}
	state := func(id string) string {
		var info wire.ActorInfo
		nodeCall(t, nd, wire.MethodActorGet, &wire.ActorGetRequest{ActorID: id, NotIncarnation: -1}, &info)
		return info.State
	}
	if out, err := run(t, "kill", "actor", "--address", addr, "counter"); err != nil || !strings.Contains(out, "actor 00112233aabbccdd (Counter counter) killed") {
		t.Fatalf("kill actor counter: %q, %v", out, err)
	}
	if out, err := run(t, "kill", "actor", "--address", addr, "99887766aabbccdd"); err != nil || !strings.Contains(out, "actor 99887766aabbccdd (Counter) killed") {
		t.Fatalf("kill actor by ID: %q, %v", out, err)
	}
	for _, id := range []string{"00112233aabbccdd", "99887766aabbccdd"} {
		if s := state(id); s != "DEAD" {
			t.Errorf("actor %s after kill: %s, want DEAD", id, s)
		}
	}
	if _, err := run(t, "kill", "actor", "--address", addr, "--namespace", "other", "counter"); err == nil || !strings.Contains(err.Error(), `"counter" in namespace "other"`) {
		t.Fatalf("kill of a name in another namespace: %v, want an error naming it", err)
	}

	nodeCall(t, nd, wire.MethodPGCreate, &wire.PGCreateRequest{ID: "aabbccdd00112233aabbccdd", Name: "pg1", Namespace: "default", JobID: "job1",
		Strategy: "PACK", Bundles: []sched.ResourceSet{{sched.CPU: sched.QuantityOf(1)}}}, &wire.PGInfo{})
	if out, err := run(t, "remove", "placement-group", "--address", addr, "pg1"); err != nil || !strings.Contains(out, "placement group aabbccdd00112233aabbccdd pg1 removed") {
		t.Fatalf("remove placement-group pg1: %q, %v", out, err)
	}
	var pg wire.PGInfo
	nodeCall(t, nd, wire.MethodPGGet, &wire.PGGetRequest{ID: "aabbccdd00112233aabbccdd"}, &pg)
	if pg.State != "REMOVED" {
		t.Fatalf("group after remove: %s, want REMOVED", pg.State)
	}
	if _, err := run(t, "remove", "placement-group", "--address", addr, "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("remove of an unknown group: %v, want an error naming it", err)
	}
	if _, err := run(t, "kill", "actor", "--address", addr); err == nil {
		t.Fatal("kill actor with no argument succeeded")
	}
}
