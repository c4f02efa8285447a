"""nodeup's Python SDK: Ray Core's API (``import nodeup as ray``) on a
nodeup cluster, speaking nodeup's wire protocol (docs/python.md).

This file only re-exports: the API lives in private modules, as Ray's in
``ray/_private/worker.py`` (``_api``: init, get, put, wait, ...;
``_remote_function``: ``@remote``; ``_actor``: actors; ``_core``: the core
worker). ``import nodeup`` also brings ``nodeup.util``, as ``import ray``
brings ``ray.util``."""

from . import accelerators
from . import exceptions
from ._actor import ActorClass, ActorHandle, get_actor, kill, method
from ._api import (available_resources, cancel, cluster_resources, get, get_gpu_ids, get_runtime_context, init,
                   is_initialized, nodes, put, shutdown, wait)
from ._api import _core_or_raise  # noqa: F401 (tests and tools reach the core worker through it)
from ._objectref import ObjectRef
from ._remote_function import RemoteFunction, remote
from . import util

__all__ = ["init", "shutdown", "is_initialized", "remote", "get", "put", "wait", "cluster_resources",
           "available_resources", "nodes", "ObjectRef", "ActorHandle", "ActorClass", "RemoteFunction", "exceptions",
           "get_actor", "kill", "cancel", "get_runtime_context", "get_gpu_ids", "accelerators", "method", "util"]
