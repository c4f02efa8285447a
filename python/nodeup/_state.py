"""The process's one core worker (driver or worker)."""

import threading

_lock = threading.Lock()
_core = None
_is_worker = False


def set_core(core, is_worker=False):
    global _core, _is_worker
    with _lock:
        _core, _is_worker = core, is_worker


def get_core():
    return _core


def is_worker():
    return _is_worker


def core_or_raise():
    """The process's core worker; RuntimeError before init (Ray raises
    when its API is used before ray.init)."""
    core = _core
    if core is None:
        raise RuntimeError("nodeup is not initialized: call nodeup.init() first")
    return core
