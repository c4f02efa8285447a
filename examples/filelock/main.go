// Command filelock is seed 002's "Inter-process synchronization using
// FileLock" in Go: three tasks on one node append "hi there!" to one file,
// serialized by a file lock (github.com/gofrs/flock, a well-kept Go
// file-lock library). The tasks are pinned to the driver's node with node
// affinity, since the file is node-local. It checks the file holds exactly
// three whole lines.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/gofrs/flock"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

var writeToFile = worker.Register2(func(ctx context.Context, path, text string) (bool, error) {
	lock := flock.New(path + ".lock") // an absolute path for the lock, as the seed advises
	if err := lock.Lock(); err != nil {
		return false, err
	}
	defer lock.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return false, err
	}
	defer f.Close()
	// Write in two pieces: without the lock, concurrent writers could interleave.
	half := len(text) / 2
	if _, err := f.WriteString(text[:half]); err != nil {
		return false, err
	}
	_, err = f.WriteString(text[half:])
	return true, err
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	dir, err := os.MkdirTemp("", "filelock-")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "my_data.txt")
	here := worker.NodeAffinity(worker.NodeID(), false)
	var refs []worker.Ref[bool]
	for i := 0; i < 3; i++ {
		refs = append(refs, worker.Must(writeToFile.Options(here)).Remote(ctx, path, "hi there!\n"))
	}
	if _, err := worker.GetAll(ctx, refs); err != nil {
		fail("%v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	fmt.Print(string(b))
	if string(b) != strings.Repeat("hi there!\n", 3) {
		fail("file holds %q, want three whole lines", b)
	}
	fmt.Println("check: three writers, three whole lines")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "filelock: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
