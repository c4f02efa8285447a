"""GPUs: whole, fractional and per-model GPU tasks and a GPU actor, written as
for Ray; only the import line differs. It checks its own results: each task
sees exactly the devices it was given in CUDA_VISIBLE_DEVICES and
get_gpu_ids(), a CPU task sees none, no device ever carries more than one
whole GPU of running tasks, an actor keeps its device, and accelerator_type
places work on a node with that model. With PyTorch installed and a real GPU,
each GPU task also multiplies a matrix on its device.

Needs a cluster with a GPU, real or declared:

    nodeup start --head --num-gpus 2 --gpu-model H100     # or a real GPU node
    PYTHONPATH=$(nodeup python path) /usr/bin/python3 examples/python/gpus.py

e2e runs it on declared V100s and H100s; on a real GPU node it was run with
PyTorch (docs/gpus.md).
"""

import collections
import os
import time

import nodeup as ray

ray.init()
total = int(ray.cluster_resources().get("GPU", 0))
assert total >= 1, "this example needs a node with a GPU (nodeup start --num-gpus N, or a GPU node)"


def compute_on_gpu():
    """Multiplies a matrix on the task's device when PyTorch sees one;
    returns the device's name, or None without PyTorch or CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    # Only the task's devices are visible, renumbered from 0.
    assert torch.cuda.device_count() == len(ray.get_gpu_ids()), (torch.cuda.device_count(), ray.get_gpu_ids())
    x = torch.ones(1024, 1024, device="cuda")
    assert int((x @ x).sum().item()) == 1024 ** 3
    return torch.cuda.get_device_name(0)


def report(seconds):
    ids = ray.get_gpu_ids()
    device = compute_on_gpu() if ids else None
    start = time.time()
    time.sleep(seconds)
    return {"ids": ids, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": device,
            "node": ray.get_runtime_context().get_node_id(), "start": start, "end": time.time()}


@ray.remote(num_gpus=1)
def whole(seconds):
    return report(seconds)


@ray.remote(num_gpus=0.25)
def quarter(seconds):
    return report(seconds)


@ray.remote
def cpu_only():
    return os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_gpu_ids()


@ray.remote(num_gpus=1)
class GPUActor:
    def where(self):
        return os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_gpu_ids(), compute_on_gpu()


def most_at_once(runs, share):
    """The largest GPU share any one device (node, index) carried at one
    instant, from each run's start and end times."""
    points = collections.defaultdict(list)
    for r in runs:
        for i in r["ids"]:
            points[(r["node"], i)] += [(r["start"], share), (r["end"], -share)]
    most = 0.0
    for events in points.values():
        load = 0.0
        for _, d in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
            load += d
            most = max(most, load)
    return most


# A whole-GPU task sees exactly its one device.
r = ray.get(whole.remote(0))
assert len(r["ids"]) == 1 and r["visible"] == str(r["ids"][0]), r
print("a 1-GPU task sees CUDA_VISIBLE_DEVICES=%s (%s)" % (r["visible"], r["device"] or "no PyTorch GPU"))

# A CPU task sees none.
visible, ids = ray.get(cpu_only.remote())
assert visible == "" and ids == [], (visible, ids)

# More whole-GPU tasks than GPUs: never two on one device at once.
runs = ray.get([whole.remote(0.5) for _ in range(total + 1)])
assert all(len(x["ids"]) == 1 and x["visible"] == str(x["ids"][0]) for x in runs), runs
assert most_at_once(runs, 1.0) <= 1.0, runs
print("%d whole-GPU tasks on %d GPUs: at most one per device at any time" % (len(runs), total))

# Quarter-GPU tasks share devices, at most four to a device.
runs = ray.get([quarter.remote(0.5) for _ in range(4 * total + 2)])
assert all(len(x["ids"]) == 1 for x in runs), runs
assert most_at_once(runs, 0.25) <= 1.0, runs
print("%d quarter-GPU tasks: at most 1.0 GPU per device at any time" % len(runs))

# An actor keeps its device for its lifetime.
a = GPUActor.remote()
first, second = ray.get([a.where.remote(), a.where.remote()])
assert first[:2] == second[:2] and len(first[1]) == 1 and first[0] == str(first[1][0]), (first, second)
ray.kill(a)

# accelerator_type places work on a node with that model.
models = sorted(k.split(":", 1)[1] for k in ray.cluster_resources() if k.startswith("accelerator_type:"))
for model in models:
    r = ray.get(whole.options(accelerator_type=model).remote(0))
    node = next(n for n in ray.nodes() if n["NodeID"] == r["node"])
    assert node["Resources"].get("accelerator_type:" + model, 0) > 0, (model, node)
    print("accelerator_type=%s ran on a node with %s GPUs" % (model, model))

print("gpus: ok")
