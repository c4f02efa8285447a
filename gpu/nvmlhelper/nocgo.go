//go:build !cgo

// Command gpu-helper is nodeup's NVML helper; this build has no cgo, so it
// has no NVML: it says so and exits with status 3 (gpu.ExitUnavailable),
// and a node running it falls back to nvidia-smi. Build it with
// CGO_ENABLED=1 (make build does when gcc is present).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "gpu-helper: built without cgo, so without NVML; rebuild with CGO_ENABLED=1")
	os.Exit(3)
}
