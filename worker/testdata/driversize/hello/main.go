// Command hello is the hello-world driver whose size TestDriverSizeBound
// bounds: one remote function, Init, one call, Shutdown; it imports only
// the SDK (no embedded node).
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/nodeup/nodeup/worker"
)

var hello = worker.Register1(func(ctx context.Context, name string) (string, error) {
	return "hello, " + name, nil
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	s, err := hello.Remote(ctx, "world").Get(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s)
}
