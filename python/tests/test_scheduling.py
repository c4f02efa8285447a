"""Scheduling strategies and placement groups on one node (Ray's
scheduling_strategy, ray.util.placement_group)."""

import pytest

from conftest import until
from nodeup.util import placement_group, placement_group_table, remove_placement_group
from nodeup.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy


def _where(ray):
    """A task returning the ID of the node it runs on (defined here, so that
    it travels by value: the workers cannot import this test module)."""
    def node_id():
        import os
        return os.environ.get("NODEUP_NODE_ID")
    return ray.remote(node_id)


def test_spread_and_node_affinity(ray):
    where = _where(ray)
    me = ray.nodes()[0]["NodeID"]
    spread = [where.options(scheduling_strategy="SPREAD").remote() for _ in range(4)]
    assert ray.get(spread, timeout=60) == [me] * 4
    hard = where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(me, soft=False)).remote()
    assert ray.get(hard, timeout=60) == me
    # A node that does not exist: hard waits as infeasible, soft runs elsewhere.
    absent = "0123abcd" * 4
    stuck = where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(absent, soft=False)).remote()
    soft = where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(absent, soft=True)).remote()
    assert ray.get(soft, timeout=60) == me
    ready, _ = ray.wait([stuck], timeout=1.0)
    assert ready == []
    ray.cancel(stuck)
    with pytest.raises(ValueError, match="not a node ID"):
        NodeAffinitySchedulingStrategy("node-1")
    with pytest.raises(ValueError, match="scheduling_strategy"):
        where.options(scheduling_strategy="ROUND_ROBIN").remote()


def test_placement_group_reserves_runs_work_and_is_removed(ray):
    def free_cpus():
        return ray.available_resources().get("CPU", 0)

    total = ray.cluster_resources()["CPU"]
    until("the node's CPUs are free", lambda: free_cpus() == total)
    pg = placement_group([{"CPU": 1}], strategy="PACK")
    assert ray.get(pg.ready(), timeout=60) == pg
    assert pg.wait(5) is True
    assert placement_group_table(pg)["state"] == "CREATED"
    assert pg.id in placement_group_table()
    # The bundle's CPU left the node's free pool.
    until("the reservation takes a CPU", lambda: free_cpus() == total - 1)

    in_pg = PlacementGroupSchedulingStrategy(pg, 0)
    where = _where(ray)
    assert ray.get(where.options(scheduling_strategy=in_pg).remote(), timeout=60) == ray.nodes()[0]["NodeID"]
    # Ray's older options spell the same.
    assert ray.get(where.options(placement_group=pg, placement_group_bundle_index=0).remote(), timeout=60)
    # More than the bundle holds never runs in it, though the node has room.
    big = where.options(num_cpus=2, scheduling_strategy=in_pg).remote()
    ready, _ = ray.wait([big], timeout=1.0)
    assert ready == []
    ray.cancel(big)

    @ray.remote
    class InGroup:
        def ping(self):
            return "pong"

    a = InGroup.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg)).remote()
    assert ray.get(a.ping.remote(), timeout=60) == "pong"

    remove_placement_group(pg)
    assert placement_group_table(pg)["state"] == "REMOVED"
    until("the CPU is back in the free pool", lambda: free_cpus() == total)


def test_placement_group_that_cannot_be_placed_and_bad_arguments(ray):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")  # two nodes' worth, one node
    assert pg.wait(1) is False
    assert placement_group_table(pg)["state"] == "PENDING"
    remove_placement_group(pg)
    with pytest.raises(ValueError, match="strategy"):
        placement_group([{"CPU": 1}], strategy="CLUMP")
    with pytest.raises(ValueError, match="non-empty list"):
        placement_group([])
    with pytest.raises(ValueError, match="positive"):
        placement_group([{"CPU": 0}])
    with pytest.raises(ValueError, match="out of range"):
        PlacementGroupSchedulingStrategy(pg, 2)


def test_named_placement_group_is_found_by_name(ray, node):
    from nodeup.util import get_placement_group
    pg = placement_group([{"CPU": 1}], name="pg-named")
    assert pg.wait(60)
    found = get_placement_group("pg-named")
    assert found == pg and found.bundle_specs == [{"CPU": 1.0}]
    with pytest.raises(ValueError, match="taken"):
        placement_group([{"CPU": 1}], name="pg-named")
    with pytest.raises(ValueError, match="pg-none"):
        get_placement_group("pg-none")
    remove_placement_group(pg)


def test_placement_group_module_as_rays(ray):
    # Ray's programs import `from ray.util.placement_group import placement_group`
    # (examples/python/seed003_core.py, seed004_key_concepts.py).
    import sys

    import nodeup.util
    from nodeup.util.placement_group import placement_group as make, remove_placement_group as remove

    # The name stays the function (not the module), as Ray's ray.util.placement_group.
    assert make is nodeup.util.placement_group is sys.modules["nodeup.util.placement_group"].placement_group
    pg = make([{"CPU": 1}], strategy="STRICT_PACK")
    assert ray.get(pg.ready(), timeout=30) == pg

    @ray.remote
    def one():
        return 1

    assert ray.get(one.options(placement_group=pg).remote(), timeout=30) == 1
    remove(pg)


def test_leases_run_queued_tasks_and_come_back_when_idle(ray):
    """Leases take queued tasks one after another and linger only briefly:
    the node never runs more CPU tasks than it has CPUs, and once the work
    is done every CPU is back in its free pool, for the default strategy
    and for SPREAD (one task per lease)."""
    total = ray.cluster_resources()["CPU"]

    def free_cpus():
        return ray.available_resources().get("CPU", 0)

    @ray.remote
    def stamp(i, seconds):
        import time as t
        start = t.time()
        t.sleep(seconds)
        return i, start, t.time()

    for strategy in ("DEFAULT", "SPREAD"):
        until("the node's CPUs are free", lambda: free_cpus() == total)
        assert [ray.get(stamp.options(scheduling_strategy=strategy).remote(i, 0))[0] for i in range(20)] == list(range(20))
        refs = [stamp.options(scheduling_strategy=strategy).remote(i, 0.2) for i in range(3 * int(total))]
        runs = ray.get(refs, timeout=120)
        assert sorted(r[0] for r in runs) == list(range(3 * int(total)))
        # At no instant more tasks ran than the node has CPUs.
        events = sorted([(r[1], 1) for r in runs] + [(r[2], -1) for r in runs], key=lambda e: (e[0], e[1]))
        running = most = 0
        for _, d in events:
            running += d
            most = max(most, running)
        assert most <= total, (most, total)
        until("the leases come back", lambda: free_cpus() == total, within=10)
