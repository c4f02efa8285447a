package worker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
)

// Environment variables an embedded node (Init with no cluster running)
// reads to declare GPUs, as EmbeddedGPUs does: NODEUP_NUM_GPUS=4
// NODEUP_GPU_MODEL=H100 go run ./examples/gpus.
const (
	EnvNumGPUs  = "NODEUP_NUM_GPUS"
	EnvGPUModel = "NODEUP_GPU_MODEL"
)

// GPUIDs returns the GPUs the running task or actor may use: the CUDA
// device indices the node gave its worker process in CUDA_VISIBLE_DEVICES,
// in the order listed (seed 002's ray.get_gpu_ids()). A task or actor that
// asked for no GPU, and a driver, get an empty list. Several tasks pipelined
// on one worker process share its devices, and fractional tasks on one
// device all see that device. Errors: ErrNotInitialized before Init; an
// entry that is not a device index (a process that rewrote
// CUDA_VISIBLE_DEVICES with UUIDs) is an error naming it.
func GPUIDs(ctx context.Context) ([]int, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	if !cw.isWorker {
		return []int{}, nil
	}
	return parseGPUIDs(os.Getenv("CUDA_VISIBLE_DEVICES"))
}

// parseGPUIDs reads a CUDA_VISIBLE_DEVICES value: "" or "0,3".
func parseGPUIDs(s string) ([]int, error) {
	ids := []int{}
	if strings.TrimSpace(s) == "" {
		return ids, nil
	}
	for _, part := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("CUDA_VISIBLE_DEVICES=%q: entry %q is not a device index (0, 1, ...)", s, part)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// GPUMemory asks for bytes of GPU memory on one device instead of (or with)
// a GPU count: the task or actor lands on a device with that much memory
// unreserved, and reserves that share of the device (Ray's _gpu_memory /
// gpu_memory resource). Nodes offer gpu_memory when they know their devices'
// memory (detected GPUs; declared ones with --gpu-memory). Negative bytes
// are an error naming the value.
func GPUMemory(bytes int64) Option {
	return func(o *taskOptions) error {
		if bytes < 0 {
			return fmt.Errorf("option GPUMemory %d: must not be negative (bytes)", bytes)
		}
		return setQuantity(o, gpu.MemoryResource, float64(bytes))
	}
}

// demandsGPU reports whether a resource demand asks for GPUs or GPU memory.
// Such tasks are not pipelined several to a lease: each runs on a lease of
// its own, so tasks running at once hold distinct devices (or distinct
// shares of one), and a backlog spreads over every free device instead of
// queueing behind the first lease.
func demandsGPU(r sched.ResourceSet) bool { return r[sched.GPU] != 0 || r[gpu.MemoryResource] != 0 }

// EmbeddedGPUs declares n GPUs of model ("H100", or a full product name)
// on the embedded node Init starts when no cluster is running, as `nodeup
// start --num-gpus n --gpu-model model`; no real GPU is needed. It is
// ignored when Init connects to a running node. Without it the embedded
// node reads NODEUP_NUM_GPUS and NODEUP_GPU_MODEL, and without those it
// detects GPUs (NVML helper when built in, then nvidia-smi).
func EmbeddedGPUs(n int, model string) InitOption {
	return func(c *initConfig) { c.gpus = &gpuDecl{count: n, model: model} }
}

// gpuDecl is a GPU declaration for the embedded node (EmbeddedGPUs).
type gpuDecl struct {
	count int
	model string
}

// embeddedGPUs sets the embedded node's GPUs in spec: EmbeddedGPUs, else
// the environment, else detection. A malformed NODEUP_NUM_GPUS is an error
// naming it.
func (c initConfig) embeddedGPUs(spec *EmbeddedSpec) error {
	d := c.gpus
	if d == nil {
		s := strings.TrimSpace(os.Getenv(EnvNumGPUs))
		model := strings.TrimSpace(os.Getenv(EnvGPUModel))
		if s == "" {
			if model != "" {
				return fmt.Errorf("nodeup: %s=%q without %s: set the number of GPUs to declare too", EnvGPUModel, model, EnvNumGPUs)
			}
			return nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("nodeup: %s=%q: must be a whole number, 0 or more", EnvNumGPUs, s)
		}
		d = &gpuDecl{count: n, model: model}
	}
	spec.DeclareGPUs, spec.NumGPUs, spec.GPUModel = true, d.count, d.model
	return nil
}
