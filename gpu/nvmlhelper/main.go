//go:build cgo

// Command gpu-helper is nodeup's NVML helper: a small program the node
// daemon starts as a child process to find NVIDIA GPUs, sample their
// telemetry and watch their health through NVML (github.com/NVIDIA/go-nvml),
// which needs cgo and dlopen and so cannot live in the static daemon.
//
// It speaks the frame protocol of package gpu on stdin/stdout (see
// gpu.WriteFrame and gpu.Frame): it reads the node's hello, answers with its
// own hello and the device list, then writes telemetry samples every
// interval and health events as NVML reports them, until stdin closes. Logs
// go to stderr, which the node copies into its own log. When NVML cannot be
// loaded or initialized it writes a fatal error frame and exits with status
// gpu.ExitUnavailable (3), and the node falls back to nvidia-smi.
//
// Run by hand with --probe, it prints what NVML sees (driver, devices, one
// sample each) as JSON and exits: the quickest check on a GPU node that the
// helper works there (docs/gpus.md).
//
// `make build` compiles it with cgo (dynamically linked against libc only;
// libnvidia-ml.so.1 is opened at run time) and embeds it into bin/nodeup.
package main

import (
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--probe" {
		os.Exit(probe(nvml.New(), os.Stdout, os.Stderr))
	}
	os.Exit(run(nvml.New(), os.Stdin, os.Stdout, os.Stderr))
}
