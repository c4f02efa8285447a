"""Scheduling strategies for ``.options(scheduling_strategy=...)``, named as
Ray's ``ray.util.scheduling_strategies`` (docs/python.md)."""

import re

from ._placement import PlacementGroup

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


class _LabelMatch:
    """One condition on a node label's value (wire LabelMatch: Op, Values)."""

    __slots__ = ("op", "values")

    def __init__(self, op, values=()):
        values = list(values)
        for v in values:
            if not isinstance(v, str):
                raise TypeError(f"{_OP_NAMES[op]}(...): label values are strings, not {type(v).__name__} {v!r}")
        if op in ("in", "not_in") and not values:
            raise ValueError(f"{_OP_NAMES[op]}() needs at least one value")
        self.op = op
        self.values = values

    def wire(self):
        return {"Op": self.op, "Values": self.values} if self.values else {"Op": self.op}

    def __repr__(self):
        return f"{_OP_NAMES[self.op]}({', '.join(repr(v) for v in self.values)})"


_OP_NAMES = {"in": "In", "not_in": "NotIn", "exists": "Exists", "does_not_exist": "DoesNotExist"}


def In(*values):
    """Matches nodes whose label has one of ``values`` (strings, at least
    one), as Ray's ``ray.util.scheduling_strategies.In``."""
    return _LabelMatch("in", values)


def NotIn(*values):
    """Matches nodes whose label is absent or none of ``values`` (strings,
    at least one), as Ray's ``NotIn``."""
    return _LabelMatch("not_in", values)


def Exists():
    """Matches nodes that have the label, with any value, as Ray's ``Exists``."""
    return _LabelMatch("exists")


def DoesNotExist():
    """Matches nodes without the label, as Ray's ``DoesNotExist``."""
    return _LabelMatch("does_not_exist")


def _selector(name, sel):
    if sel is None:
        return {}
    if not isinstance(sel, dict):
        raise TypeError(f"NodeLabelSchedulingStrategy {name}={sel!r}: want a dict of label key to In/NotIn/Exists/DoesNotExist")
    out = {}
    for k, m in sel.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"NodeLabelSchedulingStrategy {name}: label key {k!r}: want a non-empty string")
        if not isinstance(m, _LabelMatch):
            raise TypeError(f"NodeLabelSchedulingStrategy {name}[{k!r}]={m!r}: want In(...), NotIn(...), Exists() "
                            "or DoesNotExist()")
        out[k] = m
    return out


class NodeLabelSchedulingStrategy:
    """Run the task or actor only on nodes whose labels (``nodeup start
    --labels zone=rack1``) satisfy every condition of ``hard``, preferring
    those that also satisfy ``soft``: a soft match with room now, else any
    hard match with room, else it waits on a soft match, else on any hard
    match. Each is a dict of label key to ``In(...)``, ``NotIn(...)``,
    ``Exists()`` or ``DoesNotExist()``; either may be empty. No alive node
    matching ``hard`` makes the work infeasible (it waits, as Ray's). As
    Ray's NodeLabelSchedulingStrategy (wire Strategy Labels and
    SoftLabels). Raises TypeError or ValueError naming a malformed key or
    condition."""

    def __init__(self, hard, soft=None):
        self.hard = _selector("hard", hard)
        self.soft = _selector("soft", soft)

    def wire(self):
        """The wire Strategy map (DEFAULT kind with Labels/SoftLabels)."""
        out = {"Kind": ""}
        if self.hard:
            out["Labels"] = {k: m.wire() for k, m in self.hard.items()}
        if self.soft:
            out["SoftLabels"] = {k: m.wire() for k, m in self.soft.items()}
        return out

    def __repr__(self):
        return f"NodeLabelSchedulingStrategy(hard={self.hard!r}, soft={self.soft!r})"


__all__ = ["NodeAffinitySchedulingStrategy", "PlacementGroupSchedulingStrategy", "NodeLabelSchedulingStrategy",
           "In", "NotIn", "Exists", "DoesNotExist"]
