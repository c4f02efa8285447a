// Command gpus is seeds 000 and 002's GPU use in Go: whole-GPU, two-GPU and
// fractional-GPU tasks, and tasks that target an H100 with the
// accelerator_type:H100 resource. Each task prints the CUDA_VISIBLE_DEVICES
// its worker got (and GPUIDs, seed 002's ray.get_gpu_ids()); the example
// then checks that every task saw exactly as many devices as it asked for,
// that those devices exist on its node, and that no device was ever
// over-committed (the GPU fractions running on it at once never exceed 1).
// No real GPU is needed: the nodes declare theirs.
//
//	go run ./examples/gpus        # embedded node declaring 4 H100s
//	nodeup start --head --num-gpus 4 --gpu-model H100 & NODEUP_ADDRESS=127.0.0.1:7370 bin/gpus
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

// Use is what one task saw of its GPUs, and when it held them.
type Use struct {
	Label      string
	GPU        float64 // GPUs the task asked for
	Node       string
	CUDA       string // CUDA_VISIBLE_DEVICES in its worker
	IDs        []int  // worker.GPUIDs
	Start, End int64  // unix nanoseconds, on the node's clock
}

var useGPU = worker.Register2(func(ctx context.Context, label string, gpus float64) (Use, error) {
	u := Use{Label: label, GPU: gpus, Node: worker.NodeName(), CUDA: os.Getenv("CUDA_VISIBLE_DEVICES"), Start: time.Now().UnixNano()}
	ids, err := worker.GPUIDs(ctx)
	if err != nil {
		return u, err
	}
	u.IDs = ids
	time.Sleep(150 * time.Millisecond) // "train" on the devices
	u.End = time.Now().UnixNano()
	return u, nil
})

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx, worker.EmbeddedGPUs(4, "H100"), worker.EmbeddedResources(map[string]float64{"CPU": 4})); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()

	nodes, err := worker.Nodes(ctx)
	if err != nil {
		fail("%v", err)
	}
	capacity := map[string]int{}
	for _, n := range nodes {
		if g := n.Total["GPU"]; n.Alive && g > 0 {
			capacity[n.NodeName] = int(g)
			fmt.Printf("node %s: %d GPUs, accelerator_type:H100=%v\n", n.NodeName, capacity[n.NodeName], n.Total["accelerator_type:H100"])
		}
	}
	if len(capacity) == 0 {
		fail("no node has GPUs: start nodes with --num-gpus 4 --gpu-model H100")
	}

	type job struct {
		label string
		gpus  float64
		opts  []worker.Option
	}
	var jobs []job
	for i := 0; i < 6; i++ {
		jobs = append(jobs, job{"whole-" + strconv.Itoa(i), 1, nil})
	}
	for i := 0; i < 2; i++ {
		jobs = append(jobs, job{"pair-" + strconv.Itoa(i), 2, nil})
	}
	for i := 0; i < 8; i++ {
		jobs = append(jobs, job{"half-" + strconv.Itoa(i), 0.5, nil})
	}
	for i := 0; i < 8; i++ {
		jobs = append(jobs, job{"quarter-" + strconv.Itoa(i), 0.25, nil})
	}
	for i := 0; i < 2; i++ {
		jobs = append(jobs, job{"h100-" + strconv.Itoa(i), 1, []worker.Option{worker.Resources(map[string]float64{"accelerator_type:H100": 0.001})}})
	}
	var refs []worker.Ref[Use]
	for _, j := range jobs {
		opts := append([]worker.Option{worker.GPUs(j.gpus), worker.CPUs(0)}, j.opts...)
		f, err := useGPU.Options(opts...)
		if err != nil {
			log.Fatalf("%s: %v", j.label, err)
		}
		refs = append(refs, f.Remote(ctx, j.label, j.gpus))
	}
	uses, err := worker.GetAll(ctx, refs)
	if err != nil {
		fail("%v", err)
	}
	for _, u := range uses {
		fmt.Printf("%-10s GPU=%-4v on %s: CUDA_VISIBLE_DEVICES=%s\n", u.Label, u.GPU, u.Node, u.CUDA)
		want := max(1, int(u.GPU))
		if len(u.IDs) != want || u.CUDA != join(u.IDs) {
			fail("%s asked for %v GPUs and saw CUDA_VISIBLE_DEVICES=%q (GPUIDs %v): want %d device(s)", u.Label, u.GPU, u.CUDA, u.IDs, want)
		}
		for _, id := range u.IDs {
			if id < 0 || id >= capacity[u.Node] {
				fail("%s saw device %d, but node %s has %d GPUs", u.Label, id, u.Node, capacity[u.Node])
			}
		}
	}
	peaks := peakPerDevice(uses)
	keys := make([]string, 0, len(peaks))
	for k := range peaks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("device %s: at most %.2f GPU in use at once\n", k, float64(peaks[k])/100)
		if peaks[k] > 100 {
			fail("device %s was over-committed: %.2f GPUs in use at once", k, float64(peaks[k])/100)
		}
	}
	fmt.Printf("check: %d GPU tasks each saw exactly their devices; no device was over-committed\n", len(uses))
}

// peakPerDevice is the most GPU (in hundredths) in use at one instant on
// each node's device, keyed "node/index".
func peakPerDevice(uses []Use) map[string]int {
	type ev struct {
		at    int64
		delta int
	}
	byDev := map[string][]ev{}
	for _, u := range uses {
		share := int(min(u.GPU, 1) * 100)
		for _, id := range u.IDs {
			k := u.Node + "/" + strconv.Itoa(id)
			byDev[k] = append(byDev[k], ev{u.Start, share}, ev{u.End, -share})
		}
	}
	out := map[string]int{}
	for k, evs := range byDev {
		sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at || evs[i].at == evs[j].at && evs[i].delta < 0 })
		cur := 0
		for _, e := range evs {
			cur += e.delta
			out[k] = max(out[k], cur)
		}
	}
	return out
}

func join(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gpus: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
