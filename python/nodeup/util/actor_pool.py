"""``nodeup.util.ActorPool``, as Ray's ``ray.util.ActorPool``: spreads work
over a fixed set of actors, one call per idle actor at a time."""

from .._api import get, wait
from .._objectref import ObjectRef


class ActorPool:
    """Runs work on a list of actor handles, as Ray's ``ray.util.ActorPool``.
    ``fn(actor, value)`` starts the work on one idle actor and returns its
    ObjectRef; a value submitted while no actor is idle waits in the pool
    until one is. Results come back in submission order (``get_next``,
    ``map``) or as they finish (``get_next_unordered``, ``map_unordered``);
    the two orders cannot be mixed in one round of submissions."""

    def __init__(self, actors):
        actors = list(actors)
        self._idle_actors = actors
        self._future_to_actor = {}  # ObjectRef -> (submission index, actor)
        self._index_to_future = {}  # submission index -> ObjectRef
        self._next_task_index = 0
        self._next_return_index = 0
        self._pending_submits = []  # (fn, value) waiting for an idle actor

    def map(self, fn, values):
        """Submits ``fn(actor, v)`` for every v in ``values`` and returns an
        iterator over the results in the order of ``values``, as Ray's
        ``map``. Results of earlier submissions not yet fetched, and
        submissions still waiting for an actor, are dropped first. A
        task's error is raised when its result is reached."""
        self._drop_pending_results()
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield self.get_next()

        return results()

    def map_unordered(self, fn, values):
        """``map`` whose iterator yields the results as they finish, as Ray's
        ``map_unordered``."""
        self._drop_pending_results()
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield self.get_next_unordered()

        return results()

    def _drop_pending_results(self):
        # As Ray's map: the results of an earlier round that were never
        # fetched are dropped, and their actors count as idle again (a call
        # still running there delays the actor's next one).
        self._pending_submits.clear()
        for _, actor in self._future_to_actor.values():
            self._idle_actors.append(actor)
        self._future_to_actor.clear()
        self._index_to_future.clear()
        self._next_return_index = self._next_task_index

    def submit(self, fn, value):
        """Starts ``fn(actor, value)`` (which must return an ObjectRef) on an
        idle actor, or queues it until one is idle, as Ray's ``submit``.
        TypeError when fn returns something other than an ObjectRef."""
        if not self._idle_actors:
            self._pending_submits.append((fn, value))
            return
        actor = self._idle_actors.pop()
        future = fn(actor, value)
        if not isinstance(future, ObjectRef):
            self._idle_actors.append(actor)
            raise TypeError(f"ActorPool.submit: fn returned {type(future).__name__}; want the ObjectRef of "
                            "an actor call, e.g. lambda a, v: a.method.remote(v)")
        self._future_to_actor[future] = (self._next_task_index, actor)
        self._index_to_future[self._next_task_index] = future
        self._next_task_index += 1

    def has_next(self):
        """True while a submitted result has not been fetched, as Ray's."""
        return bool(self._future_to_actor)

    def get_next(self, timeout=None, ignore_if_timedout=False):
        """The next result in submission order, waiting up to ``timeout``
        seconds (None: forever), as Ray's ``get_next``. Raises
        StopIteration when nothing is pending, ValueError after
        ``get_next_unordered`` in the same round, TimeoutError when the
        time runs out (with ``ignore_if_timedout`` that result is dropped
        and its actor freed first), or the task's error."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        future = self._index_to_future[self._next_return_index]
        timed_out = False
        if timeout is not None:
            ready, _ = wait([future], timeout=timeout)
            if not ready:
                if not ignore_if_timedout:
                    raise TimeoutError(f"Timed out waiting for result after {timeout} s")
                timed_out = True
        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(future)
        self._return_actor(actor)
        if timed_out:
            raise TimeoutError(f"Timed out waiting for result after {timeout} s; the task {future} is dropped")
        return get(future)

    def get_next_unordered(self, timeout=None, ignore_if_timedout=False):
        """Any next finished result, waiting up to ``timeout`` seconds (None:
        forever), as Ray's ``get_next_unordered``. Raises StopIteration
        when nothing is pending, TimeoutError when the time runs out, or
        the task's error."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        ready, _ = wait(list(self._future_to_actor), num_returns=1, timeout=timeout)
        if not ready:
            raise TimeoutError(f"Timed out waiting for result after {timeout} s")
        future = ready[0]
        index, actor = self._future_to_actor.pop(future)
        self._return_actor(actor)
        del self._index_to_future[index]
        self._next_return_index = max(self._next_return_index, index + 1)
        return get(future)

    def _return_actor(self, actor):
        self._idle_actors.append(actor)
        if self._pending_submits:
            self.submit(*self._pending_submits.pop(0))

    def has_free(self):
        """True when an actor is idle and no submission waits, as Ray's."""
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self):
        """Removes an idle actor from the pool and returns it, or None when
        none is free, as Ray's ``pop_idle``."""
        if self.has_free():
            return self._idle_actors.pop()
        return None

    def push(self, actor):
        """Adds ``actor`` to the pool (it takes a waiting submission at
        once), as Ray's ``push``; ValueError when it is in the pool already."""
        busy = [a for _, a in self._future_to_actor.values()]
        if actor in self._idle_actors or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)
