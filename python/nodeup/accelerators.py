"""GPU model names for ``accelerator_type=``, as Ray's ``ray.util.accelerators``
(also importable as ``nodeup.util.accelerators``).

``@remote(num_gpus=1, accelerator_type=NVIDIA_TESLA_V100)`` adds a demand of
0.001 of the node resource ``accelerator_type:V100``, which a node offers
(one unit per model) when it has GPUs of that model: detected ones, or
``nodeup start --num-gpus N --gpu-model V100`` (docs/gpus.md). The values
are the short model names the node derives from the device name
(gpu.ShortModel), as Ray's; Ray's NVIDIA_A100_40G/_80G are left out, as a
node names every A100 "A100"."""

NVIDIA_TESLA_V100 = "V100"
NVIDIA_TESLA_P100 = "P100"
NVIDIA_TESLA_T4 = "T4"
NVIDIA_TESLA_P4 = "P4"
NVIDIA_TESLA_K80 = "K80"
NVIDIA_TESLA_A10G = "A10G"
NVIDIA_TESLA_A100 = "A100"  # Ray 1.x's name for NVIDIA_A100
NVIDIA_A100 = "A100"
NVIDIA_A10G = "A10G"
NVIDIA_L4 = "L4"
NVIDIA_L40S = "L40S"
NVIDIA_H100 = "H100"
NVIDIA_H200 = "H200"
NVIDIA_H20 = "H20"
NVIDIA_B200 = "B200"

__all__ = [n for n in dir() if n.startswith("NVIDIA_")]
