//go:build gpuhelper

package gpu

import _ "embed"

// embeddedHelper is the NVML helper program (gpu/nvmlhelper), built by
// `make build` into gpu/embedded/gpu-helper (ignored by git) just before the
// static binary, which is built with -tags gpuhelper.
//
//go:embed embedded/gpu-helper
var embeddedHelper []byte
