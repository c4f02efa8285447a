"""Task and actor options, validated in one place (``check``, run by
``@remote`` and ``.options``), and turned into what the node is asked for:
resources and scheduling strategy (wire LeaseRequest/ActorCreateRequest
Resources and Strategy)."""

from . import _protocol as P
from . import _runtime_env
from ._placement import PlacementGroup, demand_in
from ._strategies import (NodeAffinitySchedulingStrategy, NodeLabelSchedulingStrategy,
                          PlacementGroupSchedulingStrategy)

DEFAULT_NAMESPACE = "default"  # named actors' namespace when none is set (Go's worker.DefaultNamespace)
DEFAULT = {"Kind": ""}  # wire.StrategyDefault: local first, spill when busy

_COMMON = {"num_cpus", "num_gpus", "memory", "resources", "name", "scheduling_strategy", "placement_group",
           "placement_group_bundle_index", "accelerator_type", "runtime_env"}
TASK_OPTIONS = _COMMON | {"max_retries", "retry_exceptions", "num_returns"}
ACTOR_OPTIONS = _COMMON | {"namespace", "lifetime", "get_if_exists", "max_restarts", "max_task_retries",
                           "max_concurrency", "concurrency_groups"}
# num_cpus when none is given: a task takes a CPU, an actor none (as Ray's defaults).
DEFAULT_CPUS = {"task": 1, "actor": 0}
# How much of the node resource accelerator_type:<model> accelerator_type=
# asks for: a token amount that pins work to such nodes (as Ray's 0.001).
ACCELERATOR_DEMAND = 0.001
ACCELERATOR_PREFIX = "accelerator_type:"  # sched.AcceleratorTypePrefix
# max_concurrency when none is given: Ray's 1 for a sync actor, 1000 for an
# actor with an async method.
DEFAULT_MAX_CONCURRENCY = 1
DEFAULT_ASYNC_MAX_CONCURRENCY = 1000


def _int_at_least(opts, key, low):
    v = opts.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
        raise ValueError(f"{key}={v!r}: want an int >= {low}")


def check(opts, kind):
    """Validates the options of a task (kind "task") or actor ("actor");
    raises ValueError naming the bad option and what is accepted."""
    allowed = TASK_OPTIONS if kind == "task" else ACTOR_OPTIONS
    bad = set(opts) - allowed
    if bad:
        raise ValueError(f"unsupported {kind} options {sorted(bad)}; supported so far: {sorted(allowed)}")
    _int_at_least(opts, "num_returns", 1)
    _int_at_least(opts, "max_retries", -1)
    _int_at_least(opts, "max_restarts", -1)
    _int_at_least(opts, "max_task_retries", -1)
    _int_at_least(opts, "max_concurrency", 1)
    groups = opts.get("concurrency_groups")
    if groups is not None:
        if not isinstance(groups, dict):
            raise ValueError(f"concurrency_groups={groups!r}: want a dict of group name -> max concurrency")
        for name, n in groups.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"concurrency_groups: group name {name!r}: want a non-empty str")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"concurrency_groups[{name!r}]={n!r}: want an int >= 1")
    acc = opts.get("accelerator_type")
    if acc is not None and (not isinstance(acc, str) or not acc.strip()):
        raise ValueError(f"accelerator_type={acc!r}: want a GPU model name such as nodeup.accelerators.NVIDIA_H100")
    for key in ("name", "namespace"):
        v = opts.get(key)
        if v is not None and not isinstance(v, str):
            raise ValueError(f"{key}={v!r}: want a str")
    if opts.get("lifetime") not in (None, "detached", "non_detached"):
        raise ValueError(f"lifetime={opts['lifetime']!r}: want None, 'detached' or 'non_detached'")
    if kind == "actor" and opts.get("get_if_exists") and not opts.get("name"):
        raise ValueError("get_if_exists=True needs a name")
    resources(opts, DEFAULT_CPUS[kind])
    scheduling(opts, {})
    _runtime_env.check(opts.get("runtime_env"))


def resources(opts, default_cpus):
    """The fixed-point demand (1/P.UNIT units; memory in bytes) of
    num_cpus (default ``default_cpus``), num_gpus, memory, resources and
    accelerator_type (0.001 of ``accelerator_type:<model>``, as Ray's);
    ValueError for a negative or non-numeric amount, or CPU/GPU/memory
    given in ``resources``."""
    res = {}
    cpus = opts.get("num_cpus", default_cpus)
    for name, amount in (("CPU", cpus), ("GPU", opts.get("num_gpus"))):
        if amount:
            res[name] = amount
    if opts.get("memory"):
        res["memory"] = opts["memory"]
    extra = opts.get("resources") or {}
    if not isinstance(extra, dict):
        raise ValueError(f"resources={extra!r}: want a dict of resource name -> amount")
    for k, v in extra.items():
        if k in ("CPU", "GPU", "memory"):
            raise ValueError(f"resources={{{k!r}: …}}: use num_cpus, num_gpus or memory for {k}")
        res[k] = v
    if opts.get("accelerator_type"):
        res[ACCELERATOR_PREFIX + opts["accelerator_type"]] = ACCELERATOR_DEMAND
    out = {}
    for k, v in res.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"resource {k}={v!r}: want a non-negative number")
        out[k] = int(round(v * P.UNIT))
    return out


def demand(opts, kind):
    """(resources, strategy) as the node is asked for them: ``resources``
    renamed into a placement group's bundle when the options put the work
    in one (see ``scheduling``)."""
    return scheduling(opts, resources(opts, DEFAULT_CPUS[kind]))


def scheduling(opts, demand):
    """Returns (demand, strategy): ``demand`` (fixed-point resource map)
    renamed into a placement group's bundle when the options put the work
    in one, and the wire Strategy map. Accepts ``scheduling_strategy`` None,
    "DEFAULT", "SPREAD", NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy or NodeLabelSchedulingStrategy, and
    Ray's older
    ``placement_group``/``placement_group_bundle_index``. Raises
    ValueError for anything else or both forms at once."""
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
    if isinstance(st, NodeLabelSchedulingStrategy):
        return demand, st.wire()
    raise ValueError(f"scheduling_strategy={st!r}: accepted are None, 'DEFAULT', 'SPREAD', "
                     "NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy and NodeLabelSchedulingStrategy")


def strategy_key(strategy):
    """A hashable key of a wire Strategy map, for per-shape queues."""
    return (strategy.get("Kind", ""), strategy.get("NodeID", ""), bool(strategy.get("Soft")),
            repr(sorted((strategy.get("Labels") or {}).items())), repr(sorted((strategy.get("SoftLabels") or {}).items())))

