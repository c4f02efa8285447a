"""Seed 002's synchronization patterns on nodeup, written as for Ray (only
the import lines differ): a SignalActor (an async actor) releasing waiting
tasks, and a Queue feeding consumer tasks.

Run against a node on this machine (`nodeup start --head`):
    PYTHONPATH=$(nodeup python path) /usr/bin/python3 examples/python/sync.py
"""

import asyncio

import nodeup as ray
from nodeup.util.queue import Queue

ray.init()


@ray.remote
class SignalActor:
    def __init__(self):
        self.ready_event = asyncio.Event()

    def send(self, clear=False):
        self.ready_event.set()
        if clear:
            self.ready_event.clear()

    async def wait(self, should_wait=True):
        if should_wait:
            await self.ready_event.wait()


@ray.remote
def wait_and_go(signal):
    ray.get(signal.wait.remote())
    return "go!"


signal = SignalActor.remote()
tasks = [wait_and_go.remote(signal) for _ in range(4)]
print("ready...")
# Tasks will all be waiting for the signal.
ready, _ = ray.wait(tasks, num_returns=1, timeout=0.5)
assert ready == [], ready
print("get set..")
ray.get(signal.send.remote())
# Tasks are unblocked.
print(*ray.get(tasks))

# You can pass this object around to different tasks/actors.
queue = Queue(maxsize=100)


@ray.remote
def consumer(queue, n):
    return [f"got work {queue.get(block=True)}" for _ in range(n)]


consumers = [consumer.remote(queue, 5) for _ in range(2)]
[queue.put(i) for i in range(10)]
got = sorted(w for ws in ray.get(consumers) for w in ws)
assert len(got) == 10, got
print(len(got), "work items consumed")
ray.shutdown()
print("sync: ok")
