//go:build !gpuhelper

package gpu

// embeddedHelper is empty in builds without the gpuhelper tag (plain
// `go build`, `go test`, or `make build` where gcc is missing): GPUs are then
// found through nvidia-smi or declared with --num-gpus.
var embeddedHelper string
