// Package gpu finds NVIDIA GPUs, assigns them to leases and watches their
// telemetry and health, without giving up nodeup's single static binary.
//
// NVML (github.com/NVIDIA/go-nvml) needs cgo and dlopen, which a fully static
// binary cannot do safely, so NVML runs in a small helper program
// (gpu/nvmlhelper, built with cgo, dynamically linked against libc only, with
// libnvidia-ml opened at run time). `make build` embeds the helper into
// bin/nodeup; the Supervisor writes it into the data dir, starts it as a child
// process and reads msgpack frames from its stdout (see WriteFrame). When the
// helper cannot run (no driver, no glibc, built without it) the Supervisor
// parses nvidia-smi output instead, and when that fails too the node has no
// GPUs. Declared devices (--num-gpus N --gpu-model NAME) replace detection.
//
// This package is pure Go (no cgo) and imports only sched from nodeup, so
// the static daemon can import it. docs/gpus.md describes the whole design.
package gpu
