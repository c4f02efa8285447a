package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// A node lists and reads another node's worker logs (Logs.List with
// Cluster, Logs.Read with Node): byte ranges, the last lines, the 1 MiB
// cap; hostile file names are refused with bad_input naming the pattern.
func TestLogsListAndReadRemoteNode(t *testing.T) {
	nodes := testCluster(t, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	remote := nodes[1]
	name := "worker-job1-0123456789abcdef-4321.log"
	var content strings.Builder
	for i := range 100 {
		fmt.Fprintf(&content, "line %d\n", i)
	}
	if err := os.MkdirAll(remote.workers.logs.dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(remote.workers.logs.dir, name), []byte(content.String()), 0o640); err != nil {
		t.Fatal(err)
	}
	// One of the asking node's own, listed with the peer's.
	own := "actor-act1-0123456789abcdef-99.log"
	if err := os.MkdirAll(nodes[0].workers.logs.dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nodes[0].workers.logs.dir, own), []byte("own\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	// Not a worker log: never listed nor read.
	secret := filepath.Join(remote.DataDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	asker := nodes[0]
	call := func(method string, req, resp any) error { return asker.callNode(ctx, asker.rpcAddr, method, req, resp) }

	testutil.Until(t, 30*time.Second, "node n1's log in the cluster listing", func() error {
		var l wire.LogsList
		if err := call(wire.MethodLogsList, &wire.LogsListRequest{Job: "job1", Cluster: true}, &l); err != nil {
			return err
		}
		if len(l.Files) != 1 {
			return fmt.Errorf("listed %+v (errors %v); want the one file of n1", l.Files, l.Errors)
		}
		f := l.Files[0]
		if f.NodeName != remote.Name() || f.Name != name || f.Job != "job1" || f.PID != 4321 || f.Worker != "0123456789abcdef" || f.Size != int64(content.Len()) || f.Kind != "worker" {
			return fmt.Errorf("listed %+v", f)
		}
		var all wire.LogsList
		if err := call(wire.MethodLogsList, &wire.LogsListRequest{Cluster: true}, &all); err != nil {
			return err
		}
		if len(all.Files) != 2 || all.Files[0].Name != own || all.Files[0].NodeName != nodes[0].Name() || all.Files[0].Actor != "act1" || all.Files[0].Kind != "actor" {
			return fmt.Errorf("unfiltered listing %+v; want n0's actor file, then n1's", all.Files)
		}
		return nil
	})
	var other wire.LogsList
	if err := call(wire.MethodLogsList, &wire.LogsListRequest{Job: "job2", Cluster: true}, &other); err != nil || len(other.Files) != 0 {
		t.Fatalf("job2's listing: %+v, %v; want none", other.Files, err)
	}

	var tail wire.LogsReadReply
	if err := call(wire.MethodLogsRead, &wire.LogsReadRequest{Node: remote.Name(), Name: name, Tail: 3}, &tail); err != nil {
		t.Fatal(err)
	}
	if string(tail.Data) != "line 97\nline 98\nline 99\n" || tail.Next != int64(content.Len()) || tail.NodeName != remote.Name() {
		t.Fatalf("tail 3: %q next %d node %s", tail.Data, tail.Next, tail.NodeName)
	}
	// A range cut mid-line ends at the last whole line; the next read
	// continues from there.
	var part wire.LogsReadReply
	if err := call(wire.MethodLogsRead, &wire.LogsReadRequest{Node: remote.rpcAddr, Name: name, Offset: 7, Limit: 20}, &part); err != nil {
		t.Fatal(err)
	}
	if string(part.Data) != "line 1\nline 2\n" || part.Next != 21 {
		t.Fatalf("range 7+20: %q next %d", part.Data, part.Next)
	}

	// A file over the cap comes back in pieces of at most 1 MiB.
	big := "worker-job1-0123456789abcdef-4322.log"
	if err := os.WriteFile(filepath.Join(remote.workers.logs.dir, big), []byte(strings.Repeat(strings.Repeat("y", 99)+"\n", 15000)), 0o640); err != nil {
		t.Fatal(err)
	}
	var capped wire.LogsReadReply
	if err := call(wire.MethodLogsRead, &wire.LogsReadRequest{Node: remote.Name(), Name: big, Limit: 1 << 30}, &capped); err != nil {
		t.Fatal(err)
	}
	if len(capped.Data) > wire.MaxLogRead || len(capped.Data) < wire.MaxLogRead-100 || capped.Size != 1_500_000 {
		t.Fatalf("read %d bytes of %d; want at most %d", len(capped.Data), capped.Size, wire.MaxLogRead)
	}

	for _, bad := range []string{"", "../" + name, "/etc/passwd", secret, "logs/" + name, "..", "secret.txt", "nodeup.sock", "job1.log", name + "/x"} {
		var r wire.LogsReadReply
		err := call(wire.MethodLogsRead, &wire.LogsReadRequest{Node: remote.Name(), Name: bad}, &r)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != wire.CodeBadInput || !strings.Contains(re.Message, "want worker-") {
			t.Errorf("Logs.Read %q: %v (data %q); want bad_input naming the pattern", bad, err, r.Data)
		}
	}
	var r wire.LogsReadReply
	err := call(wire.MethodLogsRead, &wire.LogsReadRequest{Node: remote.Name(), Name: "worker-job1-0123456789abcdef-1.log"}, &r)
	if re := (*rpc.Error)(nil); !errors.As(err, &re) || re.Code != wire.CodeNotFound {
		t.Errorf("a missing file: %v; want not_found", err)
	}
	err = call(wire.MethodLogsRead, &wire.LogsReadRequest{Node: "no-such-node", Name: name}, &r)
	if re := (*rpc.Error)(nil); !errors.As(err, &re) || re.Code != wire.CodeNotFound {
		t.Errorf("an unknown node: %v; want not_found", err)
	}
	var l wire.LogsList
	if err := call(wire.MethodLogsList, &wire.LogsListRequest{Job: "../x"}, &l); err == nil {
		t.Errorf("Logs.List with job ../x: no error")
	}
}
