// Command counter is the Counter actor of seeds 003 and 004 in Go: a
// stateful remote object whose method calls from one caller run in order.
// It creates a counter, increments it five times, reads it, passes its handle
// to a task that increments it too, and checks every value it saw.
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

// Counter is the actor's state; its exported methods registered below are
// its remote methods.
type Counter struct{ value int }

// NewCounter is the actor's constructor.
func NewCounter(ctx context.Context) (*Counter, error) { return &Counter{}, nil }

// Increment adds one and returns the new value.
func (c *Counter) Increment(ctx context.Context) (int, error) {
	c.value++
	return c.value, nil
}

// Value returns the current value.
func (c *Counter) Value(ctx context.Context) (int, error) { return c.value, nil }

var (
	counterActor = worker.RegisterActor0(NewCounter)
	increment    = worker.RegisterMethod0((*Counter).Increment)
	value        = worker.RegisterMethod0((*Counter).Value)
)

// bump is a task that uses a counter handle passed to it (seed 003: handles
// can be passed to other tasks).
var bump = worker.Register2(func(ctx context.Context, c worker.ActorHandle[Counter], times int) (int, error) {
	var last int
	for i := 0; i < times; i++ {
		v, err := increment.Remote(ctx, c).Get(ctx)
		if err != nil {
			return 0, err
		}
		last = v
	}
	return last, nil
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()

	counter, err := counterActor.Remote(ctx)
	if err != nil {
		fail("create counter: %v", err)
	}
	var refs []worker.Ref[int]
	for i := 0; i < 5; i++ {
		refs = append(refs, increment.Remote(ctx, counter))
	}
	got, err := worker.GetAll(ctx, refs)
	if err != nil {
		fail("increment: %v", err)
	}
	fmt.Println("increments returned", got)
	for i, v := range got {
		if v != i+1 {
			fail("increment %d returned %d, want %d (calls from one caller run in order)", i, v, i+1)
		}
	}
	v, err := value.Remote(ctx, counter).Get(ctx)
	if err != nil || v != 5 {
		fail("value = %d (%v), want 5", v, err)
	}
	last, err := bump.Remote(ctx, counter, 3).Get(ctx)
	if err != nil || last != 8 {
		fail("a task bumping the counter 3 times saw %d (%v), want 8", last, err)
	}
	fmt.Println("a task holding the handle took the counter to", last)
	fmt.Println("check: counter state kept across calls and callers")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "counter: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
