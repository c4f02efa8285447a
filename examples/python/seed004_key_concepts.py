"""Seed 004 (Ray's key concepts): tasks, actors, objects, placement groups
(PACK and SPREAD) and environment dependencies, written as for Ray; only
the import lines differ.

    PYTHONPATH=$(nodeup python path) /usr/bin/python3 examples/python/seed004_key_concepts.py
"""

import os

import nodeup as ray
from nodeup.util.placement_group import placement_group, remove_placement_group
from nodeup.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init()


# Tasks: functions run asynchronously on workers, with resource needs.
@ray.remote(num_cpus=1)
def add(a, b):
    return a + b


assert ray.get([add.remote(i, i) for i in range(8)]) == [2 * i for i in range(8)]


# Actors: a stateful worker whose methods mutate its state.
@ray.remote
class Accumulator:
    def __init__(self):
        self.total = 0

    def add(self, x):
        self.total += x
        return self.total


acc = Accumulator.remote()
for i in range(5):
    acc.add.remote(i)
assert ray.get(acc.add.remote(0)) == 10

# Objects: refs to values in the object store, passed to tasks.
big = ray.put(list(range(100000)))
assert ray.get(add.remote(ray.get(big)[-1], 1)) == 100000


@ray.remote
def length(xs):
    return len(xs)


assert ray.get(length.remote(big)) == 100000


# Placement groups: reserve resources atomically, packed or spread.
@ray.remote(num_cpus=1)
def where():
    return ray.get_runtime_context().get_node_id()


for strategy in ("PACK", "SPREAD"):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy=strategy)
    ray.get(pg.ready())
    print(strategy, ray.get([where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=i)).remote() for i in range(2)]))
    remove_placement_group(pg)  # its CPUs back, for the next group and the tasks below


# Environment dependencies: a runtime environment for a task.
@ray.remote(runtime_env={"env_vars": {"MODEL_VERSION": "v1"}})
def version():
    return os.environ["MODEL_VERSION"]


assert ray.get(version.remote()) == "v1"
print("seed004: ok")
