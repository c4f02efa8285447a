package gpu

import "time"

// MemoryResource is the node resource holding the total memory of the node's
// healthy GPUs in bytes (sched.QuantityOf(bytes)), Ray's "gpu_memory". A
// request for it lands on one device with that much unreserved memory.
const MemoryResource = "gpu_memory"

// Device is one GPU as detected (or declared) on this node.
type Device struct {
	// Index is the NVML device index (0-based), the order nvidia-smi lists
	// devices in. It is also the CUDA device ordinal when
	// CUDA_DEVICE_ORDER=PCI_BUS_ID, which Assignment.Env sets.
	Index int `msgpack:"index" json:"index"`
	// UUID is NVML's stable identifier ("GPU-8f3c…"); empty for declared
	// devices, which were never detected.
	UUID string `msgpack:"uuid" json:"uuid,omitempty"`
	// Name is the full product name as NVML reports it
	// ("NVIDIA H100 80GB HBM3").
	Name string `msgpack:"name" json:"name"`
	// Model is ShortModel(Name) ("H100"), the <model> of the node's
	// accelerator_type:<model> resource.
	Model string `msgpack:"model" json:"model"`
	// MemoryBytes is the device's total framebuffer memory in bytes; 0 when
	// unknown (declared devices without a memory size).
	MemoryBytes uint64 `msgpack:"memory_bytes" json:"memory_bytes"`
	// PCIBusID is the PCI address ("00000000:3B:00.0"); empty when unknown.
	PCIBusID string `msgpack:"pci_bus_id,omitempty" json:"pci_bus_id,omitempty"`
}

// Unknown is the value of an integer telemetry field the source could not
// measure (NVML_ERROR_NOT_SUPPORTED, nvidia-smi "[N/A]").
const Unknown = -1

// Sample is one telemetry reading of one device.
type Sample struct {
	// Index is the device's NVML index, as in Device.
	Index int `msgpack:"index" json:"index"`
	// UUID is the device's UUID, as in Device.
	UUID string `msgpack:"uuid" json:"uuid,omitempty"`
	// At is when the reading was taken (the helper's or nvidia-smi's clock,
	// which is this machine's).
	At time.Time `msgpack:"at" json:"at"`
	// UtilizationPercent is the percentage of the last sample period (1/6 s
	// to 1 s, driver-defined) in which a kernel ran: 0..100, or Unknown.
	UtilizationPercent int `msgpack:"util_pct" json:"utilization_percent"`
	// MemoryUsedBytes is the framebuffer memory in use in bytes, or
	// Unknown when it could not be read.
	MemoryUsedBytes int64 `msgpack:"mem_used" json:"memory_used_bytes"`
	// MemoryTotalBytes is the device's framebuffer memory in bytes.
	MemoryTotalBytes uint64 `msgpack:"mem_total" json:"memory_total_bytes"`
	// TemperatureC is the GPU core temperature in degrees Celsius, or Unknown.
	TemperatureC int `msgpack:"temp_c" json:"temperature_c"`
	// PowerWatts is the board power draw in watts (NVML reports milliwatts),
	// or a negative number when unknown.
	PowerWatts float64 `msgpack:"power_w" json:"power_watts"`
	// Processes are the compute and graphics processes using the device.
	Processes []Process `msgpack:"procs,omitempty" json:"processes,omitempty"`
}

// Process is one process using a device.
type Process struct {
	// PID is the process ID as NVML sees it (the host PID namespace when the
	// helper runs in it).
	PID int `msgpack:"pid" json:"pid"`
	// UsedMemoryBytes is the device memory the process holds in bytes, or
	// Unknown (NVML cannot tell under some virtualization modes).
	UsedMemoryBytes int64 `msgpack:"mem" json:"used_memory_bytes"`
	// Foreign is true for a process nodeup did not start: neither the node
	// daemon nor any descendant of it (its workers). The Supervisor sets it;
	// the helper leaves it false (and a value the helper sends is
	// overwritten). It travels in node heartbeats to the leader.
	Foreign bool `msgpack:"foreign,omitempty" json:"foreign"`
}

// HealthEvent says a device became unhealthy (or, for a helper restart that
// found it again, healthy). Unhealthy devices are taken out of scheduling:
// Allocator.Assign never picks them, and they do not count in the node's
// GPU resources.
type HealthEvent struct {
	// Index is the device's NVML index, as in Device; -1 (with UUID
	// empty) for an event NVML reported for all devices at once.
	Index int `msgpack:"index" json:"index"`
	// UUID is the device's UUID, as in Device.
	UUID string `msgpack:"uuid" json:"uuid,omitempty"`
	// Healthy is the device's new state.
	Healthy bool `msgpack:"healthy" json:"healthy"`
	// Reason says why, for logs and status: "Xid 79 (critical)",
	// "uncorrectable ECC error", "GPU is lost", "missing after helper restart".
	Reason string `msgpack:"reason" json:"reason"`
	// Xid is the Xid error code for Xid events, else 0.
	Xid uint64 `msgpack:"xid,omitempty" json:"xid,omitempty"`
	// At is when the event was observed.
	At time.Time `msgpack:"at" json:"at"`
}
