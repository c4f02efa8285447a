//go:build gpuhelper

package gpu

import _ "embed"

// embeddedHelper is the NVML helper program (gpu/nvmlhelper), built by
// `make build` into gpu/embedded/gpu-helper (ignored by git) just before the
// static binary, which is built with -tags gpuhelper. A string, so its bytes
// lie in the binary's read-only data, where ExtractHelper can give their
// pages back after writing them out.
//
//go:embed embedded/gpu-helper
var embeddedHelper string
