"""``nodeup.util.queue``, as Ray's ``ray.util.queue``: a first-in first-out
queue shared by drivers, tasks and actors, held by an async actor."""

import asyncio
import queue as _stdqueue

from .._actor import kill
from .._api import get
from .._remote_function import remote


class Empty(_stdqueue.Empty):
    """Raised by a non-blocking get on an empty queue, or a get whose
    timeout ran out, as Ray's ``ray.util.queue.Empty`` (a ``queue.Empty``)."""


class Full(_stdqueue.Full):
    """Raised by a non-blocking put on a full queue, or a put whose timeout
    ran out, as Ray's ``ray.util.queue.Full`` (a ``queue.Full``)."""


class Queue:
    """A FIFO queue of up to ``maxsize`` items (0 or less: unbounded) in an
    actor of its own, as Ray's ``ray.util.queue.Queue``. The queue object
    pickles (as its actor's handle), so it may be passed to tasks and
    actors, which then use the same queue. ``actor_options`` are options of
    that actor (``num_cpus``, ``name``, ``lifetime``, ...; default
    ``num_cpus=0``). Items are pickled as task arguments are. Raises
    RuntimeError before init, ValueError for bad actor options."""

    def __init__(self, maxsize=0, actor_options=None):
        if isinstance(maxsize, bool) or not isinstance(maxsize, int):
            raise TypeError(f"Queue(maxsize={maxsize!r}): want an int")
        opts = dict(actor_options or {})
        opts.setdefault("num_cpus", 0)
        self.maxsize = maxsize
        self.actor = remote(_QueueActor).options(**opts).remote(maxsize)

    def __len__(self):
        return self.size()

    def size(self):
        """The number of items in the queue now (int), as Ray's."""
        return get(self.actor.qsize.remote())

    def qsize(self):
        """``size()``, as Ray's ``qsize``."""
        return self.size()

    def empty(self):
        """True when the queue holds no item now, as Ray's."""
        return get(self.actor.empty.remote())

    def full(self):
        """True when the queue holds maxsize items now (never when
        unbounded), as Ray's."""
        return get(self.actor.full.remote())

    def put(self, item, block=True, timeout=None):
        """Adds item at the end, as Ray's ``Queue.put``: with ``block``
        waits for room, at most ``timeout`` seconds (None: forever), then
        raises Full; without, raises Full at once when the queue is full.
        ValueError for a negative timeout."""
        if not block:
            try:
                get(self.actor.put_nowait.remote(item))
            except asyncio.QueueFull:
                raise Full("queue is full") from None
            return
        _check_timeout(timeout)
        try:
            get(self.actor.put.remote(item, timeout))
        except Full:
            raise Full(f"queue still full after {timeout} s") from None

    async def put_async(self, item, block=True, timeout=None):
        """``put`` for a coroutine: awaits the actor instead of blocking the
        thread, as Ray's ``put_async``; same errors."""
        if not block:
            try:
                await self.actor.put_nowait.remote(item)
            except asyncio.QueueFull:
                raise Full("queue is full") from None
            return
        _check_timeout(timeout)
        try:
            await self.actor.put.remote(item, timeout)
        except Full:
            raise Full(f"queue still full after {timeout} s") from None

    def get(self, block=True, timeout=None):
        """Removes and returns the first item, as Ray's ``Queue.get``: with
        ``block`` waits for one, at most ``timeout`` seconds (None:
        forever), then raises Empty; without, raises Empty at once when the
        queue is empty. ValueError for a negative timeout."""
        if not block:
            try:
                return get(self.actor.get_nowait.remote())
            except asyncio.QueueEmpty:
                raise Empty("queue is empty") from None
        _check_timeout(timeout)
        try:
            return get(self.actor.get.remote(timeout))
        except Empty:
            raise Empty(f"queue still empty after {timeout} s") from None

    async def get_async(self, block=True, timeout=None):
        """``get`` for a coroutine: awaits the actor instead of blocking the
        thread, as Ray's ``get_async``; same errors."""
        if not block:
            try:
                return await self.actor.get_nowait.remote()
            except asyncio.QueueEmpty:
                raise Empty("queue is empty") from None
        _check_timeout(timeout)
        try:
            return await self.actor.get.remote(timeout)
        except Empty:
            raise Empty(f"queue still empty after {timeout} s") from None

    def put_nowait(self, item):
        """``put(item, block=False)``: Full when the queue is full."""
        return self.put(item, block=False)

    def put_nowait_batch(self, items):
        """Adds every item of the list ``items`` or, when they do not all
        fit, none and raises Full, as Ray's ``put_nowait_batch``; TypeError
        for anything but a list or tuple."""
        if not isinstance(items, (list, tuple)):
            raise TypeError(f"put_nowait_batch takes a list, not {type(items).__name__}")
        try:
            get(self.actor.put_nowait_batch.remote(list(items)))
        except Full as e:
            raise Full(str(e.args[0]) if e.args else "queue is full") from None

    def get_nowait(self):
        """``get(block=False)``: Empty when the queue is empty."""
        return self.get(block=False)

    def get_nowait_batch(self, num_items):
        """Removes and returns the first ``num_items`` items (a list), or
        none and raises Empty when fewer are queued, as Ray's
        ``get_nowait_batch``; ValueError for a negative or non-int count."""
        if isinstance(num_items, bool) or not isinstance(num_items, int) or num_items < 0:
            raise ValueError(f"get_nowait_batch({num_items!r}): want an int >= 0")
        try:
            return get(self.actor.get_nowait_batch.remote(num_items))
        except Empty as e:
            raise Empty(str(e.args[0]) if e.args else "queue is empty") from None

    def shutdown(self, force=False, grace_period_s=5):
        """Ends the queue's actor, as Ray's ``Queue.shutdown``: later calls
        raise ActorDiedError (Ray's raise AttributeError). ``force`` and
        ``grace_period_s`` are accepted for Ray's signature; the actor is
        killed at once either way."""
        kill(self.actor)


def _check_timeout(timeout):
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
        raise ValueError(f"timeout={timeout!r}: must be a non-negative number or None")


class _QueueActor:
    """The actor holding a Queue's items in an asyncio.Queue (async
    methods, so blocked puts and gets wait without holding a thread)."""

    def __init__(self, maxsize):
        self.maxsize = maxsize
        self.queue = asyncio.Queue(maxsize)

    def qsize(self):
        return self.queue.qsize()

    def empty(self):
        return self.queue.empty()

    def full(self):
        return self.queue.full()

    async def put(self, item, timeout=None):
        try:
            await asyncio.wait_for(self.queue.put(item), timeout)
        except asyncio.TimeoutError:
            raise Full(f"queue still full after {timeout} s") from None

    async def get(self, timeout=None):
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise Empty(f"queue still empty after {timeout} s") from None

    def put_nowait(self, item):
        self.queue.put_nowait(item)

    def put_nowait_batch(self, items):
        if self.maxsize > 0 and len(items) + self.qsize() > self.maxsize:
            raise Full(f"cannot add {len(items)} items to a queue of {self.qsize()} with maxsize {self.maxsize}")
        for item in items:
            self.queue.put_nowait(item)

    def get_nowait(self):
        return self.queue.get_nowait()

    def get_nowait_batch(self, num_items):
        if num_items > self.qsize():
            raise Empty(f"cannot get {num_items} items from a queue of {self.qsize()}")
        return [self.queue.get_nowait() for _ in range(num_items)]
