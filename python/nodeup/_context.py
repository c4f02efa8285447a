"""What runs now in this process: ``get_runtime_context()`` and
``get_gpu_ids()``, as Ray's ray.get_runtime_context and ray.get_gpu_ids."""

import contextvars
import os
import re

from . import _protocol as P
from ._actor import ActorHandle
from . import _state

# The TaskSpec map of the task or actor call running in this thread or
# coroutine (a ContextVar: an async actor's calls share one thread).
_spec = contextvars.ContextVar("nodeup_task_spec", default=None)
_actor = {"id": None, "incarnation": 0, "resources": None}
_jobs = {}  # a node's per-actor job ID -> the ID of the job that created the actor
# The job an actor's worker runs under, one per incarnation (cluster's actorJobID).
_ACTOR_JOB = re.compile(r"^a-([0-9a-zA-Z]+)-[0-9]+$")


def _actor_info(core, actor_id):
    return core.pool.call(core.node_addr, "Actor.Get", {"ActorID": actor_id, "Namespace": "", "Name": "",
                                                        "WaitMillis": 0, "NotIncarnation": -1}, timeout=30)


def job_of(core):
    """The ID of the job whose driver started this work. A node runs an
    actor, and the tasks it submits, under a job of the actor's own
    (``a-<actor>-<incarnation>``); that is followed back through
    ``ActorInfo.JobID`` to the creator's job, as Ray reports the driver's
    job everywhere. An actor the leader no longer knows stops the walk."""
    job = core.job_id
    if job in _jobs:
        return _jobs[job]
    start = job
    for _ in range(16):  # actors created by actors created by ...
        m = _ACTOR_JOB.match(job)
        if not m:
            break
        try:
            job = _actor_info(core, m.group(1)).get("JobID") or job
        except Exception:
            break
    _jobs[start] = job
    return job


def set_task(spec):
    """Records spec (a TaskSpec map, or None when the call ends) as what
    this thread or coroutine runs."""
    _spec.set(spec)


def set_actor(actor_id, incarnation):
    """Records that this worker process runs incarnation ``incarnation`` of
    actor ``actor_id``."""
    _actor["id"], _actor["incarnation"] = actor_id, incarnation


def _amounts(rs):
    return {k: v / P.UNIT for k, v in (rs or {}).items() if v}


class RuntimeContext:
    """The job, node, task and actor the caller runs in, as Ray's
    ``RuntimeContext`` (from ``get_runtime_context()``). IDs are hex
    strings as nodeup prints them; what does not apply is None (a driver
    has no task or actor ID)."""

    def __init__(self, core):
        self._core = core

    def get_job_id(self):
        """The ID of the job (str) whose driver started this work, also in
        actors and the tasks they submit, as Ray's ``get_job_id``."""
        return job_of(self._core)

    def get_node_id(self):
        """The ID of the node this process runs on (str, as ``nodes()``
        reports it), as Ray's ``get_node_id``."""
        return self._core.node_id

    def get_task_id(self):
        """The ID of the task or actor call running in this thread or
        coroutine (str), or None in a driver or outside any call, as Ray's
        ``get_task_id``."""
        spec = _spec.get()
        return spec.get("TaskID") if spec else None

    def get_actor_id(self):
        """The ID of the actor this worker process runs (str), or None in a
        driver or a task, as Ray's ``get_actor_id``."""
        return _actor["id"] if _state.is_worker() else None

    def get_worker_id(self):
        """This worker process's ID as its node named it (str), or None in a
        driver, as Ray's ``get_worker_id``."""
        return os.environ.get("NODEUP_WORKER_ID") if _state.is_worker() else None

    @property
    def namespace(self):
        """The namespace named actors are created and looked up in (str),
        as Ray's ``RuntimeContext.namespace``."""
        return self._core.namespace

    def get_namespace(self):
        """``namespace``, as Ray's ``get_namespace``."""
        return self._core.namespace

    @property
    def was_current_actor_reconstructed(self):
        """True in an actor that restarted after its worker died (its
        incarnation is over 0), as Ray's."""
        return _state.is_worker() and _actor["id"] is not None and _actor["incarnation"] > 0

    @property
    def current_actor(self):
        """The ActorHandle of the actor this process runs, as Ray's
        ``current_actor``; RuntimeError outside an actor."""
        aid = self.get_actor_id()
        if aid is None:
            raise RuntimeError("current_actor: this process runs no actor")
        return ActorHandle(aid, "")

    def get_assigned_resources(self):
        """The resources the running task or actor was granted, as Ray's
        ``get_assigned_resources``: a dict of name -> amount (CPU and GPU
        in units, memory in bytes); {} in a driver. A task reports what its
        submitter asked for (``TaskSpec.Resources``), an actor what it was
        created with (``ActorInfo.Resources``); inside a placement group the
        names are the bundle's (``CPU_group_<i>_<pg>``)."""
        if not _state.is_worker():
            return {}
        if _actor["id"] is not None:
            if _actor["resources"] is None:
                info = _actor_info(self._core, _actor["id"])
                _actor["resources"] = _amounts(info.get("Resources"))
            return dict(_actor["resources"])
        spec = _spec.get()
        return _amounts(spec.get("Resources")) if spec else {}

    def get_accelerator_ids(self):
        """{"GPU": [device index as str, ...]}, the GPUs this worker process
        may use, as Ray's ``get_accelerator_ids``."""
        return {"GPU": [str(i) for i in gpu_ids()]}

    def get(self):
        """A dict of job_id, node_id, namespace, and task_id and actor_id
        where they apply, as Ray's deprecated ``RuntimeContext.get``."""
        out = {"job_id": self.get_job_id(), "node_id": self.get_node_id(), "namespace": self.namespace}
        if self.get_task_id() is not None:
            out["task_id"] = self.get_task_id()
        if self.get_actor_id() is not None:
            out["actor_id"] = self.get_actor_id()
        return out


def gpu_ids():
    """The GPU device indices the node gave this worker process in
    CUDA_VISIBLE_DEVICES (list of int, in that order), [] in a driver or a
    worker without GPUs. ValueError for an entry that is not an index."""
    if not _state.is_worker():
        return []
    raw = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not raw:
        return []
    out = []
    for part in raw.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ValueError(f"CUDA_VISIBLE_DEVICES={raw!r}: entry {part!r} is not a device index (0, 1, ...)")
        out.append(int(part))
    return out
