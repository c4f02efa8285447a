"""Seed 002 (Ray's "Advanced Usage"): FileLock, dynamic remote parameters,
num_returns=2, task names, accelerator types, nested remote functions,
cluster state and runtime_env env_vars, written as for Ray; only the import
lines differ. SignalActor and Queue are in sync.py. The cluster needs
Custom1..Custom3 resources, a node with 3 CPUs, GPUs, and a V100 node
(`--num-gpus 2 --gpu-model V100`); e2e starts such a cluster.

    PYTHONPATH=$(nodeup python path) /usr/bin/python3 examples/python/seed002_advanced.py
"""

import os
import tempfile

import nodeup as ray
from nodeup.accelerators import NVIDIA_TESLA_V100

try:
    from filelock import FileLock
except ImportError:  # Debian's python3-filelock is not a dependency: the same lock with fcntl
    import fcntl

    class FileLock:
        def __init__(self, path):
            self.path = path

        def __enter__(self):
            self.f = open(self.path, "w")
            fcntl.flock(self.f, fcntl.LOCK_EX)

        def __exit__(self, *exc):
            fcntl.flock(self.f, fcntl.LOCK_UN)
            self.f.close()

ray.init()

# Inter-process synchronization using FileLock (one node: the file is local).
data = os.path.join(tempfile.mkdtemp(prefix="nodeup-seed002-"), "my_data.txt")


@ray.remote(resources={"node0": 0.1})
def write_to_file(text):
    # Create a filelock object. Consider using an absolute path for the lock.
    with FileLock(data + ".lock"):
        with open(data, "a") as f:
            f.write(text)


ray.get([write_to_file.remote("hi there!\n") for i in range(3)])
with open(data) as f:
    out = f.read()
print(out)
assert out == "hi there!\n" * 3


# Dynamic remote parameters: copies of one actor with other resources.
@ray.remote
class Counter(object):
    def __init__(self):
        self.value = 0

    def increment(self):
        self.value += 1
        return self.value


a1 = Counter.options(num_cpus=1, resources={"Custom1": 1}).remote()
a2 = Counter.options(num_cpus=2, resources={"Custom2": 1}).remote()
a3 = Counter.options(num_cpus=3, resources={"Custom3": 1}).remote()
assert ray.get([a.increment.remote() for a in (a1, a2, a3)], timeout=60) == [1, 1, 1]
for a in (a1, a2, a3):
    ray.kill(a)


@ray.remote(num_gpus=1)
def g():
    return ray.get_gpu_ids()


object_gpu_ids = g.remote()
ids = ray.get(object_gpu_ids)
# The seed says [0]: the first GPU of an idle node. A GPU the last task
# held may not be back yet when the next starts, so any one GPU ID will do.
assert len(ids) == 1 and ids[0] in (0, 1), ids
dynamic_object_gpu_ids = g.options(num_cpus=1, num_gpus=1).remote()
ids = ray.get(dynamic_object_gpu_ids)
assert len(ids) == 1 and ids[0] in (0, 1), ids


# Vary the number of return values.
@ray.remote
def f(n):
    return list(range(n))


id1, id2 = f.options(num_returns=2).remote(2)
assert ray.get(id1) == 0
assert ray.get(id2) == 1


# A name for a task at submission time (Ray also sets the process title
# to it, which needs setproctitle; here the name is the task's name in
# errors and listings).
@ray.remote
def f(x):
    return x + 1


obj = f.options(name="special_f").remote(3)
assert ray.get(obj) == 4


# Accelerator types: runs only on a node whose GPUs are V100s.
@ray.remote(num_gpus=1, accelerator_type=NVIDIA_TESLA_V100)
def train(data):
    return "This function was run on a node with a Tesla V100 GPU", ray.get_runtime_context().get_node_id()


msg, node_id = ray.get(train.remote(None))
v100 = [n for n in ray.nodes() if n["Resources"].get("accelerator_type:V100")]
assert v100 and node_id == v100[0]["NodeID"], (node_id, v100)
print(msg)


# Nested remote functions.
@ray.remote
def f():
    return 1


@ray.remote
def g():
    # Call f 4 times and return the resulting object refs.
    return [f.remote() for _ in range(4)]


@ray.remote
def h():
    # Call f 4 times, block until those 4 tasks finish,
    # retrieve the results, and return the values.
    return ray.get([f.remote() for _ in range(4)])


refs = ray.get(g.remote())
assert len(refs) == 4 and ray.get(refs) == [1, 1, 1, 1]
assert ray.get(h.remote()) == [1, 1, 1, 1]

# Inspecting cluster state.
nodes = ray.nodes()
print(nodes)
assert all(n["Alive"] for n in nodes) and len(nodes) >= 1
total, avail = ray.cluster_resources(), ray.available_resources()
print(total, avail)
assert 0 <= avail.get("CPU", 0) <= total["CPU"] and total["CPU"] >= 8, (total, avail)


# Runtime environments: env_vars per task.
@ray.remote
def env():
    return os.environ.get("OMP_NUM_THREADS"), os.environ.get("TF_WARNINGS")


assert ray.get(env.options(runtime_env={"env_vars": {"OMP_NUM_THREADS": "32", "TF_WARNINGS": "none"}}).remote()) == ("32", "none")
print("seed002: ok")
