// Command fateshare is the driver of e2e's fate-sharing tests: it reserves a
// placement group (one bundle of 1 CPU), creates a non-detached actor
// (1 CPU) and a detached named actor (no CPU), starts two tasks (1 CPU each,
// spread over the nodes) and two that need the head's one unit of resource
// "q" (at least one queues), all of which hang, waits until the first two
// write their worker's PID into the directory given as the argument (as
// does a "q" task that runs), writes the file "ready"
// there, and then waits for the test to kill it, or to create the file
// "panic" there, on which it panics. With FATESHARE_OWN_HANDLER=1 it
// handles SIGINT itself (writing the file "got-sigint") and passes
// HandleSignals(false), so its job outlives a SIGINT. It handles no signal
// itself, so SIGINT and SIGTERM reach the SDK's handler.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nodeup/nodeup/worker"
)

// hang writes its worker's PID into dir and never returns.
var hang = worker.Register1(func(ctx context.Context, dir string) (int, error) {
	writeFile(filepath.Join(dir, "task-"+strconv.Itoa(os.Getpid())), "")
	select {} // the test kills the driver; its job's end must stop this worker
})

// Holder is an actor that only says where it runs.
type Holder struct{}

func newHolder(ctx context.Context) (*Holder, error) { return &Holder{}, nil }

func (h *Holder) pid(ctx context.Context) (int, error) { return os.Getpid(), nil }

var (
	holder    = worker.RegisterActor0(newHolder)
	holderPID = worker.RegisterMethod0((*Holder).pid)
)

func main() {
	ctx := context.Background()
	var opts []worker.InitOption
	if os.Getenv("FATESHARE_OWN_HANDLER") == "1" {
		// This program handles SIGINT itself and keeps its job past it.
		opts = append(opts, worker.HandleSignals(false))
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT)
		go func() {
			for range ch {
				writeFile(filepath.Join(os.Args[1], "got-sigint"), "SIGINT")
			}
		}()
	}
	if err := worker.Init(ctx, opts...); err != nil {
		log.Fatal(err)
	}
	if len(os.Args) != 2 {
		log.Fatal("usage: fateshare DIR")
	}
	dir := os.Args[1]
	pg, err := worker.CreatePlacementGroup(ctx, []map[string]float64{{"CPU": 1}}, "PACK")
	if err != nil {
		log.Fatal(err)
	}
	if err := pg.Ready(ctx); err != nil {
		log.Fatal(err)
	}
	owned := worker.Must(worker.Must(holder.Options(worker.CPUs(1), worker.Name("owned"))).Remote(ctx))
	kept := worker.Must(worker.Must(holder.Options(worker.Detached(), worker.Name("kept"))).Remote(ctx))
	for _, h := range []worker.ActorHandle[Holder]{owned, kept} {
		if _, err := holderPID.Remote(ctx, h).Get(ctx); err != nil {
			log.Fatal(err)
		}
	}
	for range 2 {
		_ = worker.Must(hang.Options(worker.CPUs(1), worker.Spread())).Remote(ctx, dir)
	}
	// Two tasks needing the head's one unit of "q" (and a CPU there): at
	// least one queues.
	for range 2 {
		_ = worker.Must(hang.Options(worker.Resources(map[string]float64{"q": 1}))).Remote(ctx, dir)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		m, _ := filepath.Glob(filepath.Join(dir, "task-*"))
		if len(m) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("tasks did not start within a minute: %v", m)
		}
	}
	writeFile(filepath.Join(dir, "ready"), pg.ID())
	fmt.Println("ready; placement group", pg.ID())
	// Until the test kills us, or tells us to panic (the file "panic").
	for ; ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "panic")); err == nil {
			panic("the test asked this driver to panic")
		}
	}
}

// writeFile puts s into path whole (written aside, then renamed).
func writeFile(path, s string) {
	if err := os.WriteFile(path+".tmp", []byte(s), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		log.Fatal(err)
	}
}
