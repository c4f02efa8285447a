// Command colocate is seed 001's co-location example in Go: a writer task
// writes a node-local file and a reader task reads it back; both ask for the
// same node<i> custom resource, so they run on the same node. It checks the
// reader saw what the writer wrote, on every node that offers node<i>.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

var writer = worker.Register1(func(ctx context.Context, path string) (string, error) {
	msg := "written on " + worker.NodeName()
	return worker.NodeName(), os.WriteFile(path, []byte(msg), 0o644)
})

// FileWriter is an actor that keeps writing node-local files; a reader task
// asking for the same node<i> resource runs on its node (seed 001's
// co-location, with an actor and a task).
type FileWriter struct{ writes int }

// NewFileWriter is the actor's constructor.
func NewFileWriter(ctx context.Context) (*FileWriter, error) { return &FileWriter{}, nil }

// Write writes path and returns the node it is on.
func (w *FileWriter) Write(ctx context.Context, path string) (string, error) {
	w.writes++
	msg := fmt.Sprintf("written on %s by an actor (write %d)", worker.NodeName(), w.writes)
	return worker.NodeName(), os.WriteFile(path, []byte(msg), 0o644)
}

var (
	fileWriter = worker.RegisterActor0(NewFileWriter)
	write      = worker.RegisterMethod1((*FileWriter).Write)
)

// reader returns what it read and the node it ran on (two results).
var reader = worker.Register1x2(func(ctx context.Context, path string) (string, string, error) {
	b, err := os.ReadFile(path)
	return string(b), worker.NodeName(), err
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx, worker.EmbeddedResources(map[string]float64{"node0": 2})); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	dir, err := os.MkdirTemp("", "colocate-")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	for i := 0; ; i++ {
		res := worker.Resources(map[string]float64{fmt.Sprintf("node%d", i): 1})
		if !offered(ctx, fmt.Sprintf("node%d", i)) {
			if i == 0 {
				fail("no node offers node0: start nodes with --resources node<i>=2")
			}
			break
		}
		path := filepath.Join(dir, fmt.Sprintf("myfile-%d.tmp", i))
		node, err := worker.Must(writer.Options(res)).Remote(ctx, path).Get(ctx)
		if err != nil {
			fail("writer: %v", err)
		}
		content, where := worker.Must(reader.Options(res)).Remote(ctx, path)
		got, err := content.Get(ctx)
		if err != nil || got != "written on "+node {
			fail("reader on node%d read %q (%v), want %q", i, got, err, "written on "+node)
		}
		if readOn, _ := where.Get(ctx); readOn != node {
			fail("node%d: writer ran on %s but reader on %s", i, node, readOn)
		}
		fmt.Printf("node%d: writer and reader both on %s: %q\n", i, node, got)

		// The same with an actor holding node<i>: 1 for its life.
		w, err := worker.Must(fileWriter.Options(res)).Remote(ctx)
		if err != nil {
			fail("create writer actor: %v", err)
		}
		apath := filepath.Join(dir, fmt.Sprintf("actorfile-%d.tmp", i))
		anode, err := write.Remote(ctx, w, apath).Get(ctx)
		if err != nil {
			fail("writer actor: %v", err)
		}
		content, where = worker.Must(reader.Options(res)).Remote(ctx, apath)
		want := fmt.Sprintf("written on %s by an actor (write 1)", anode)
		if got, err := content.Get(ctx); err != nil || got != want {
			fail("reader of node%d's actor file read %q (%v), want %q", i, got, err, want)
		}
		if readOn, _ := where.Get(ctx); readOn != anode {
			fail("node%d: writer actor on %s but reader on %s", i, anode, readOn)
		}
		fmt.Printf("node%d: writer actor and reader task both on %s\n", i, anode)
		if err := worker.Kill(ctx, w, true); err != nil {
			fail("kill writer actor: %v", err)
		}
	}
	fmt.Println("check: every reader read its writer's file (task and actor writers)")
}

func offered(ctx context.Context, name string) bool {
	nodes, err := worker.Nodes(ctx)
	if err != nil {
		fail("%v", err)
	}
	for _, n := range nodes {
		if n.Alive && n.Total[name] > 0 {
			return true
		}
	}
	return false
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "colocate: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
