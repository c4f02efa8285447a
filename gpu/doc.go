// Package gpu will hold GPU discovery, assignment and telemetry: an NVML
// helper process, the nvidia-smi fallback and --num-gpus overrides
// (docs/architecture.md). The GPU issue fills it in.
package gpu
