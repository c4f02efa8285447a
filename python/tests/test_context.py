"""get_runtime_context(), get_gpu_ids(), nodeup.accelerators and
accelerator_type=, as Ray's."""

import os
import tempfile

import pytest

import nodeup
from conftest import Node
from nodeup import accelerators
from nodeup.exceptions import GetTimeoutError


def test_runtime_context_in_driver_task_and_actor(ray, node):
    ctx = ray.get_runtime_context()
    job, node_id = ctx.get_job_id(), ctx.get_node_id()
    assert job and node_id in [n["NodeID"] for n in ray.nodes()]
    assert ctx.get_task_id() is None and ctx.get_actor_id() is None
    assert ctx.get_assigned_resources() == {} and ctx.namespace == "default"
    assert ray.get_gpu_ids() == []

    @ray.remote
    def where():
        c = ray.get_runtime_context()
        return (c.get_job_id(), c.get_node_id(), c.get_task_id(), c.get_actor_id(), c.get_assigned_resources(),
                c.namespace, ray.get_gpu_ids())

    ref = where.options(num_cpus=2, memory=1 << 20).remote()
    got = ray.get(ref, timeout=60)
    assert got == (job, node_id, ref.hex().rsplit(".", 1)[0], None, {"CPU": 2.0, "memory": float(1 << 20)},
                   "default", [])
    assert ray.get(where.remote(), timeout=60)[4] == {"CPU": 1.0}

    @ray.remote(num_cpus=1)
    class Who:
        def ids(self):
            c = ray.get_runtime_context()
            return (c.get_job_id(), c.get_actor_id(), c.get_task_id(), c.get_assigned_resources(),
                    c.was_current_actor_reconstructed, c.current_actor == c.current_actor)

        def nested_job(self):
            # A task the actor submits runs under the actor's own job on the
            # node; it still reports the driver's.
            return ray.get(where.remote())[0]

    w = Who.remote()
    ref = w.ids.remote()
    assert ray.get(ref, timeout=60) == (job, w._actor_id, ref.hex().rsplit(".", 1)[0], {"CPU": 1.0}, False, True)
    assert ray.get(w.nested_job.remote(), timeout=60) == job


def test_accelerators_match_rays_names():
    assert accelerators.NVIDIA_TESLA_V100 == "V100"
    assert accelerators.NVIDIA_TESLA_A100 == accelerators.NVIDIA_A100 == "A100"
    assert accelerators.NVIDIA_H100 == "H100"
    from nodeup.util import accelerators as util_acc
    assert util_acc.NVIDIA_H100 == "H100"
    with pytest.raises(ValueError, match="accelerator_type"):
        nodeup.remote(accelerator_type="")(lambda: 1)


@pytest.fixture(scope="module")
def gpu_node():
    """A node that declares 2 H100 GPUs (no detection)."""
    with tempfile.TemporaryDirectory(prefix="nodeup-pytest-gpu-") as tmp:
        n = Node(tmp, extra=("--num-gpus", "2", "--gpu-model", "NVIDIA H100 80GB HBM3"))
        try:
            yield n
        finally:
            n.stop()


def test_gpu_ids_and_accelerator_type(gpu_node):
    nodeup.init(address=gpu_node.socket)
    try:
        assert nodeup.cluster_resources().get("accelerator_type:H100") == 1

        @nodeup.remote(num_gpus=1, accelerator_type=accelerators.NVIDIA_H100)
        def gpus():
            return nodeup.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"), \
                nodeup.get_runtime_context().get_assigned_resources()

        ids, cuda, res = nodeup.get(gpus.remote(), timeout=60)
        assert len(ids) == 1 and ids[0] in (0, 1) and cuda == str(ids[0])
        assert res == {"CPU": 1.0, "GPU": 1.0, "accelerator_type:H100": 0.001}

        @nodeup.remote(num_gpus=2)
        class Trainer:
            def gpus(self):
                return sorted(nodeup.get_gpu_ids())

        assert nodeup.get(Trainer.remote().gpus.remote(), timeout=60) == [0, 1]

        # No V100 anywhere: the task is infeasible and waits.
        v100 = gpus.options(num_gpus=0, accelerator_type=accelerators.NVIDIA_TESLA_V100).remote()
        with pytest.raises(GetTimeoutError):
            nodeup.get(v100, timeout=1.0)
        nodeup.cancel(v100)
    finally:
        nodeup.shutdown()
