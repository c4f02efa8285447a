"""Actors: @remote on a class (docs/protocol.md, Actor methods). The
leader places the actor (Actor.Create); calls go straight to its worker
process (Actor.Call), numbered per caller session so that they run in order."""

import collections
import inspect
import secrets
import threading

from . import _core
from . import _options
from . import _runtime_env
from . import _protocol as P
from . import _state
from .exceptions import ActorDiedError, RayActorError


def is_async_class(cls):
    """True when cls has an ``async def`` (or async generator) method: its
    actor then runs on an event loop, as Ray's async actors."""
    for name in dir(cls):
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        if isinstance(attr, (staticmethod, classmethod)):
            attr = attr.__func__
        if inspect.iscoroutinefunction(attr) or inspect.isasyncgenfunction(attr):
            return True
    return False


class ActorClass:
    """A class made remote with @remote, as Ray's ActorClass:
    ``Cls.remote(*args, **kwargs)`` creates an actor and returns its
    ActorHandle; ``Cls.options(...)`` gives a copy with other options. Bad
    options raise ValueError here."""

    def __init__(self, cls, opts):
        _options.check(opts, "actor")
        self._cls = cls
        self._opts = opts
        self.__name__ = cls.__name__

    def __call__(self, *a, **k):
        raise TypeError(f"actor class {self.__name__} cannot be instantiated directly; use {self.__name__}.remote()")

    def options(self, **opts):
        """Returns a copy with opts over this class's options, as Ray's
        ``Cls.options``; ValueError for an unsupported or bad option."""
        merged = dict(self._opts)
        merged.update(opts)
        return ActorClass(self._cls, merged)

    def _remote(self, args=None, kwargs=None, **opts):
        """``Cls.options(**opts).remote(*args, **kwargs)``, as Ray's
        ``Cls._remote(args=..., kwargs=..., resources=...)``."""
        return self.options(**opts).remote(*(args or ()), **(kwargs or {}))

    def _max_concurrency(self):
        mc = self._opts.get("max_concurrency")
        if mc is not None:
            return mc
        if is_async_class(self._cls):
            return _options.DEFAULT_ASYNC_MAX_CONCURRENCY
        return _options.DEFAULT_MAX_CONCURRENCY

    def remote(self, *args, **kwargs):
        """Creates the actor (Actor.Create at the leader, which places it)
        and returns its ActorHandle, as Ray's ``Cls.remote``; the
        constructor runs in the actor's own worker process with
        ``args``/``kwargs`` (top-level ObjectRefs resolved). With
        ``get_if_exists`` and a live actor of that name, that actor's handle.
        Raises ValueError when the name is taken, RuntimeError before init."""
        core = _state.core_or_raise()
        o = self._opts
        # One Arg: the pickled (args, kwargs), or (args, kwargs, worker
        # options) with concurrency groups; the worker resolves the top-level refs.
        demand, strategy = _options.demand(o, "actor")
        groups = dict(o.get("concurrency_groups") or {})
        methods = _method_options(self._cls)
        for m, mo in methods.items():
            g = mo.get("concurrency_group")
            if g is not None and g not in groups:
                raise ValueError(f"actor {self._cls.__qualname__}: method {m} names concurrency_group {g!r}, "
                                 f"which concurrency_groups={groups!r} does not define")
        ctor = core._arg((tuple(args), dict(kwargs), {"concurrency_groups": groups}) if groups
                         else (tuple(args), dict(kwargs)))
        req = {"ActorID": secrets.token_hex(12), "JobID": core.job_id, "Class": self._cls.__qualname__,
               "Name": o.get("name") or "", "Namespace": o.get("namespace") or core.namespace,
               "JobNamespace": "" if core.namespace == _options.DEFAULT_NAMESPACE else core.namespace,
               "GetIfExists": bool(o.get("get_if_exists")), "Detached": o.get("lifetime") == "detached",
               "MaxRestarts": o.get("max_restarts", 0), "MaxTaskRetries": o.get("max_task_retries", 0),
               "MaxConcurrency": self._max_concurrency(), "Resources": demand, "Strategy": strategy,
               "Constructor": "__init__", "Args": [ctor], "BinaryHash": "", "BinaryNode": "",
               "OwnerAddr": core.address, "Language": P.LANGUAGE, "Code": _core.dumps(self._cls)}
        env = _runtime_env.resolve(core, o.get("runtime_env"), core.env_vars)
        if env:
            req["EnvVars"] = env
        try:
            rep = core.pool.call(core.node_addr, "Actor.Create", req)
        except P.RpcError as e:
            if e.code == "already_exists":  # the name is taken (Ray raises ValueError)
                raise ValueError(e.message) from None
            raise
        return ActorHandle(rep["ActorID"], self._cls.__qualname__, methods)


def get_actor(name, namespace=None):
    """The handle of the live actor named ``name`` in ``namespace`` (default:
    the driver's, ``init(namespace=...)``, else "default"), as Ray's
    ray.get_actor. Raises ValueError when there is none (never created,
    dead, or its job ended and it was not detached)."""
    core = _state.core_or_raise()
    if not isinstance(name, str) or not name:
        raise ValueError(f"get_actor: name={name!r}: want a non-empty str")
    ns = namespace or core.namespace
    try:
        info = core.pool.call(core.node_addr, "Actor.Get", {"ActorID": "", "Namespace": ns, "Name": name,
                                                            "WaitMillis": 0, "NotIncarnation": -1}, timeout=30)
    except P.RpcError as e:
        if e.code == "not_found":
            raise ValueError(f"Failed to look up actor with name {name!r} in namespace {ns!r}: {e.message}") from None
        raise
    return ActorHandle(info["ActorID"], info.get("Class") or "")


def kill(actor, no_restart=True):
    """Ends ``actor`` (an ActorHandle) at once, as Ray's ray.kill: with
    no_restart (default) it is dead, and its pending and later calls raise
    ActorDiedError; otherwise its worker is killed and it restarts if
    max_restarts allows. Raises ValueError for anything but a handle."""
    core = _state.core_or_raise()
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"kill takes an actor handle, not {type(actor).__name__}")
    core.pool.call(core.node_addr, "Actor.Kill", {"ActorID": actor._actor_id, "NoRestart": bool(no_restart)},
                   timeout=30)


METHOD_OPTIONS = {"num_returns", "concurrency_group"}


def _check_method_options(opts):
    bad = set(opts) - METHOD_OPTIONS
    if bad:
        raise ValueError(f"unsupported actor method options {sorted(bad)}; supported so far: {sorted(METHOD_OPTIONS)}")
    _options._int_at_least(opts, "num_returns", 1)
    g = opts.get("concurrency_group")
    if g is not None and (not isinstance(g, str) or not g):
        raise ValueError(f"concurrency_group={g!r}: want the name of one of the actor's concurrency_groups")


def method(*args, **opts):
    """``@nodeup.method(num_returns=N, concurrency_group=G)`` on an actor
    class's method, as Ray's ``@ray.method``: its calls return N
    ObjectRefs (a list) instead of one, and run in concurrency group G
    (one of the class's ``concurrency_groups``). The handles that
    ``Cls.remote`` returns (and copies pickled from them) know
    ``num_returns``; a handle from ``get_actor`` does not, so call
    ``handle.m.options(num_returns=N)`` there. ValueError for another
    option or a bad value."""
    if args:
        raise ValueError(f"@method takes keyword options only, not {list(args)}")
    _check_method_options(opts)

    def mark(fn):
        fn.__nodeup_method_options__ = dict(opts)
        return fn

    return mark


def _method_options(cls):
    """{method name: its @method options} of cls."""
    out = {}
    for name in dir(cls):
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        o = getattr(attr, "__nodeup_method_options__", None)
        if o:
            out[name] = dict(o)
    return out


class ActorHandle:
    """A handle to an actor, as Ray's ``ActorHandle``: ``handle.method.remote(*args)``
    calls it and returns an ObjectRef. Handles pickle (as the actor's ID,
    class name and methods' ``@method`` options), so they may be passed to
    tasks and other actors."""

    def __init__(self, actor_id, class_name, method_options=None):
        self._actor_id = actor_id
        self._class_name = class_name
        self._method_options = method_options or {}
        self._lock = threading.Lock()
        self._sender = None

    def __reduce__(self):
        return (ActorHandle, (self._actor_id, self._class_name, self._method_options or None))

    def __repr__(self):
        return f"Actor({self._class_name}, {self._actor_id})"

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self):
        return hash(self._actor_id)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return ActorMethod(self, name, self._method_options.get(name, {}).get("num_returns", 1))

    def _submit(self, method, args, kwargs, num_returns=1, group=None):
        core = _state.core_or_raise()
        tid = core._next("c")
        refs = [_core.ObjectRef(f"{tid}.{i}", core.address) for i in range(num_returns)]
        outs = [core._new_obj(r.id) for r in refs]
        with self._lock:
            if self._sender is None or self._sender.core is not core:
                self._sender = _Sender(core, self._actor_id, self._class_name)
            call = _Call(method, args, kwargs, tid, outs, group)
            with core.lock:
                core.works[call.tid] = (self._sender, call)
            self._sender.put(call)
        return refs[0] if num_returns == 1 else refs


class ActorMethod:
    """A method of an actor, as Ray's ActorMethod: ``handle.m.remote(...)``."""

    def __init__(self, handle, name, num_returns=1, group=None):
        self._handle = handle
        self._name = name
        self._num_returns = num_returns
        self._group = group  # None: the method's own (@method), else the default group

    def options(self, **opts):
        """This method with other call options, as Ray's
        ``ActorMethod.options``: ``num_returns`` (int >= 1) and
        ``concurrency_group`` (a group of the actor's; an unknown one makes
        the call raise ValueError at get); ValueError for anything else."""
        _check_method_options(opts)
        return ActorMethod(self._handle, self._name, opts.get("num_returns", self._num_returns),
                           opts.get("concurrency_group", self._group))

    def remote(self, *args, **kwargs):
        """Calls the method and returns its ObjectRef at once (a list of
        ``num_returns`` refs when that is over 1, and the method must then
        return that many values); calls of one handle run in submission
        order. ``get`` of the ref raises the method's exception as a
        RayTaskError, or ActorDiedError/RayActorError when the actor is
        dead or the call was lost with its worker."""
        return self._handle._submit(self._name, args, kwargs, self._num_returns, self._group)

    def __call__(self, *a, **k):
        raise TypeError(f"actor method {self._name} cannot be called directly; use .{self._name}.remote()")


class _Call:
    """One method call: its arguments until resolved (wargs after), its
    result objects, how often it was resent, why it was lost (the error of
    a connection that failed with it out, None if never sent), and where it
    was sent."""

    __slots__ = ("method", "args", "kwargs", "tid", "outs", "wargs", "retries", "lost", "sent_to", "group", "order")

    def __init__(self, method, args, kwargs, tid, outs, group=None):
        self.method, self.args, self.kwargs, self.tid, self.outs = method, args, kwargs, tid, outs
        self.group = group
        self.wargs, self.retries, self.lost = None, 0, None
        self.sent_to = None  # the worker address it was last sent to (cancel tells it there)
        self.order = 0  # its place in its handle's submission order

    def fail(self, core, error, task_name=""):
        """Ends the call with error on every result."""
        core._done(self.tid)
        for o in self.outs:
            core._finish(o, error=error, task_name=task_name)


class _Sender:
    """Sends one handle's calls in submission order: arguments resolved,
    then numbered 0, 1, 2, … in one session per actor incarnation, each
    awaited on its own thread. A call whose worker connection fails is
    queued again at the front; the sender then asks the leader where the
    actor lives now (Actor.Get, past the failed incarnation): a dead actor
    fails it with ActorDiedError; a restarted one gets it again if it never
    reached the worker or max_task_retries allows, as Go's actorConn."""

    def __init__(self, core, actor_id, class_name):
        self.core = core
        self.actor_id = actor_id
        self.class_name = class_name
        self.cond = threading.Condition()
        self.calls = collections.deque()
        self.info = None  # the ActorInfo calls go to; None: ask the leader
        self.stale = -1  # the incarnation whose worker failed a call (-1: none)
        self.inc = None  # the incarnation of the session
        self.session, self.seq = "", 0
        self.submitted = 0  # calls put so far: the next one's order
        threading.Thread(target=self._loop, name=f"nodeup-actor-{actor_id}", daemon=True).start()

    def put(self, call, front=False):
        """Queues a new call last, or (front) one sent again ahead of every
        queued call submitted after it: calls a failed connection gives
        back, one by one, keep their submission order."""
        with self.cond:
            if front:
                i = next((i for i, c in enumerate(self.calls) if c.order > call.order), len(self.calls))
                self.calls.insert(i, call)
            else:
                call.order = self.submitted
                self.submitted += 1
                self.calls.append(call)
            self.cond.notify()

    def drop(self, call):
        """Removes call if it is still queued here (not yet sent); True if it was."""
        with self.cond:
            try:
                self.calls.remove(call)
                return True
            except ValueError:
                return False

    def _where(self):
        while self.info is None:
            info = self.core.pool.call(self.core.node_addr, "Actor.Get",
                                       {"ActorID": self.actor_id, "Namespace": "", "Name": "",
                                        "WaitMillis": 10000, "NotIncarnation": self.stale}, timeout=30)
            if info.get("State") == "DEAD":
                raise ActorDiedError(f"actor {self.class_name} ({self.actor_id}) is dead: {info.get('DeathCause')}")
            if info.get("State") == "ALIVE" and info.get("WorkerAddr"):
                # Alive past the failed incarnation, or still in it after a
                # whole wait (then the connection failed, not the actor).
                self.info, self.stale = info, -1
                if info.get("Incarnation", 0) != self.inc:
                    self.inc = info.get("Incarnation", 0)
                    self.session, self.seq = secrets.token_hex(8), 0
        return self.info

    def _loop(self):
        core = self.core
        while True:
            with self.cond:
                while not self.calls:
                    self.cond.wait()
                call = self.calls.popleft()
            try:
                if call.wargs is None:
                    call.wargs = [core._arg(a) for a in call.args] + [core._arg(v) for v in call.kwargs.values()]
                info = self._where()
            except _core._ArgFailed as f:
                call.fail(core, f.obj.error, f.obj.task_name)
                continue
            except Exception as e:
                call.fail(core, e if isinstance(e, RayActorError) else RayActorError(str(e)))
                continue
            name = f"{self.class_name}.{call.method}"
            if call.lost is not None:
                # It may have run on the instance that died: resend only
                # while max_task_retries allows (-1: always).
                mtr = int(info.get("MaxTaskRetries") or 0)
                if 0 <= mtr <= call.retries:
                    call.fail(core, ActorDiedError(
                        f"actor {self.class_name} ({self.actor_id}): its worker was lost while running call {name} "
                        f"({call.lost}); it restarted, and max_task_retries={mtr} allows no retry"))
                    continue
                call.retries += 1
                call.lost = None
            spec = {"TaskID": call.tid, "JobID": core.job_id, "Name": name,
                    "Function": call.method, "Args": call.wargs, "NumReturns": len(call.outs), "Owner": core.address,
                    "Attempt": call.retries, "KwargNames": list(call.kwargs.keys()) or None}
            if call.group:
                spec["ConcurrencyGroup"] = call.group
            req = {"ActorID": self.actor_id, "Incarnation": info.get("Incarnation", 0), "Session": self.session,
                   "Seq": self.seq, "Spec": spec}
            self.seq += 1
            call.sent_to = info["WorkerAddr"]
            # Sent here, in order, and answered on the connection's reader
            # thread: no thread per call (a thousand calls in flight to one
            # actor were a thousand threads contending for the GIL).
            try:
                core.pool.call_async(info["WorkerAddr"], "Actor.Call", req,
                                     lambda rep, err, info=info, name=name, call=call: self._answered(info, name, call, rep, err))
            except Exception as e:
                self._answered(info, name, call, None, e)

    def _answered(self, info, name, call, rep, err):
        """Ends call with its answer rep, or handles err: a failed
        connection queues the call again at the front (to be sent to where
        the actor lives now); another error fails it. Runs on the thread
        that read the answer, so it does not block."""
        core = self.core
        if isinstance(err, P.TransportError):
            if core.closed:
                return
            with self.cond:
                if self.info is info:
                    self.info, self.stale = None, info.get("Incarnation", 0)
            if not err.unsent:
                call.lost = err
            self.put(call, front=True)
            return
        if err is not None:
            call.fail(core, RayActorError(f"call {name} on actor {self.actor_id}: {err}"))
            return
        core._done(call.tid)
        core.complete(call.outs, rep, name)
