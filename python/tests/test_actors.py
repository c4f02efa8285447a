"""Named and detached actors, get_actor, kill and restarts (Ray's
ray.get_actor, ray.kill, max_restarts, max_task_retries)."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import PYDIR, until
from nodeup.exceptions import ActorDiedError, RayActorError, RayTaskError


def _driver(node, code, timeout=120):
    """Runs code as a second driver process against node; returns its stdout."""
    env = dict(os.environ, PYTHONPATH=PYDIR, TMPDIR=node.tmp)
    env.pop("NODEUP_ADDRESS", None)
    prog = "import nodeup as ray\nray.init(address=%r)\n" % node.socket + textwrap.dedent(code)
    out = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _counter(ray):
    @ray.remote
    class Counter:
        def __init__(self, start=0):
            self.n = start

        def incr(self):
            self.n += 1
            return self.n

        def pid(self):
            return os.getpid()

    return Counter


def test_get_actor_from_a_second_driver_finds_the_named_actor(ray, node):
    c = _counter(ray).options(name="shared-counter", namespace="ns-a").remote(10)
    assert ray.get(c.incr.remote(), timeout=60) == 11
    out = _driver(node, """
        c = ray.get_actor("shared-counter", namespace="ns-a")
        print("got", ray.get(c.incr.remote(), timeout=60))
    """)
    assert "got 12" in out
    assert ray.get(c.incr.remote(), timeout=60) == 13  # the same actor, its state moved on
    # Another namespace does not see it; Ray raises ValueError.
    with pytest.raises(ValueError, match="shared-counter"):
        ray.get_actor("shared-counter", namespace="ns-b")
    # The name is taken while it lives.
    with pytest.raises(ValueError, match="taken"):
        _counter(ray).options(name="shared-counter", namespace="ns-a").remote()
    ray.kill(c)


def test_detached_actor_outlives_its_driver_and_non_detached_does_not(ray, node):
    _driver(node, """
        @ray.remote
        class Keeper:
            def value(self):
                return "kept"
        Keeper.options(name="keeper", namespace="ns-d", lifetime="detached").remote()
        Keeper.options(name="goner", namespace="ns-d").remote()
        ray.get(ray.get_actor("goner", namespace="ns-d").value.remote(), timeout=60)
        ray.get(ray.get_actor("keeper", namespace="ns-d").value.remote(), timeout=60)
    """)
    k = ray.get_actor("keeper", namespace="ns-d")
    assert ray.get(k.value.remote(), timeout=60) == "kept"

    def goner_gone():
        try:
            ray.get_actor("goner", namespace="ns-d")
            return False
        except ValueError:
            return True
    until("the non-detached actor dies with its job", goner_gone)
    ray.kill(k)


def test_kill_makes_the_next_call_raise_actor_died_error(ray):
    c = _counter(ray).remote()
    assert ray.get(c.incr.remote(), timeout=60) == 1
    ray.kill(c)
    with pytest.raises(ActorDiedError) as info:
        ray.get(c.incr.remote(), timeout=60)
    assert isinstance(info.value, RayActorError)  # as Ray's hierarchy
    with pytest.raises(ValueError):
        ray.kill("not a handle")


def test_kill_with_restart_runs_a_fresh_instance_within_max_restarts(ray):
    c = _counter(ray).options(max_restarts=1).remote()
    assert ray.get(c.incr.remote(), timeout=60) == 1
    pid = ray.get(c.pid.remote(), timeout=60)
    ray.kill(c, no_restart=False)
    # The restarted instance starts from the constructor again, in a new process.
    assert ray.get(c.incr.remote(), timeout=60) == 1
    assert ray.get(c.pid.remote(), timeout=60) != pid
    # Its one restart is used: the next kill leaves it dead.
    ray.kill(c, no_restart=False)
    with pytest.raises(ActorDiedError):
        ray.get(c.incr.remote(), timeout=60)


def test_get_actor_of_an_unknown_name_raises_value_error(ray):
    with pytest.raises(ValueError, match="no-such-actor"):
        ray.get_actor("no-such-actor")


def test_actor_method_num_returns(ray):
    @ray.remote
    class Splitter:
        @ray.method(num_returns=2)
        def halves(self, n):
            return n // 2, n - n // 2

        def triple(self, x):
            return x, x, x

    s = Splitter.remote()
    a, b = s.halves.remote(7)
    assert ray.get([a, b], timeout=60) == [3, 4]
    refs = s.triple.options(num_returns=3).remote("x")
    assert len(refs) == 3 and ray.get(refs, timeout=60) == ["x", "x", "x"]
    assert ray.get(s.triple.remote(1), timeout=60) == (1, 1, 1)

    @ray.remote
    def via_task(h):  # a pickled handle keeps the method's num_returns
        return ray.get(h.halves.remote(9))

    assert ray.get(via_task.remote(s), timeout=60) == [4, 5]
    with pytest.raises(ValueError, match="num_returns"):
        s.triple.options(num_returns=0)
    with pytest.raises(ValueError, match="unsupported"):
        s.triple.options(num_cpus=1)
    bad = s.halves.options(num_returns=3).remote(4)  # it returns 2
    with pytest.raises(RayTaskError, match="num_returns=3"):
        ray.get(bad[0], timeout=60)


def test_calls_given_back_by_a_failed_connection_keep_submission_order():
    """A connection that fails with calls out gives them back one by one,
    in any order; queued again, they stand in the order they were
    submitted, ahead of calls submitted after them."""
    import collections
    import threading
    from nodeup import _actor
    s = _actor._Sender.__new__(_actor._Sender)  # no sending thread: only the queue
    s.cond, s.calls, s.submitted = threading.Condition(), collections.deque(), 0
    calls = [_actor._Call("m", (), {}, f"t{i}", []) for i in range(6)]
    for c in calls:
        s.put(c)
    sent = [s.calls.popleft() for _ in range(4)]  # 0..3 went out on the connection
    for c in (sent[2], sent[0], sent[3], sent[1]):
        s.put(c, front=True)
    assert [c.tid for c in s.calls] == ["t0", "t1", "t2", "t3", "t4", "t5"]
