package gpu_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
)

// How the node daemon uses the package: start the supervisor, add its
// resources to the node's, assign devices for a lease, start the worker with
// the assignment's environment, release when the lease ends.
func Example() {
	// --num-gpus 2 --gpu-model H100 declares devices; leave Declare false to
	// detect them (helper, then nvidia-smi, then none).
	devs, _ := gpu.Declared(2, "NVIDIA H100 80GB HBM3", 80<<30)
	sup, err := gpu.Start(context.Background(), gpu.Config{
		DataDir:  os.TempDir(),
		Logger:   slog.New(slog.DiscardHandler),
		Declare:  true,
		Declared: devs,
		OnHealth: func(ev gpu.HealthEvent) {
			// Recompute the node's totals from sup.Resources() and report them.
		},
	})
	if err != nil {
		panic(err)
	}
	defer sup.Stop()

	node := sched.ResourceSet{sched.CPU: sched.QuantityOf(16)}
	node.Add(sup.Resources())
	fmt.Println(node)

	// A lease's demand: half a GPU.
	demand := sched.ResourceSet{sched.CPU: sched.Unit, sched.GPU: sched.Unit / 2}
	as, err := sup.Allocator().Assign(gpu.RequestFrom(demand))
	if err != nil {
		panic(err) // errors.Is(err, gpu.ErrUnavailable): queue; gpu.ErrInfeasible: infeasible
	}
	fmt.Println(as.Env())
	fmt.Println(sup.Allocator().Available())
	_ = sup.Allocator().Release(as) // when the task ends or the actor dies

	var none *gpu.Assignment // a worker without GPUs
	fmt.Println(none.Env())
	// Output:
	// CPU=16, GPU=2, accelerator_type:H100=1, gpu_memory=171798691840
	// [CUDA_VISIBLE_DEVICES=0 NVIDIA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID]
	// GPU=1.5, gpu_memory=128849018880
	// [CUDA_VISIBLE_DEVICES= NVIDIA_VISIBLE_DEVICES= CUDA_DEVICE_ORDER=PCI_BUS_ID]
}
