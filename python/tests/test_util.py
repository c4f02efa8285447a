"""nodeup.util.queue.Queue and nodeup.util.ActorPool, as Ray's."""

import asyncio

import pytest

from nodeup.exceptions import RayActorError
from nodeup.util import ActorPool
from nodeup.util.queue import Empty, Full, Queue


def test_queue_feeds_consumer_tasks_as_in_the_seed(ray):
    queue = Queue(maxsize=100)

    @ray.remote
    def consumer(queue, n):
        return [queue.get(block=True) for _ in range(n)]

    consumers = [consumer.remote(queue, 5) for _ in range(2)]
    ready, _ = ray.wait(consumers, num_returns=1, timeout=0.5)
    assert ready == []  # both wait for items
    for i in range(10):
        queue.put(i)
    got = ray.get(consumers, timeout=60)
    assert sorted(got[0] + got[1]) == list(range(10))
    assert got[0] == sorted(got[0]) and got[1] == sorted(got[1])  # FIFO
    assert queue.empty() and queue.size() == 0


def test_queue_bounds_timeouts_and_batches(ray):
    q = Queue(maxsize=2)
    assert q.empty() and not q.full() and len(q) == 0
    with pytest.raises(Empty):
        q.get_nowait()
    with pytest.raises(Empty):
        q.get(timeout=0.2)
    q.put("a")
    q.put_nowait("b")
    assert q.full() and q.qsize() == 2
    with pytest.raises(Full):
        q.put_nowait("c")
    with pytest.raises(Full):
        q.put("c", timeout=0.2)
    with pytest.raises(Full):
        q.put_nowait_batch(["c"])
    with pytest.raises(Empty):
        q.get_nowait_batch(3)
    assert q.get_nowait_batch(2) == ["a", "b"]
    q.put_nowait_batch(["x", "y"])
    assert q.get() == "x" and q.get(block=False) == "y"
    with pytest.raises(ValueError, match="timeout"):
        q.get(timeout=-1)
    with pytest.raises(ValueError, match="timeout"):
        q.put(1, timeout=-1)
    # A put blocked on a full queue goes through once an actor makes room.
    q.put_nowait_batch([1, 2])

    @ray.remote
    def take(q):
        return q.get()

    blocked = Queue()

    @ray.remote
    def put_when_told(q, go, item):
        go.get()  # waits for the driver's word
        q.put(item)
        return "put"

    done = put_when_told.remote(q, blocked, 3)
    blocked.put("go")
    ready, _ = ray.wait([done], timeout=0.5)
    assert ready == []  # q is full: the put waits
    assert ray.get(take.remote(q), timeout=60) == 1
    assert ray.get(done, timeout=60) == "put"
    assert [q.get(), q.get()] == [2, 3]


def test_queue_async_api_and_shutdown(ray):
    q = Queue(maxsize=1)

    async def main():
        await q.put_async(1)
        with pytest.raises(Full):
            await q.put_async(2, block=False)
        with pytest.raises(Full):
            await q.put_async(2, timeout=0.1)
        first = await q.get_async()
        with pytest.raises(Empty):
            await q.get_async(block=False)
        with pytest.raises(Empty):
            await q.get_async(timeout=0.1)
        return first

    assert asyncio.run(main()) == 1

    @ray.remote
    class Producer:
        async def produce(self, q, n):
            for i in range(n):
                await q.put_async(i)

    p = Producer.remote()
    done = p.produce.remote(q, 3)  # maxsize 1: it waits for each get
    assert [q.get(timeout=30) for _ in range(3)] == [0, 1, 2]
    ray.get(done, timeout=30)
    q.shutdown()
    with pytest.raises(RayActorError):
        q.size()


def _doubler(ray):
    @ray.remote
    class Doubler:
        def double(self, v):
            return 2 * v

        def double_after(self, signal, v):
            if signal is not None:
                ray.get(signal.get.remote())
            return 2 * v

    return Doubler


def test_actor_pool_map_and_map_unordered(ray):
    D = _doubler(ray)
    pool = ActorPool([D.remote(), D.remote()])
    assert list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4, 5])) == [2, 4, 6, 8, 10]
    assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(6))) == [0, 2, 4, 6, 8, 10]
    assert not pool.has_next()
    with pytest.raises(StopIteration):
        pool.get_next()
    with pytest.raises(TypeError, match="ObjectRef"):
        pool.submit(lambda a, v: v, 1)


def test_actor_pool_submit_orders_and_idle_actors(ray):
    @ray.remote
    class Gate:
        def __init__(self):
            import asyncio as aio
            self.event = aio.Event()

        def open(self):
            self.event.set()

        async def get(self):
            await self.event.wait()

    D = _doubler(ray)
    gate = Gate.remote()
    a1, a2 = D.remote(), D.remote()
    pool = ActorPool([a1, a2])
    pool.submit(lambda a, v: a.double_after.remote(gate, v), 1)  # held until the gate opens
    pool.submit(lambda a, v: a.double_after.remote(None, v), 2)
    pool.submit(lambda a, v: a.double.remote(v), 3)  # no idle actor: waits in the pool
    assert not pool.has_free() and pool.pop_idle() is None
    # In submission order the first is due, and it is held.
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.3)
    # 2 finishes first; its actor is then free and takes 3, which finishes
    # while 1 is still held.
    assert pool.get_next_unordered(timeout=30) == 4
    assert pool.get_next_unordered(timeout=30) == 6
    with pytest.raises(TimeoutError):
        pool.get_next_unordered(timeout=0.3)
    ray.get(gate.open.remote(), timeout=30)
    assert pool.get_next_unordered(timeout=30) == 2
    assert not pool.has_next() and pool.has_free()
    idle = pool.pop_idle()
    assert idle in (a1, a2)
    with pytest.raises(ValueError, match="already"):
        pool.push(a1 if idle == a2 else a2)
    pool.push(idle)
    with pytest.raises(ValueError, match="already"):
        pool.push(idle)
    pool.submit(lambda a, v: a.double.remote(v), 10)
    pool.submit(lambda a, v: a.double.remote(v), 11)
    assert [pool.get_next(timeout=30), pool.get_next(timeout=30)] == [20, 22]
