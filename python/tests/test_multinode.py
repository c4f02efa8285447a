"""A Python job on a secure cluster of two node processes: work that only
the second node can hold is leased there (spillback over TLS with the
driver's node's certificate, as Go's worker.nodeCredential) and runs."""

import os

import pytest

import conftest
from conftest import until

import nodeup
from nodeup.util.scheduling_strategies import DoesNotExist, In, NodeLabelSchedulingStrategy


@pytest.fixture(scope="module")
def two_nodes():
    with conftest.two_nodes("nodeup-pytest-2n-", ("--resources", "far=2", "--labels", "zone=far")) as nodes:
        yield nodes


def test_tasks_and_actors_spill_to_another_secure_node(two_nodes):
    head, far = two_nodes
    nodeup.init(address=head.socket)
    try:
        until("the second node's resources in the cluster",
              lambda: nodeup.cluster_resources().get("far") == 2, within=30)
        far_id = next(n["NodeID"] for n in nodeup.nodes() if n.get("Resources", {}).get("far"))

        @nodeup.remote(resources={"far": 1})
        def where(x):
            return nodeup.get_runtime_context().get_node_id(), len(x)

        big = b"x" * (1 << 20)  # stored: the far node pulls it from the head
        node_id, n = nodeup.get(where.remote(nodeup.put(big)), timeout=60)
        assert node_id == far_id and n == len(big)

        @nodeup.remote(resources={"far": 1})
        class Counter:
            def __init__(self):
                self.n = 0

            def incr(self):
                self.n += 1
                return self.n, nodeup.get_runtime_context().get_node_id()

        c = Counter.remote()
        assert nodeup.get([c.incr.remote() for _ in range(3)], timeout=60)[-1] == (3, far_id)
    finally:
        nodeup.shutdown()


def test_node_label_strategy_prefers_soft_and_holds_hard(two_nodes):
    """Ray's NodeLabelSchedulingStrategy: the soft label draws work from the
    driver's node to the labelled one; a hard label no node has leaves it
    waiting (infeasible); a bad condition is refused where it is made."""
    head, far = two_nodes
    nodeup.init(address=head.socket)
    try:
        until("the second node in the cluster",
              lambda: nodeup.cluster_resources().get("far") == 2, within=30)
        ids = {n["Labels"].get("zone", ""): n["NodeID"] for n in nodeup.nodes()}

        @nodeup.remote
        def where():
            return nodeup.get_runtime_context().get_node_id()

        soft = NodeLabelSchedulingStrategy(hard={}, soft={"zone": In("far")})
        assert nodeup.get(where.options(scheduling_strategy=soft).remote(), timeout=60) == ids["far"]
        not_far = NodeLabelSchedulingStrategy(hard={"zone": DoesNotExist()})
        assert nodeup.get(where.options(scheduling_strategy=not_far).remote(), timeout=60) == ids[""]
        stuck = where.options(scheduling_strategy=NodeLabelSchedulingStrategy(hard={"zone": In("mars")})).remote()
        ready, _ = nodeup.wait([stuck], timeout=1.0)
        assert ready == []
        nodeup.cancel(stuck)
        with pytest.raises(ValueError, match="needs at least one value"):
            In()
        with pytest.raises(TypeError, match="soft"):
            NodeLabelSchedulingStrategy(hard={}, soft={"zone": "far"})
    finally:
        nodeup.shutdown()
