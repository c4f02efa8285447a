package cli

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

func TestReorderArgsMovesFlagsBeforePeers(t *testing.T) {
	t.Parallel()
	app := App()
	cases := []struct{ in, want []string }{
		{[]string{"nodeup", "join", "10.0.0.1", "--resources", "TPU-v3=2", "--server=false"},
			[]string{"nodeup", "join", "--resources", "TPU-v3=2", "--server=false", "--", "10.0.0.1"}},
		{[]string{"nodeup", "--log-level", "debug", "join", "a", "b", "--server", "--port", "1"},
			[]string{"nodeup", "--log-level", "debug", "join", "--server", "--port", "1", "--", "a", "b"}},
		{[]string{"nodeup", "kv", "put", "k", "v", "--address", "h:1"},
			[]string{"nodeup", "kv", "put", "--address", "h:1", "--", "k", "v"}},
		{[]string{"nodeup", "status", "--json"}, []string{"nodeup", "status", "--json"}},
		{[]string{"nodeup", "kv", "put", "--", "-k", "v"}, []string{"nodeup", "kv", "put", "--", "-k", "v"}},
	}
	for _, tc := range cases {
		if got := reorderArgs(app, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("reorderArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	t.Parallel()
	good := map[string]int64{"1024": 1024, "8GiB": 8 << 30, "2G": 2 << 30, "500MB": 500e6, "1 KiB": 1024, "0": 0}
	for in, want := range good {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1", "1.5G", "8XB", "99999999999TiB"} {
		if _, err := parseBytes(in); err == nil || !strings.Contains(err.Error(), in) {
			t.Errorf("parseBytes(%q): error %v should name the value", in, err)
		}
	}
}

func TestParseLabels(t *testing.T) {
	t.Parallel()
	got, err := parseLabels(" zone=rack1, gpu = a100 ,empty=")
	if err != nil || got["zone"] != "rack1" || got["gpu"] != "a100" || got["empty"] != "" || len(got) != 3 {
		t.Fatalf("parseLabels: %v %v", got, err)
	}
	for _, in := range []string{"zone", "=x", "a=1,a=2"} {
		if _, err := parseLabels(in); err == nil {
			t.Errorf("parseLabels(%q) accepted", in)
		}
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	// Not parallel: Run sets the process-wide slog default.
	for _, args := range [][]string{
		{"nodeup", "start", "--head", "--resources", "CPU=4"},
		{"nodeup", "start", "--head", "--resources", "node:x=1"},
		{"nodeup", "start", "--head", "--num-cpus", "-2"},
		{"nodeup", "start", "--head", "--raft-voters", "0"},
		{"nodeup", "start", "extra-arg"},
		{"nodeup", "nosuchverb"},
	} {
		if code := Run(append(args, "--data-dir", t.TempDir())); code == 0 {
			t.Errorf("%q exited 0", args)
		}
	}
}

func TestStatusTableEndsWithClusterUsage(t *testing.T) {
	t.Parallel()
	st := &wire.StatusResponse{ClusterName: "lab", ClusterID: "0123456789abcdef", LeaderID: "aaaaaaaaaaaa", LeaderName: "n0",
		Servers: []wire.RaftServer{{ID: "aaaaaaaaaaaa", Name: "n0", Suffrage: "voter"}},
		Nodes: []wire.NodeView{{Node: store.Node{ID: "aaaaaaaaaaaa", Name: "n0", Status: store.NodeAlive,
			Resources: sched.ResourceSet{sched.CPU: sched.QuantityOf(4), "TPU-v3": sched.QuantityOf(2)}},
			Available: sched.ResourceSet{sched.CPU: sched.QuantityOf(1), "TPU-v3": sched.QuantityOf(2)}}},
		Total:     sched.ResourceSet{sched.CPU: sched.QuantityOf(4), "TPU-v3": sched.QuantityOf(2), sched.Memory: sched.QuantityOf(2 << 30)},
		Available: sched.ResourceSet{sched.CPU: sched.QuantityOf(1), "TPU-v3": sched.QuantityOf(2), sched.Memory: sched.QuantityOf(1 << 30)},
	}
	var b bytes.Buffer
	printStatus(&b, st)
	out := b.String()
	for _, want := range []string{"Cluster lab (01234567)", "CPU 1/4, TPU-v3 2/2", " 3/4 CPU", " 0/2 TPU-v3", " 1.0GiB/2.0GiB memory"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "(no resource demands)") {
		t.Errorf("status does not end with the demands:\n%s", out)
	}
	st.Pending = []wire.PendingDemand{{Resources: sched.ResourceSet{"TPU-v3": sched.QuantityOf(3)}, Count: 1, TaskName: "train",
		Reason: "no single node has TPU-v3 3: the most any alive node has is 2"}}
	b.Reset()
	printStatus(&b, st)
	if want := "{TPU-v3=3}: 1+ pending e.g. train: no single node has TPU-v3 3"; !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
	}
}

// TestVersionFlag: `nodeup --version` and `-v` print what `nodeup version`
// prints (they used to fail with "nodeup: nodeup nodeup: flag provided but
// not defined: -version"), and an unknown global flag names itself once.
func TestVersionFlag(t *testing.T) {
	// Not parallel: Run sets the process-wide slog default.
	for _, args := range [][]string{{"nodeup", "--version"}, {"nodeup", "-v"}, {"nodeup", "version"}} {
		app := App()
		var out bytes.Buffer
		app.Writer = &out
		if err := app.Run(reorderArgs(app, args)); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if want := "nodeup " + Version + "\n"; out.String() != want {
			t.Errorf("%q printed %q, want %q", args, out.String(), want)
		}
	}
	app := App()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	err := app.Run([]string{"nodeup", "--nosuch"})
	if want := "flag provided but not defined: -nosuch (see 'nodeup --help')"; err == nil || err.Error() != want {
		t.Errorf("nodeup --nosuch: %v, want %q", err, want)
	}
}
