"""``@remote``: remote functions (tasks) and, for a class, actor classes,
as Ray's ``ray.remote`` and ``RemoteFunction`` (``ray/remote_function.py``)."""

from . import _objectref
from . import _options
from . import _runtime_env
from . import _state
from ._actor import ActorClass

_core_or_raise = _state.core_or_raise


class RemoteFunction:
    """A function made remote with @remote, as Ray's RemoteFunction:
    ``f.remote(*args, **kwargs)`` submits a task; ``f.options(...)`` gives
    a copy with other options. Bad options raise ValueError here."""

    def __init__(self, fn, opts):
        _options.check(opts, "task")
        self._fn = fn
        self._opts = opts
        self._code = None
        self.__name__ = getattr(fn, "__name__", "task")
        self.__doc__ = fn.__doc__

    def __call__(self, *a, **k):
        raise TypeError(f"remote function {self.__name__} cannot be called directly; use {self.__name__}.remote()")

    def options(self, **opts):
        """Returns a copy with opts over this function's options, as Ray's
        ``f.options``; ValueError for an unsupported or bad option."""
        merged = dict(self._opts)
        merged.update(opts)
        rf = RemoteFunction(self._fn, merged)
        rf._code = self._code
        return rf

    def _remote(self, args=None, kwargs=None, **opts):
        """``f.options(**opts).remote(*args, **kwargs)``, as Ray's
        ``f._remote(args=..., kwargs=..., resources=...)`` (the form older
        Ray programs use)."""
        return self.options(**opts).remote(*(args or ()), **(kwargs or {}))

    def remote(self, *args, **kwargs):
        """Submits the task and returns its ObjectRef at once (a list of
        ``num_returns`` refs when that is over 1), as Ray's ``f.remote``.
        ObjectRefs among the top-level arguments are passed as their
        values. RuntimeError before init."""
        core = _core_or_raise()
        if self._code is None:
            self._code = _objectref.dumps(self._fn)
        o = self._opts
        name = o.get("name") or getattr(self._fn, "__qualname__", self.__name__)
        n = o.get("num_returns", 1)
        demand, strategy = _options.demand(o, "task")
        env = _runtime_env.resolve(core, o.get("runtime_env"), core.env_vars)
        refs = core.submit(self._code, name, args, kwargs, n, demand, o.get("max_retries", 3),
                           o.get("retry_exceptions", False), strategy, env)
        return refs[0] if n == 1 else refs


def remote(*args, **opts):
    """@remote or @remote(num_cpus=…, …) on a function (a task) or a class (an actor), as Ray's ray.remote."""
    if len(args) == 1 and not opts and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("@remote takes a function, or keyword options only")
    return lambda fn: _make_remote(fn, opts)


def _make_remote(obj, opts):
    if isinstance(obj, type):
        return ActorClass(obj, opts)
    return RemoteFunction(obj, opts)
