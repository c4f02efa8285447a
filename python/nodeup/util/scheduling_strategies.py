"""Scheduling strategies for ``.options(scheduling_strategy=...)``, named as
Ray's ``ray.util.scheduling_strategies`` (docs/python.md)."""

import re

_NODE_ID = re.compile(r"^[0-9a-f]{8,64}$")


class NodeAffinitySchedulingStrategy:
    """Run the task or actor on the node with ID ``node_id`` (hex, 8 to 64
    digits, as ``nodes()[i]["NodeID"]`` reports it; a node's name is not
    its ID). With ``soft=True`` it may run elsewhere when that node is gone
    or cannot run it; with ``soft=False`` (default) it is infeasible then.
    As Ray's NodeAffinitySchedulingStrategy (wire Strategy NODE_AFFINITY).
    Raises ValueError for a malformed ID."""

    def __init__(self, node_id, soft=False):
        if not isinstance(node_id, str) or not _NODE_ID.match(node_id):
            raise ValueError(f"NodeAffinitySchedulingStrategy node_id={node_id!r}: not a node ID; give 8 to 64 "
                             "lower-case hex digits as nodes() reports them (a node's name is not its ID)")
        self.node_id = node_id
        self.soft = bool(soft)

    def __repr__(self):
        return f"NodeAffinitySchedulingStrategy(node_id={self.node_id!r}, soft={self.soft})"


class PlacementGroupSchedulingStrategy:
    """Run the task or actor in bundle ``placement_group_bundle_index`` of
    ``placement_group`` (-1, default: any bundle), as Ray's
    PlacementGroupSchedulingStrategy: it lands on that bundle's node and
    uses the bundle's resources, so its demand (num_cpus, num_gpus,
    resources…) must fit in the bundle. Raises ValueError for an index
    outside -1 … bundle_count-1, TypeError for a non-PlacementGroup."""

    def __init__(self, placement_group, placement_group_bundle_index=-1,
                 placement_group_capture_child_tasks=None):
        from .._placement import PlacementGroup
        if not isinstance(placement_group, PlacementGroup):
            raise TypeError(f"PlacementGroupSchedulingStrategy takes a PlacementGroup, not "
                            f"{type(placement_group).__name__}")
        n = placement_group.bundle_count
        i = placement_group_bundle_index
        if not isinstance(i, int) or not -1 <= i < n:
            raise ValueError(f"placement_group_bundle_index={i!r} out of range: group {placement_group.id} has {n} "
                             f"bundles, use 0 to {n - 1} or -1 for any")
        self.placement_group = placement_group
        self.placement_group_bundle_index = i
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks

    def __repr__(self):
        return (f"PlacementGroupSchedulingStrategy({self.placement_group!r}, "
                f"placement_group_bundle_index={self.placement_group_bundle_index})")


__all__ = ["NodeAffinitySchedulingStrategy", "PlacementGroupSchedulingStrategy"]
