"""Placement groups (docs/protocol.md, placement-group methods; Go's
worker/placement.go): PG.Create, PG.Get, PG.Remove, PG.List at the leader,
and the renamed bundle resources work in a group asks for."""

import secrets
import threading
import time

from . import _objectref
from . import _protocol as P
from . import _state
from .exceptions import RayError

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")  # sched.ParsePlacementStrategy
GROUP_INFIX = "_group_"
BUNDLE_MARKER = "bundle"
BUNDLE_MARKER_DEMAND = 10  # sched.BundleMarkerDemand: 0.001 of the marker, fixed-point


class PlacementGroup:
    """A placement group, as Ray's ``PlacementGroup``: ``id`` (hex),
    ``bundle_specs`` (the bundles as given: resource name -> amount),
    ``bundle_count``. It pickles (as its ID and bundles), so it may be passed
    to tasks and actors."""

    def __init__(self, id, bundle_specs):
        self.id = id
        self.bundle_specs = [dict(b) for b in bundle_specs]

    @property
    def bundle_count(self):
        """The number of bundles (int), as Ray's ``pg.bundle_count``."""
        return len(self.bundle_specs)

    def __reduce__(self):
        return (PlacementGroup, (self.id, self.bundle_specs))

    def __repr__(self):
        return f"PlacementGroup({self.id})"

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def _get(self, wait_s=0.0):
        core = _state.core_or_raise()
        return core.pool.call(core.node_addr, "PG.Get", {"ID": self.id, "Namespace": "", "Name": "",
                                                         "WaitMillis": int(wait_s * 1000)}, timeout=wait_s + 30)

    def ready(self):
        """An ObjectRef that becomes ready (its value: this group) once every
        bundle is reserved on its node, as Ray's ``pg.ready()``; ``get`` of it
        raises RayError when the group was removed first."""
        core = _state.core_or_raise()
        ref = _objectref.ObjectRef(core._next("g") + ".0", core.address)
        out = core._new_obj(ref.id)

        def watch():
            while not core.closed:
                try:
                    info = self._get(10.0)
                except Exception as e:
                    core._finish(out, error=RayError(f"placement group {self.id}: {e}"))
                    return
                if info.get("State") == "CREATED":
                    core._finish(out, value=_objectref.dumps(self))
                    return
                if info.get("State") == "REMOVED":
                    core._finish(out, error=RayError(f"placement group {self.id} was removed before it was created"))
                    return

        threading.Thread(target=watch, name=f"nodeup-pg-{self.id}", daemon=True).start()
        return ref

    def wait(self, timeout_seconds=30):
        """True once the group is created within timeout_seconds (s), False
        when the time runs out (the group may still be placed later, or be
        infeasible: see ``placement_group_table``), as Ray's ``pg.wait``."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            left = deadline - time.monotonic()
            info = self._get(max(0.0, min(left, 10.0)))
            if info.get("State") == "CREATED":
                return True
            if info.get("State") == "REMOVED" or left <= 0:
                return False


def _bundle_sets(bundles):
    if not isinstance(bundles, (list, tuple)) or not bundles:
        raise ValueError(f"placement_group bundles={bundles!r}: want a non-empty list of resource dicts")
    out = []
    for i, b in enumerate(bundles):
        if not isinstance(b, dict) or not b:
            raise ValueError(f"bundle {i}: {b!r}: want a non-empty dict of resource name -> amount")
        s = {}
        for k, v in b.items():
            if not isinstance(k, str) or not k:
                raise ValueError(f"bundle {i}: resource name {k!r}: want a non-empty str")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValueError(f"bundle {i}: resource {k!r} has amount {v!r}; amounts must be positive numbers")
            s[k] = int(round(v * P.UNIT))
        out.append(s)
    return out


def placement_group(bundles, strategy="PACK", name="", lifetime=None, _namespace=None):
    """Reserves ``bundles`` (a list of resource dicts such as ``{"CPU": 2,
    "GPU": 1}``; CPUs and GPUs as counts, ``memory`` in bytes) on the
    cluster's nodes under ``strategy`` (PACK, SPREAD, STRICT_PACK or
    STRICT_SPREAD), all or none, as Ray's ``ray.util.placement_group``.
    Returns a PlacementGroup at once; ``ready()``/``wait()`` wait for the
    reservation. ``name`` makes it findable with ``get_placement_group``
    in the driver's namespace; ``lifetime="detached"`` keeps it after the
    job ends. Raises ValueError for a bad strategy, bundle or lifetime, or
    a taken name."""
    st = str(strategy).upper()
    if st not in STRATEGIES:
        raise ValueError(f"placement group strategy {strategy!r}: accepted are {', '.join(STRATEGIES)}")
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError(f"lifetime={lifetime!r}: want None, 'detached' or 'non_detached'")
    sets = _bundle_sets(bundles)
    core = _state.core_or_raise()
    req = {"ID": secrets.token_hex(12), "Name": name or "", "Namespace": _namespace or core.namespace,
           "JobID": core.job_id, "Detached": lifetime == "detached", "Strategy": st, "Bundles": sets}
    try:
        info = core.pool.call(core.node_addr, "PG.Create", req, timeout=60)
    except P.RpcError as e:
        if e.code in ("bad_input", "already_exists"):
            raise ValueError(f"placement_group: {e.message}") from None
        raise
    return PlacementGroup(info.get("ID") or req["ID"], bundles)


def remove_placement_group(placement_group):
    """Removes the group, as Ray's ``ray.util.remove_placement_group``: its
    reservations go back to their nodes, actors in it die, and tasks
    queued for it become infeasible; tasks running in it finish. Removing a
    removed group is no error. Raises TypeError for a non-PlacementGroup."""
    if not isinstance(placement_group, PlacementGroup):
        raise TypeError(f"remove_placement_group takes a PlacementGroup, not {type(placement_group).__name__}")
    core = _state.core_or_raise()
    core.pool.call(core.node_addr, "PG.Remove", {"ID": placement_group.id}, timeout=60)


def get_placement_group(name, namespace=None):
    """The placement group named ``name`` in ``namespace`` (default: the
    driver's), as Ray's ``ray.util.get_placement_group``; ValueError when
    there is none."""
    core = _state.core_or_raise()
    ns = namespace or core.namespace
    try:
        info = core.pool.call(core.node_addr, "PG.Get", {"ID": "", "Namespace": ns, "Name": name, "WaitMillis": 0},
                              timeout=30)
    except P.RpcError as e:
        if e.code == "not_found":
            raise ValueError(f"Failed to look up placement group {name!r} in namespace {ns!r}: {e.message}") from None
        raise
    return PlacementGroup(info["ID"], [_amounts(b.get("Resources")) for b in info.get("Bundles") or []])


def _amounts(rs):
    return {k: v / P.UNIT for k, v in (rs or {}).items()}


def _table_entry(g):
    return {"placement_group_id": g.get("ID"), "name": g.get("Name") or "", "namespace": g.get("Namespace") or "",
            "strategy": g.get("Strategy"), "state": g.get("State"), "pending_reason": g.get("PendingReason") or "",
            "bundles": {b.get("Index", i): _amounts(b.get("Resources")) for i, b in enumerate(g.get("Bundles") or [])},
            "bundles_to_node_id": {b.get("Index", i): b.get("NodeID") or None
                                   for i, b in enumerate(g.get("Bundles") or [])},
            "is_detached": bool(g.get("Detached"))}


def placement_group_table(placement_group=None):
    """Ray's ``ray.util.placement_group_table``: for one group its entry
    (placement_group_id, name, namespace, strategy, state — PENDING,
    CREATED, RESCHEDULING or REMOVED —, pending_reason, bundles: index ->
    resources, bundles_to_node_id, is_detached); without one, every group
    by ID."""
    if placement_group is not None:
        return _table_entry(placement_group._get(0))
    core = _state.core_or_raise()
    groups = core.pool.call(core.node_addr, "PG.List", {}, timeout=30).get("Groups") or []
    return {g.get("ID"): _table_entry(g) for g in groups}


def demand_in(pg_id, index, demand):
    """``demand`` (fixed-point resource map) renamed into bundle ``index``
    of group ``pg_id`` (-1: any bundle), as sched.PlacementGroupDemand."""
    wildcard = GROUP_INFIX + pg_id
    indexed = f"{GROUP_INFIX}{index}_{pg_id}" if index >= 0 else ""
    out = {}
    for k, q in demand.items():
        if q > 0:
            out[k + wildcard] = q
            if indexed:
                out[k + indexed] = q
    out[BUNDLE_MARKER + wildcard] = BUNDLE_MARKER_DEMAND
    if indexed:
        out[BUNDLE_MARKER + indexed] = BUNDLE_MARKER_DEMAND
    return out
