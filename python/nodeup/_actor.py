"""Actors: @remote on a class (docs/protocol.md, Actor methods). The
leader places the actor (Actor.Create); calls go straight to its worker
process (Actor.Call), numbered per caller session so that they run in order."""

import queue
import secrets
import threading

from . import _core
from . import _protocol as P
from .exceptions import RayActorError

_ACTOR_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "name", "namespace", "lifetime",
                  "get_if_exists", "max_restarts", "max_task_retries"}


class ActorClass:
    """A class made remote: ``Cls.remote(*args)`` creates an actor."""

    def __init__(self, cls, opts, resources_of):
        bad = set(opts) - _ACTOR_OPTIONS
        if bad:
            raise ValueError(f"unsupported actor options {sorted(bad)}; supported so far: {sorted(_ACTOR_OPTIONS)}")
        self._cls = cls
        self._opts = opts
        self._resources_of = resources_of
        self.__name__ = cls.__name__

    def __call__(self, *a, **k):
        raise TypeError(f"actor class {self.__name__} cannot be instantiated directly; use {self.__name__}.remote()")

    def options(self, **opts):
        merged = dict(self._opts)
        merged.update(opts)
        return ActorClass(self._cls, merged, self._resources_of)

    def remote(self, *args, **kwargs):
        from . import _core_or_raise
        core = _core_or_raise()
        o = self._opts
        # One Arg: the pickled (args, kwargs); the worker resolves the top-level refs.
        ctor = core._arg((tuple(args), dict(kwargs)))
        req = {"ActorID": secrets.token_hex(12), "JobID": core.job_id, "Class": self._cls.__qualname__,
               "Name": o.get("name") or "", "Namespace": o.get("namespace") or getattr(core, "namespace", ""),
               "GetIfExists": bool(o.get("get_if_exists")), "Detached": o.get("lifetime") == "detached",
               "MaxRestarts": o.get("max_restarts", 0), "MaxTaskRetries": o.get("max_task_retries", 0),
               "MaxConcurrency": 1, "Resources": self._resources_of(o, 0), "Strategy": {"Kind": ""},
               "Constructor": "__init__", "Args": [ctor], "BinaryHash": "", "BinaryNode": "",
               "OwnerAddr": core.address, "Language": P.LANGUAGE, "Code": _core.dumps(self._cls)}
        rep = core.pool.call(core.node_addr, "Actor.Create", req)
        return ActorHandle(rep["ActorID"], self._cls.__qualname__)


class ActorHandle:
    """A handle to an actor: ``handle.method.remote(*args)`` calls it."""

    def __init__(self, actor_id, class_name):
        self._actor_id = actor_id
        self._class_name = class_name
        self._lock = threading.Lock()
        self._sender = None

    def __reduce__(self):
        return (ActorHandle, (self._actor_id, self._class_name))

    def __repr__(self):
        return f"Actor({self._class_name}, {self._actor_id})"

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return ActorMethod(self, name)

    def _submit(self, method, args, kwargs):
        from . import _core_or_raise
        core = _core_or_raise()
        ref = _core.ObjectRef(core._next("c") + ".0", core.address)
        out = core._new_obj(ref.id)
        with self._lock:
            if self._sender is None or self._sender.core is not core:
                self._sender = _Sender(core, self._actor_id, self._class_name)
            self._sender.q.put((method, args, kwargs, ref.id, out))
        return ref


class ActorMethod:
    def __init__(self, handle, name):
        self._handle = handle
        self._name = name

    def remote(self, *args, **kwargs):
        return self._handle._submit(self._name, args, kwargs)

    def __call__(self, *a, **k):
        raise TypeError(f"actor method {self._name} cannot be called directly; use .{self._name}.remote()")


class _Sender:
    """Sends one handle's calls in submission order: arguments resolved,
    then numbered 0, 1, 2, … in one session, each awaited on its own thread."""

    def __init__(self, core, actor_id, class_name):
        self.core = core
        self.actor_id = actor_id
        self.class_name = class_name
        self.session = secrets.token_hex(8)
        self.seq = 0
        self.info = None
        self.q = queue.Queue()
        threading.Thread(target=self._loop, name=f"nodeup-actor-{actor_id}", daemon=True).start()

    def _where(self):
        while self.info is None:
            info = self.core.pool.call(self.core.node_addr, "Actor.Get",
                                       {"ActorID": self.actor_id, "Namespace": "", "Name": "",
                                        "WaitMillis": 10000, "NotIncarnation": -1}, timeout=30)
            if info.get("State") == "DEAD":
                raise RayActorError(f"actor {self.class_name} ({self.actor_id}) is dead: {info.get('DeathCause')}")
            if info.get("State") == "ALIVE" and info.get("WorkerAddr"):
                self.info = info
        return self.info

    def _loop(self):
        core = self.core
        while True:
            method, args, kwargs, oid, out = self.q.get()
            try:
                wargs = [core._arg(a) for a in args] + [core._arg(v) for v in kwargs.values()]
                info = self._where()
            except _core._ArgFailed as f:
                core._finish(out, error=f.obj.error, task_name=f.obj.task_name)
                continue
            except Exception as e:
                core._finish(out, error=e if isinstance(e, RayActorError) else RayActorError(str(e)))
                continue
            name = f"{self.class_name}.{method}"
            spec = {"TaskID": oid.rsplit(".", 1)[0], "JobID": core.job_id, "Name": name, "Function": method,
                    "Args": wargs, "NumReturns": 1, "Owner": core.address, "Attempt": 0,
                    "KwargNames": list(kwargs.keys()) or None}
            req = {"ActorID": self.actor_id, "Incarnation": info.get("Incarnation", 0), "Session": self.session,
                   "Seq": self.seq, "Spec": spec}
            self.seq += 1
            threading.Thread(target=self._call, args=(info, req, name, out), daemon=True).start()

    def _call(self, info, req, name, out):
        core = self.core
        try:
            rep = core.pool.call(info["WorkerAddr"], "Actor.Call", req)
        except Exception as e:
            core._finish(out, error=RayActorError(f"call {name} on actor {self.actor_id}: {e}"))
            return
        core.complete([out], rep, name)

