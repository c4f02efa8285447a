"""Seed 001: application-level scheduling with custom resources (Alexey
Tumanov's Ray blog post), written as for Ray; only the import line differs.
The nodes declare node0=2, node1=2, ... (`--resources node<i>=2`); e2e
starts three such nodes.

    PYTHONPATH=$(nodeup python path) /usr/bin/python3 examples/python/seed001_app_scheduling.py
"""

import os
import tempfile
import time

import nodeup as ray

# Connect to existing Ray cluster
ray.init()


@ray.remote
def f(i):
    return i


# Create two ray functions, each with custom resource requirement for node_i
oids = [f._remote(args=[i], kwargs={}, resources={'node' + str(i): 1})
        for i in range(2)]
# Get the results
assert ray.get(oids) == [0, 1]

# The Global State API: total and available resources, and the nodes.
total = ray.cluster_resources()
print(total)
print(ray.available_resources())
print(ray.nodes())
num_nodes = sum(1 for k in total if k.startswith("node") and not k.startswith("node:"))
assert num_nodes >= 2, f"want nodes declaring node0, node1, ...: {total}"

# Round robin an arbitrary number of tasks over the nodes.
task_count = 0
object_ids = []
while task_count < 1000:
    next_node_id = task_count % num_nodes
    object_id = f._remote(args=[task_count], kwargs={},
                          resources={'node' + str(next_node_id): 1})
    object_ids.append(object_id)
    task_count += 1
assert ray.get(object_ids) == list(range(1000))  # [0, 1, 2, 3, 4, 5, 6, 7, ..., 999]

# Co-location: a writer task writing to a local file, and a reader task
# reading it, both on node1. (A path of this run's own, not /tmp/myfile.tmp.)
filepath = os.path.join(tempfile.gettempdir(), f"nodeup-seed001-{os.getpid()}.tmp")


@ray.remote
def writer():
    with open(filepath + ".part", 'w') as f:
        f.write('foo')
    os.rename(filepath + ".part", filepath)


@ray.remote
def reader():
    # Wait for the file to created if does not exist
    while not os.path.isfile(filepath):
        time.sleep(0.05)
    # Read the file once created
    with open(filepath, 'r') as f:
        data = f.read()
    return data


writer._remote(args=[], kwargs={}, resources={'node1': 1})
object_id = reader._remote(args=[], kwargs={}, resources={'node1': 1})
assert ray.get(object_id, timeout=60) == 'foo'
os.remove(filepath)


# One task calls an actor method, both co-located on node1.
@ray.remote
class Actor:
    def method(self, i):
        return i, ray.get_runtime_context().get_node_id()


@ray.remote
def foo(i, actor_handle):
    return ray.get(actor_handle.method.remote(i)), ray.get_runtime_context().get_node_id()


actor_handle = Actor._remote(args=[], kwargs={}, resources={"node1": 1})
object_id = foo._remote(args=[1, actor_handle], kwargs={},
                        resources={"node1": 1})
(value, actor_node), task_node = ray.get(object_id)
assert value == 1 and actor_node == task_node, (actor_node, task_node)
print("seed001: ok")
