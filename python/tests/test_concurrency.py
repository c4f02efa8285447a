"""Threaded and async actors (Ray's max_concurrency and async def methods),
and ``await ref``."""

import asyncio
import threading
import time

import pytest

from nodeup.exceptions import RayTaskError


def _peak_counter(ray):
    @ray.remote
    class Peak:
        """Counts how many hold calls run at once."""

        def __init__(self):
            self.lock = threading.Lock()
            self.running = self.peak = 0

        def hold(self, seconds):
            with self.lock:
                self.running += 1
                self.peak = max(self.peak, self.running)
            time.sleep(seconds)  # the work whose overlap is measured
            with self.lock:
                self.running -= 1

        def get_peak(self):
            return self.peak

    return Peak


def test_threaded_actor_runs_up_to_max_concurrency_calls_at_once(ray):
    @ray.remote(max_concurrency=3)
    class Meeting:
        def __init__(self):
            self.barrier = threading.Barrier(3, timeout=30)

        def meet(self, i):
            # Passes only when 3 calls are inside at once: a one-at-a-time
            # actor would break the barrier after 30 s.
            self.barrier.wait()
            return i

    m = Meeting.remote()
    assert ray.get([m.meet.remote(i) for i in range(6)], timeout=90) == list(range(6))

    p = _peak_counter(ray).options(max_concurrency=2).remote()
    ray.get([p.hold.remote(0.2) for _ in range(6)], timeout=60)
    assert ray.get(p.get_peak.remote(), timeout=30) == 2

    one = _peak_counter(ray).remote()  # default: one call at a time
    ray.get([one.hold.remote(0.05) for _ in range(4)], timeout=60)
    assert ray.get(one.get_peak.remote(), timeout=30) == 1


def test_max_concurrency_must_be_a_positive_int(ray):
    with pytest.raises(ValueError, match="max_concurrency"):
        _peak_counter(ray).options(max_concurrency=0)
    with pytest.raises(ValueError, match="max_concurrency"):
        _peak_counter(ray).options(max_concurrency="4")


def _signal(ray):
    @ray.remote
    class SignalActor:
        """The seeds' SignalActor (Ray's ray.test_utils.SignalActor)."""

        def __init__(self):
            self.ready_event = asyncio.Event()

        def send(self, clear=False):
            self.ready_event.set()
            if clear:
                self.ready_event.clear()

        async def wait(self, should_wait=True):
            if should_wait:
                await self.ready_event.wait()

    return SignalActor


def test_signal_actor_releases_waiting_tasks_and_calls(ray):
    signal = _signal(ray).remote()

    @ray.remote
    def wait_and_go(signal):
        ray.get(signal.wait.remote())
        return "go"

    tasks = [wait_and_go.remote(signal) for _ in range(4)]
    waits = [signal.wait.remote() for _ in range(50)]
    # All wait on the one event; none is done before the signal.
    ready, _ = ray.wait(tasks + waits, num_returns=1, timeout=1.0)
    assert ready == []
    ray.get(signal.send.remote(), timeout=30)
    assert ray.get(tasks, timeout=60) == ["go"] * 4
    assert ray.get(waits, timeout=30) == [None] * 50
    assert ray.get(signal.wait.remote(), timeout=30) is None  # set stays set
    ray.get(signal.send.remote(clear=True), timeout=30)
    assert ray.get(signal.wait.remote(False), timeout=30) is None


def test_async_actor_max_concurrency_caps_running_coroutines(ray):
    @ray.remote(max_concurrency=2)
    class AsyncPeak:
        def __init__(self):
            self.running = self.peak = 0

        async def hold(self, seconds):
            self.running += 1
            self.peak = max(self.peak, self.running)
            await asyncio.sleep(seconds)  # the work whose overlap is measured
            self.running -= 1

        def get_peak(self):
            return self.peak

    a = AsyncPeak.remote()
    ray.get([a.hold.remote(0.2) for _ in range(6)], timeout=60)
    assert ray.get(a.get_peak.remote(), timeout=30) == 2


def test_await_refs_inside_an_async_actor_and_its_runtime_context(ray):
    @ray.remote
    def square(x):
        return x * x

    @ray.remote
    def boom():
        raise KeyError("nope")

    @ray.remote
    class Awaiter:
        async def total(self, refs):
            return sum([await r for r in refs])

        async def nested(self, x):
            return await square.remote(x)

        async def failing(self):
            try:
                await boom.remote()
            except KeyError as e:
                return f"caught {type(e).__name__}: {e}"

        async def my_task_id(self, seconds):
            await asyncio.sleep(seconds)  # others run meanwhile
            return ray.get_runtime_context().get_task_id()

    a = Awaiter.remote()
    refs = [square.remote(i) for i in range(5)] + [ray.put(100)]
    assert ray.get(a.total.remote(refs), timeout=60) == 0 + 1 + 4 + 9 + 16 + 100
    big = ray.put(b"x" * (300 << 10))  # in the node's store

    @ray.remote
    class Reader:
        async def size(self, refs):
            return len(await refs[0])

    assert ray.get(Reader.remote().size.remote([big]), timeout=60) == 300 << 10
    assert ray.get(a.nested.remote(7), timeout=60) == 49
    caught = ray.get(a.failing.remote(), timeout=60)
    assert caught.startswith("caught RayTaskError(KeyError)") and "nope" in caught
    calls = [a.my_task_id.remote(0.3 - 0.05 * i) for i in range(5)]
    assert ray.get(calls, timeout=60) == [r.hex().rsplit(".", 1)[0] for r in calls]


def test_await_ref_in_the_driver(ray):
    @ray.remote
    def add(a, b):
        return a + b

    @ray.remote
    def fail():
        raise ValueError("bad")

    async def main():
        x = await add.remote(1, 2)
        ys = await asyncio.gather(*[add.remote(i, i) for i in range(10)])
        with pytest.raises(ValueError, match="bad"):
            await fail.remote()
        return x, ys

    assert asyncio.run(main()) == (3, [2 * i for i in range(10)])
    assert add.remote(2, 3).future().result(timeout=60) == 5
    with pytest.raises(RayTaskError):
        fail.remote().future().result(timeout=60)


def test_async_actor_starts_each_callers_calls_in_submission_order(ray):
    @ray.remote
    class Log:
        def __init__(self):
            self.items = []

        async def append(self, i):
            self.items.append(i)  # before any await: in start order

        def items_(self):
            return self.items

    log = Log.remote()
    refs = [log.append.remote(i) for i in range(300)]
    ray.get(refs, timeout=60)
    assert ray.get(log.items_.remote(), timeout=30) == list(range(300))


def test_cancel_interrupts_a_running_async_actor_call(ray):
    from conftest import until
    from nodeup.exceptions import TaskCancelledError

    @ray.remote
    class Sleeper:
        def __init__(self):
            self.started, self.saw_cancel = set(), False

        async def forever(self, i):
            self.started.add(i)
            try:
                await asyncio.sleep(600)
            except asyncio.CancelledError:
                self.saw_cancel = True
                raise

        def state(self):
            return sorted(self.started), self.saw_cancel

    s = Sleeper.remote()
    ref = s.forever.remote(1)
    until("the call started", lambda: ray.get(s.state.remote(), timeout=30)[0] == [1])
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)
    assert ray.get(s.state.remote(), timeout=30) == ([1], True)  # it saw CancelledError at its await
    other = s.forever.remote(2)  # the actor lives on
    until("the second call started", lambda: ray.get(s.state.remote(), timeout=30)[0] == [1, 2])
    ray.cancel(other)
    with pytest.raises(TaskCancelledError):
        ray.get(other, timeout=30)

    # A sync actor's call that is already running runs on (as Ray's).
    @ray.remote
    class Gate:
        def __init__(self):
            self.event, self.entered = asyncio.Event(), False

        def enter(self):
            self.entered = True

        def has_entered(self):
            return self.entered

        def open(self):
            self.event.set()

        async def wait(self):
            await self.event.wait()

    @ray.remote
    class Worker:
        def work(self, gate):
            ray.get(gate.enter.remote())
            ray.get(gate.wait.remote())
            return "done"

    gate, w = Gate.remote(), Worker.remote()
    held = w.work.remote(gate)
    until("the call runs", lambda: ray.get(gate.has_entered.remote(), timeout=30))
    ray.cancel(held)
    ray.get(gate.open.remote(), timeout=30)
    assert ray.get(held, timeout=30) == "done"


def _gate(ray):
    @ray.remote
    class Gate:
        def __init__(self):
            self.event = asyncio.Event()

        def open(self):
            self.event.set()

        async def wait(self):
            await self.event.wait()

    return Gate


def test_concurrency_groups_run_beside_a_busy_default_group(ray):
    gate = _gate(ray).remote()

    @ray.remote(concurrency_groups={"io": 2})
    class Sync:
        def busy(self, gate):  # the default group: one call at a time
            ray.get(gate.wait.remote())
            return "busy done"

        @ray.method(concurrency_group="io")
        def io(self, x):
            return x + 1

        def plain(self, x):
            return x * 10

    s = Sync.remote()
    busy = s.busy.remote(gate)
    # The default group is held by busy; the io group still runs.
    assert ray.get(s.io.remote(1), timeout=30) == 2
    assert ray.get(s.plain.options(concurrency_group="io").remote(2), timeout=30) == 20
    with pytest.raises(ValueError, match="nope"):
        ray.get(s.plain.options(concurrency_group="nope").remote(3), timeout=30)
    plain = s.plain.remote(4)  # default group: waits behind busy
    assert ray.wait([busy, plain], num_returns=1, timeout=0.5)[0] == []
    ray.get(gate.open.remote(), timeout=30)
    assert ray.get([busy, plain], timeout=30) == ["busy done", 40]

    gate2 = _gate(ray).remote()

    @ray.remote(concurrency_groups={"io": 1})
    class Async:
        def block(self, gate):  # a sync method blocks the default group's loop
            ray.get(gate.wait.remote())
            return "unblocked"

        @ray.method(concurrency_group="io")
        async def ping(self):
            await asyncio.sleep(0)
            return "pong"

    a = Async.remote()
    blocked = a.block.remote(gate2)
    assert ray.get(a.ping.remote(), timeout=30) == "pong"  # the io group has its own loop
    ray.get(gate2.open.remote(), timeout=30)
    assert ray.get(blocked, timeout=30) == "unblocked"

    class Bad:
        @ray.method(concurrency_group="missing")
        def f(self):
            return 1

    with pytest.raises(ValueError, match="missing"):
        ray.remote(Bad).remote()
    with pytest.raises(ValueError, match="concurrency_groups"):
        ray.remote(concurrency_groups={"io": 0})(Bad)
