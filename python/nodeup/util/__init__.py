"""``nodeup.util``, as Ray's ``ray.util``: placement groups and scheduling
strategies (docs/python.md)."""

from .._placement import (PlacementGroup, get_placement_group, placement_group,
                          placement_group_table, remove_placement_group)
from . import scheduling_strategies

__all__ = ["PlacementGroup", "placement_group", "remove_placement_group", "get_placement_group",
           "placement_group_table", "scheduling_strategies"]
