"""Seed 003 ("What is Ray?"): tasks, resource requirements, an actor,
objects, placement groups of the four strategies and the batch-inference
fan-out, written as for Ray; only the import lines differ. The cluster
needs GPUs on two nodes (`--num-gpus 2`); e2e starts such a cluster.

    PYTHONPATH=$(nodeup python path) /usr/bin/python3 examples/python/seed003_core.py
"""

import nodeup as ray
from nodeup.util.placement_group import placement_group, remove_placement_group
from nodeup.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init()


@ray.remote
def square(x):
    return x * x


# Launch 4 tasks in parallel
futures = [square.remote(i) for i in range(4)]
results = ray.get(futures)  # [0, 1, 4, 9]
assert results == [0, 1, 4, 9]


@ray.remote(num_cpus=2, num_gpus=1)
def train_model(data):
    return sum(data), ray.get_gpu_ids()


total, gpus = ray.get(train_model.remote([1, 2, 3]))
assert total == 6 and len(gpus) == 1


@ray.remote
class Counter:
    def __init__(self):
        self.count = 0

    def increment(self):
        self.count += 1
        return self.count


counter = Counter.remote()
assert ray.get(counter.increment.remote()) == 1  # 1
assert ray.get(counter.increment.remote()) == 2  # 2

ref = square.remote(5)  # returns ObjectRef, not the result
result = ray.get(ref)  # blocks until ready, returns 25
assert result == 25


@ray.remote(num_gpus=1)
def gpu_task():
    return ray.get_runtime_context().get_node_id()


# Placement groups: each strategy reserves its bundles atomically. The
# seed's bundles are [{"GPU": 1}, {"GPU": 1}]; a task takes 1 CPU unless
# told otherwise (in Ray too), so a bundle it runs in needs a CPU as well.
def wait_idle(within=30.0):
    """Waits until the earlier tasks' leases are back (every CPU and GPU
    free), so PACK sees the whole cluster: PACK, unlike STRICT_PACK, may
    split a group over nodes when the one it prefers is busy."""
    import time
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        total, free = ray.cluster_resources(), ray.available_resources()
        if all(free.get(k, 0) >= total.get(k, 0) for k in ("CPU", "GPU")):
            return
        time.sleep(0.05)
    raise AssertionError(f"resources not free within {within} s: {ray.available_resources()}")


for strategy in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
    wait_idle()
    pg = placement_group([{"CPU": 1, "GPU": 1}, {"CPU": 1, "GPU": 1}], strategy=strategy)
    ray.get(pg.ready())  # wait for resources
    nodes = ray.get([gpu_task.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=i)).remote() for i in range(2)])
    if strategy in ("PACK", "STRICT_PACK"):
        assert nodes[0] == nodes[1], (strategy, nodes)
    else:
        assert nodes[0] != nodes[1], (strategy, nodes)
    # The seed's form: the task takes a bundle of the group.
    ray.get(gpu_task.options(placement_group=pg).remote())
    remove_placement_group(pg)
    print(strategy, nodes)


# Batch inference: fan out across the GPUs.
class Model:
    def predict(self, item):
        return float(len(item))


def load_model(model_path):
    return Model()


@ray.remote(num_gpus=1)
def predict_batch(model_path: str, batch: list[str]) -> list[float]:
    model = load_model(model_path)
    return [model.predict(item) for item in batch]


data = [f"item-{i}" for i in range(10000)]  # 10,000 items
batches = [data[i:i + 100] for i in range(0, len(data), 100)]
futures = [predict_batch.remote("s3://models/v1.pt", b) for b in batches]
results = ray.get(futures)  # waits for all, returns list of lists
assert len(results) == 100 and [x for r in results for x in r] == [float(len(d)) for d in data]
print("seed003: ok")
