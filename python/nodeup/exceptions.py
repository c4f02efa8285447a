"""Errors raised by nodeup, named and shaped as Ray's ``ray.exceptions``."""


class RayError(Exception):
    """Base of every nodeup error, as Ray's ``ray.exceptions.RayError``."""


class RayTaskError(RayError):
    """A task raised: re-raised at ``get``. ``as_instanceof_cause()`` gives an
    instance that is also of the original exception's type, as Ray's."""

    def __init__(self, function_name, traceback_str, cause=None, pid=0, node_name=""):
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.pid = pid
        self.node_name = node_name
        super().__init__(self._message())

    def _message(self):
        return (f"{type(self.cause).__name__ if self.cause is not None else 'Error'} in task "
                f"{self.function_name} (pid={self.pid}, node={self.node_name}):\n{self.traceback_str}")

    def __str__(self):
        return self._message()

    def as_instanceof_cause(self):
        """Returns an error of a class deriving from both RayTaskError and
        the cause's class (self when there is no cause or such a class
        cannot be made)."""
        cause = self.cause
        if cause is None or isinstance(cause, RayTaskError):
            return self
        cause_cls = type(cause)
        outer = self
        try:
            class cls(RayTaskError, cause_cls):
                def __init__(self):
                    self.function_name = outer.function_name
                    self.traceback_str = outer.traceback_str
                    self.cause = outer.cause
                    self.pid = outer.pid
                    self.node_name = outer.node_name
                    self.args = (outer._message(),)

                def __getattr__(self, name):
                    return getattr(outer.cause, name)

                def __str__(self):
                    return outer._message()

            name = f"RayTaskError({cause_cls.__name__})"
            cls.__name__ = name
            cls.__qualname__ = name
            return cls()
        except TypeError:
            return self


class GetTimeoutError(RayError, TimeoutError):
    """``get`` did not finish within its timeout (s); also a TimeoutError,
    as Ray's ``ray.exceptions.GetTimeoutError``."""


class WorkerCrashedError(RayError):
    """The worker process died while running the task, more often than
    ``max_retries`` allowed, as Ray's ``ray.exceptions.WorkerCrashedError``."""


class RuntimeEnvSetupError(RayError):
    """The task's or actor's runtime_env could not be set up on the node
    that was to run it (a working dir no node holds, a ``py_executable``
    that is not an executable file there); not retried, as Ray's
    ``ray.exceptions.RuntimeEnvSetupError``."""


class ObjectLostError(RayError):
    """The object's value is gone (its owner or its store copy died), as
    Ray's ``ray.exceptions.ObjectLostError``."""


class TaskCancelledError(RayError):
    """The task was cancelled (``cancel``) before it finished: raised at
    ``get`` of its refs, and in a running task's thread by its worker, as
    Ray's ``ray.exceptions.TaskCancelledError``."""


class RayActorError(RayError):
    """The actor died, or a call on it could not be run (Ray's
    ``ray.exceptions.RayActorError``)."""


class ActorDiedError(RayActorError):
    """The actor is dead: killed (``kill``), its constructor raised, its job
    ended (a non-detached actor), or its worker died with no restarts
    left; or a call was lost with the worker and ``max_task_retries`` did
    not allow running it again. As Ray's ``ray.exceptions.ActorDiedError``,
    a subclass of ``RayActorError``."""
