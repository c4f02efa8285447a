"""Object references (Ray's ObjectRef) and the pickling of values, a
leaf below the core worker: placement groups and the core worker both
make refs without importing each other."""

import threading

import cloudpickle

from . import _state


class ObjectRef:
    """A reference to an object, as Ray's ObjectRef: ``id`` (str) and
    ``owner``, the RPC address (``host:port``) of the process that owns it.
    It pickles, so it may be passed in arguments, values and returns."""

    __slots__ = ("id", "owner", "__weakref__")

    def __init__(self, id, owner):
        self.id = id
        self.owner = owner

    def __reduce__(self):
        # A ref that leaves this process may be held elsewhere: its owner no
        # longer frees the object when the local handle goes (Core.release).
        core = _state.get_core()
        if core is not None:
            core.escaped(self.id)
        return (ObjectRef, (self.id, self.owner))

    def __repr__(self):
        return f"ObjectRef({self.id})"

    def __eq__(self, other):
        return isinstance(other, ObjectRef) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def hex(self):
        """The object's ID (str), as Ray's ``ObjectRef.hex()``."""
        return self.id

    def __await__(self):
        """``await ref`` in a coroutine gives its value (or raises its
        task's error) without blocking the event loop, as Ray's;
        RuntimeError before init."""
        core = _state.get_core()
        if core is None:
            raise RuntimeError("nodeup is not initialized: call nodeup.init() first")
        return core.get_async(self).__await__()

    def future(self):
        """A concurrent.futures.Future that gets this ref's value (or its
        error), as Ray's ``ObjectRef.future()``; RuntimeError before init."""
        import concurrent.futures
        core = _state.get_core()
        if core is None:
            raise RuntimeError("nodeup is not initialized: call nodeup.init() first")
        fut = concurrent.futures.Future()

        def done():
            try:
                fut.set_result(core.get([self])[0])
            except BaseException as e:
                fut.set_exception(e)

        core.on_ready(self, lambda: threading.Thread(target=done, daemon=True).start())
        return fut


def dumps(value):
    """value cloudpickled with protocol 5 (bytes); errors of pickling propagate."""
    return cloudpickle.dumps(value, protocol=5)
