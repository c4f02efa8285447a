package worker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/wire"
)

// printTask prints s to its worker's stdout and says where it ran.
var printTask = Register1(func(ctx context.Context, s string) (string, error) {
	fmt.Println(s)
	return NodeName(), nil
})

// printerActor prints what it is told, as a user's actor.
type printerActor struct{}

func (*printerActor) Print(ctx context.Context, s string) (int, error) {
	fmt.Println(s)
	return os.Getpid(), nil
}

var (
	printerClass = RegisterActor0(func(context.Context) (*printerActor, error) { return &printerActor{}, nil })
	printCall    = RegisterMethod1((*printerActor).Print)
)

// A driver whose tasks print on two nodes sees their lines on its stdout,
// each prefixed (task pid=… node=…); Shutdown stops the poller promptly.
func TestLogToDriverPrintsTaskOutputOfTwoNodes(t *testing.T) {
	var out testutil.SyncBuffer
	prev := driverLogOutput
	driverLogOutput = &out
	t.Cleanup(func() { driverLogOutput = prev })
	nodes := startCluster(t, 2, nil)
	ctx := ctxT(t)
	for i := range 2 {
		node := fmt.Sprintf("node%d", i)
		where, err := Must(printTask.Options(Resources(map[string]float64{node: 1}))).Remote(ctx, "hello from "+node).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if where != nodes[i].Name() {
			t.Fatalf("the task for %s ran on %s", node, where)
		}
	}
	h, err := Must(printerClass.Options(Resources(map[string]float64{"node1": 1}))).Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	actorPID, err := printCall.Remote(ctx, h, "hello from an actor").Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 30*time.Second, "both tasks' and the actor's lines on the driver's stdout", func() error {
		s := out.String()
		if want := fmt.Sprintf("(printerActor pid=%d node=%s) hello from an actor\n", actorPID, nodes[1].Name()); !strings.Contains(s, want) {
			return fmt.Errorf("stdout %q; want the actor's line ending %q", s, want)
		}
		for i := range 2 {
			want := fmt.Sprintf(" node=%s) hello from node%d\n", nodes[i].Name(), i)
			if !strings.Contains(s, want) || !strings.Contains(s, "(task pid=") {
				return fmt.Errorf("stdout %q; want a line (task pid=…%s", s, want)
			}
		}
		return nil
	})
	t.Logf("driver stdout:\n%s", out.String())
	start := time.Now()
	Shutdown()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Shutdown took %v", d)
	}
	before := out.String()
	time.Sleep(2 * logToDriverInterval) // nothing may print after Shutdown
	if after := out.String(); after != before {
		t.Fatalf("printed after Shutdown: %q", after[len(before):])
	}
}

// With LogToDriver(false) nothing is streamed.
func TestLogToDriverOff(t *testing.T) {
	var out testutil.SyncBuffer
	prev := driverLogOutput
	driverLogOutput = &out
	t.Cleanup(func() { driverLogOutput = prev })
	startClusterInit(t, 1, nil, LogToDriver(false))
	ctx := ctxT(t)
	if _, err := printTask.Remote(ctx, "not for the driver").Get(ctx); err != nil {
		t.Fatal(err)
	}
	Shutdown() // its final poll would print the line, were it on
	if s := out.String(); s != "" {
		t.Fatalf("streamed %q with LogToDriver(false)", s)
	}
}

// Identical lines of several processes in one poll are printed once with
// their count; one process's repeated line is printed each time.
func TestLogToDriverDeduplicates(t *testing.T) {
	var out strings.Builder
	s := &logStreamer{out: &out}
	a := wire.LogFile{Kind: "worker", Name: "worker-j-0123456789abcdef-1.log", PID: 1, NodeName: "n0", Addr: "a"}
	b := wire.LogFile{Kind: "actor", Class: "Counter", Name: "actor-x-0123456789abcdef-2.log", PID: 2, NodeName: "n1", Addr: "b"}
	for _, l := range []logLine{{a, "same"}, {a, "own"}, {b, "same"}, {a, "own"}, {b, "same"}} {
		s.batch = append(s.batch, l)
	}
	s.print()
	want := "(task pid=1 node=n0) same [repeated 3x across cluster]\n(task pid=1 node=n0) own\n(task pid=1 node=n0) own\n"
	if out.String() != want {
		t.Fatalf("printed %q; want %q", out.String(), want)
	}
}
