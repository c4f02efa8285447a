package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/cluster/clustertest"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// nodeup list <kind> --filter key=value|key!=value --limit N, as Ray's state
// API: filters on the JSON fields, a limited listing says how many it left
// out, and a bad key or limit is an error naming what is accepted.
func TestListFiltersAndLimits(t *testing.T) {
	nd := clustertest.Start(t, 1, func(_ int, c *cluster.Config) { c.Insecure = true })[0]
	addr := nd.SocketAddr()
	huge := sched.ResourceSet{sched.CPU: sched.QuantityOf(1000)} // stays PENDING
	for id, cls := range map[string]string{"00112233aabbccdd": "Counter", "99887766aabbccdd": "Counter", "44556677aabbccdd": "Reader"} {
		nodeCall(t, nd, wire.MethodActorCreate, &wire.ActorCreateRequest{ActorID: id, JobID: "job1", Class: cls, Namespace: "default",
			Constructor: cls, BinaryHash: strings.Repeat("ab", 32), MaxConcurrency: 1, Resources: huge}, &wire.ActorInfo{})
	}
	var rows []actorJSON
	out, err := run(t, "list", "actors", "--address", addr, "--json", "--filter", "class_name=Counter")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 || rows[0].ClassName != "Counter" || rows[1].ClassName != "Counter" {
		t.Fatalf("--filter class_name=Counter: %v rows %+v from %q", err, rows, out)
	}
	out, err = run(t, "list", "actors", "--address", addr, "--filter", "class_name!=reader", "--filter", "state=pending", "--limit", "1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "Counter") != 1 || !strings.Contains(out, "1 of 2 actors shown; 1 left out by --limit") {
		t.Fatalf("--filter class_name!=reader --limit 1:\n%s", out)
	}
	if out, err = run(t, "list", "nodes", "--address", addr, "--filter", "State=alive"); err != nil || !strings.Contains(out, "alive") {
		t.Fatalf("list nodes --filter State=alive: %v\n%s", err, out)
	}
	if out, err = run(t, "list", "nodes", "--address", addr, "--filter", "State=dead"); err != nil || strings.Contains(out, "alive") {
		t.Fatalf("list nodes --filter State=dead: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "actors", "--filter", "colour=red"}, "unknown key \"colour\"; use actor_id, class_name"},
		{[]string{"list", "actors", "--filter", "state"}, "want key=value or key!=value"},
		{[]string{"list", "placement-groups", "--limit", "0"}, "--limit 0: use 1 to"},
		{[]string{"list", "workers", "--filter", "pid=x", "--filter", "nope=1"}, "unknown key \"nope\""},
		{[]string{"list", "jobs", "--filter", "status=RUNNING"}, "unknown key \"status\"; use ID, Status"},
	} {
		_, err := run(t, append(c.args, "--address", addr)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("nodeup %s: %v, want an error containing %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
