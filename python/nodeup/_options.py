"""Task and actor options: resources and scheduling strategy, as the node
is asked for them (wire LeaseRequest/ActorCreateRequest Resources and
Strategy)."""

from . import _protocol as P

DEFAULT = {"Kind": ""}  # wire.StrategyDefault: local first, spill when busy


def scheduling(opts, demand):
    """Returns (demand, strategy): ``demand`` (fixed-point resource map)
    renamed into a placement group's bundle when the options put the work
    in one, and the wire Strategy map. Accepts ``scheduling_strategy`` None,
    "DEFAULT", "SPREAD", NodeAffinitySchedulingStrategy or
    PlacementGroupSchedulingStrategy, and Ray's older
    ``placement_group``/``placement_group_bundle_index``. Raises
    ValueError for anything else or both forms at once."""
    from ._placement import PlacementGroup, demand_in
    from .util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy
    st = opts.get("scheduling_strategy")
    pg = opts.get("placement_group")
    if pg is not None and pg != "default":
        if st is not None and st != "DEFAULT":
            raise ValueError("placement_group cannot be combined with scheduling_strategy: "
                             "use scheduling_strategy=PlacementGroupSchedulingStrategy(pg, index)")
        if not isinstance(pg, PlacementGroup):
            raise ValueError(f"placement_group={pg!r}: want a PlacementGroup")
        st = PlacementGroupSchedulingStrategy(pg, opts.get("placement_group_bundle_index", -1))
    if st is None or st == "DEFAULT":
        return demand, dict(DEFAULT)
    if st == "SPREAD":
        return demand, {"Kind": "SPREAD"}
    if isinstance(st, NodeAffinitySchedulingStrategy):
        return demand, {"Kind": "NODE_AFFINITY", "NodeID": st.node_id, "Soft": st.soft}
    if isinstance(st, PlacementGroupSchedulingStrategy):
        return demand_in(st.placement_group.id, st.placement_group_bundle_index, demand), dict(DEFAULT)
    raise ValueError(f"scheduling_strategy={st!r}: accepted are None, 'DEFAULT', 'SPREAD', "
                     "NodeAffinitySchedulingStrategy and PlacementGroupSchedulingStrategy")


def strategy_key(strategy):
    """A hashable key of a wire Strategy map, for per-shape queues."""
    return (strategy.get("Kind", ""), strategy.get("NodeID", ""), bool(strategy.get("Soft")))


UNIT = P.UNIT
