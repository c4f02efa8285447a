// Command queue is seed 002's "Message passing using Ray Queue" in Go: a
// queue (maxsize 100) passed to two consumer tasks, fed ten items by the
// driver. It checks the consumers got every item exactly once, in order.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

// consumer takes items until it gets -1 and returns what it got.
var consumer = worker.Register1(func(ctx context.Context, q worker.Queue[int]) ([]int, error) {
	var got []int
	for {
		next, err := q.Get(ctx) // block=True
		if err != nil || next < 0 {
			return got, err
		}
		fmt.Printf("got work %d\n", next)
		got = append(got, next)
	}
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	q, err := worker.NewQueue[int](ctx, 100)
	if err != nil {
		fail("%v", err)
	}
	consumers := []worker.Ref[[]int]{consumer.Remote(ctx, q), consumer.Remote(ctx, q)}
	for i := 0; i < 10; i++ {
		if err := q.Put(ctx, i); err != nil {
			fail("put: %v", err)
		}
	}
	for range consumers {
		_ = q.Put(ctx, -1) // one stop marker per consumer
	}
	var all []int
	for i, c := range consumers {
		got, err := c.Get(ctx)
		if err != nil {
			fail("consumer: %v", err)
		}
		if !sort.IntsAreSorted(got) {
			fail("consumer %d got %v out of order", i, got)
		}
		fmt.Printf("consumer %d got %v\n", i, got)
		all = append(all, got...)
	}
	sort.Ints(all)
	if fmt.Sprint(all) != "[0 1 2 3 4 5 6 7 8 9]" {
		fail("consumers got %v, want each of 0..9 once", all)
	}
	fmt.Println("check: every item consumed exactly once, in FIFO order")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "queue: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
