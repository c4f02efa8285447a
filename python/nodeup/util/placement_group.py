"""``nodeup.util.placement_group``, as Ray's ``ray.util.placement_group``
module: ``from nodeup.util.placement_group import placement_group`` works as
in Ray programs (the same names as ``nodeup.util``)."""

from .._placement import (PlacementGroup, get_placement_group, placement_group,
                          placement_group_table, remove_placement_group)

__all__ = ["PlacementGroup", "placement_group", "remove_placement_group", "get_placement_group",
           "placement_group_table"]
