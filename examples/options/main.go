// Command options is seed 002's "dynamic options" in Go: the same remote
// function called with different resources and names per call, and a
// function of two results whose call returns two refs (num_returns=2).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

var where = worker.Register1(func(ctx context.Context, tag string) (string, error) {
	return tag + "@" + worker.NodeName(), nil
})

// f returns two values: Remote gives two refs.
var f = worker.Register1x2(func(ctx context.Context, n int) (int, int, error) { return n, n * 10, nil })

var fails = worker.Register1(func(ctx context.Context, n int) (int, error) { return 0, fmt.Errorf("refusing %d", n) })

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx, worker.EmbeddedResources(map[string]float64{"CPU": 4, "Custom1": 1, "Custom2": 1})); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	total, err := worker.ClusterResources(ctx)
	if err != nil {
		fail("%v", err)
	}
	for _, o := range []struct {
		tag, needs string
		opts       []worker.Option
	}{
		{"1cpu-custom1", "Custom1", []worker.Option{worker.CPUs(1), worker.Resources(map[string]float64{"Custom1": 1})}},
		{"2cpu-custom2", "Custom2", []worker.Option{worker.CPUs(2), worker.Resources(map[string]float64{"Custom2": 1})}},
		{"half-cpu", "CPU", []worker.Option{worker.CPUs(0.5)}},
	} {
		if total[o.needs] == 0 {
			fmt.Printf("%s: skipped (no node offers %s)\n", o.tag, o.needs)
			continue
		}
		f, err := where.Options(o.opts...)
		if err != nil {
			fail("%s: %v", o.tag, err)
		}
		got, err := f.Remote(ctx, o.tag).Get(ctx)
		if err != nil {
			fail("%s: %v", o.tag, err)
		}
		fmt.Println("ran", got)
	}
	id1, id2 := f.Remote(ctx, 2)
	a, err1 := id1.Get(ctx)
	b, err2 := id2.Get(ctx)
	if err1 != nil || err2 != nil || a != 2 || b != 20 {
		fail("two returns: %d, %d (%v, %v), want 2, 20", a, b, err1, err2)
	}
	fmt.Printf("num_returns=2: %d %d\n", a, b)
	_, err = worker.Must(fails.Options(worker.Name("special_f"))).Remote(ctx, 3).Get(ctx)
	var te *worker.TaskError
	if !errors.As(err, &te) || te.TaskName != "special_f" {
		fail("named task error: %v", err)
	}
	fmt.Println("named task failed as expected:", err)
	fmt.Println("check: per-call options, two return values and task names behave")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "options: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
