// Package worker is nodeup's Go SDK and core worker: the library linked into
// drivers and worker processes, as Ray's ray.init / ray.get / ray.put and
// @ray.remote (DESIGN: Ray keeps these in its own worker module).
//
// Register remote functions at package level, so the same binary re-executed
// as a worker finds them, then call Init in main:
//
//	var square = worker.Register1(func(ctx context.Context, x int) (int, error) {
//		return x * x, nil
//	})
//
//	func main() {
//		ctx := context.Background()
//		if err := worker.Init(ctx); err != nil {
//			log.Fatal(err)
//		}
//		defer worker.Shutdown()
//		refs := []worker.Ref[int]{}
//		for i := 0; i < 4; i++ {
//			refs = append(refs, square.Remote(ctx, i))
//		}
//		out, err := worker.GetAll(ctx, refs) // [0 1 4 9]
//	}
//
// In a worker process (started by a node with NODEUP_WORKER=1), Init does not
// return: it serves tasks until the node stops the worker.
package worker
