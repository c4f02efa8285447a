// Command signal is seed 002's "Multi-node synchronization using
// SignalActor" in Go: four tasks wait on a signal until the driver sends it.
// It checks none went before the send and all went after it.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

// waitAndGo waits for the signal, then says go and when.
var waitAndGo = worker.Register1(func(ctx context.Context, s worker.Signal) (int64, error) {
	if err := s.Wait(ctx); err != nil {
		return 0, err
	}
	fmt.Printf("(pid=%d) go!\n", os.Getpid())
	return time.Now().UnixNano(), nil
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	signal, err := worker.NewSignal(ctx)
	if err != nil {
		fail("%v", err)
	}
	var tasks []worker.Ref[int64]
	for i := 0; i < 4; i++ {
		tasks = append(tasks, worker.Must(waitAndGo.Options(worker.Spread())).Remote(ctx, signal))
	}
	// Tasks will all be waiting for the signal.
	fmt.Println("ready...")
	if ready, _, _ := worker.Wait(ctx, tasks, len(tasks), 500*time.Millisecond); len(ready) > 0 {
		fail("%d tasks went before the signal", len(ready))
	}
	fmt.Println("get set..")
	sent := time.Now().UnixNano()
	if err := signal.Send(ctx, false); err != nil {
		fail("send: %v", err)
	}
	// Tasks are unblocked.
	went, err := worker.GetAll(ctx, tasks)
	if err != nil {
		fail("%v", err)
	}
	for i, at := range went {
		if at < sent {
			fail("task %d went at %d, before the send at %d", i, at, sent)
		}
	}
	fmt.Println("check: all 4 tasks waited for the signal and went after it")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "signal: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
