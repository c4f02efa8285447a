"""``nodeup.util``, as Ray's ``ray.util``: placement groups, scheduling
strategies, ActorPool, and (imported on their own, as Ray's)
``nodeup.util.queue`` and ``nodeup.util.accelerators`` (docs/python.md)."""

from .placement_group import (PlacementGroup, get_placement_group, placement_group,
                              placement_group_table, remove_placement_group)
from . import scheduling_strategies
from .actor_pool import ActorPool

__all__ = ["PlacementGroup", "placement_group", "remove_placement_group", "get_placement_group",
           "placement_group_table", "scheduling_strategies", "ActorPool"]
