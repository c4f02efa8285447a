"""``nodeup.util.scheduling_strategies``, as Ray's
``ray.util.scheduling_strategies``: the strategies for
``.options(scheduling_strategy=...)`` (they live in ``nodeup._strategies``)."""

from .._strategies import (DoesNotExist, Exists, In, NodeAffinitySchedulingStrategy,  # noqa: F401
                           NodeLabelSchedulingStrategy, NotIn, PlacementGroupSchedulingStrategy)

__all__ = ["NodeAffinitySchedulingStrategy", "PlacementGroupSchedulingStrategy", "NodeLabelSchedulingStrategy",
           "In", "NotIn", "Exists", "DoesNotExist"]
