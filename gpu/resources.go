package gpu

import (
	"fmt"
	"strings"

	"github.com/nodeup/nodeup/sched"
)

// Resources returns the node resources devs provide, as Ray names them:
//
//	GPU                      = len(devs) (whole units)
//	accelerator_type:<model> = 1 for each distinct Device.Model
//	gpu_memory               = sum of Device.MemoryBytes, in bytes
//
// Ray sets accelerator_type for the node's single GPU model; a node with
// mixed models gets one entry per model here. gpu_memory is left out when no
// device knows its memory size, and the whole set is empty for no devices.
// Pass only the devices that may be scheduled (Supervisor.Resources does).
func Resources(devs []Device) sched.ResourceSet {
	r := sched.ResourceSet{}
	if len(devs) == 0 {
		return r
	}
	r[sched.GPU] = sched.QuantityOf(int64(len(devs)))
	var mem uint64
	for _, d := range devs {
		if d.Model != "" {
			r[sched.AcceleratorTypeResource(d.Model)] = sched.Unit
		}
		mem += d.MemoryBytes
	}
	if mem > 0 {
		r[MemoryResource] = sched.QuantityOf(int64(min(mem, uint64(sched.MaxQuantity/sched.Unit))))
	}
	return r
}

// Declared returns n devices declared on the command line (--num-gpus N
// --gpu-model NAME), used instead of detection: indices 0..n-1, no UUIDs,
// Name as given, Model = ShortModel(name) (a name that is already short,
// "H100", stays as it is; an empty name gives no accelerator_type resource),
// and MemoryBytes = memBytes each (0 when unknown: then the node offers no
// gpu_memory). n = 0 declares a node without GPUs. A negative n is an error
// naming it.
func Declared(n int, name string, memBytes uint64) ([]Device, error) {
	if n < 0 {
		return nil, fmt.Errorf("--num-gpus %d: must be 0 or more", n)
	}
	name = strings.TrimSpace(name)
	devs := make([]Device, n)
	for i := range devs {
		devs[i] = Device{Index: i, Name: name, Model: ShortModel(name), MemoryBytes: memBytes}
	}
	return devs, nil
}
