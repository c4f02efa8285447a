"""The Python SDK against a real node: tasks, objects, errors, retries."""

import os
import subprocess
import sys
import time

import cloudpickle
import pytest

import nodeup
from nodeup import _protocol as P
from nodeup.exceptions import GetTimeoutError, RayTaskError, WorkerCrashedError

from conftest import PYDIR, REPO, NODEUP, until

# This module is not importable in the workers: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@nodeup.remote
def square(x):
    return x * x


@nodeup.remote
def echo(*args, **kwargs):
    return args, kwargs


@nodeup.remote
def sleepy(seconds):
    start = time.time()
    time.sleep(seconds)
    return start, time.time(), os.getpid()


def test_task_returns_value(ray):
    assert ray.get(square.remote(7)) == 49
    assert ray.get(echo.remote(1, "a", k=b"v")) == ((1, "a"), {"k": b"v"})


def test_get_list(ray):
    refs = [square.remote(i) for i in range(10)]
    assert ray.get(refs) == [i * i for i in range(10)]


def test_put_get_1mib(ray):
    value = os.urandom(1 << 20)
    ref = ray.put(value)
    assert ray.get(ref) == value
    # The worker reads the 1 MiB argument from the owner's store copy, and
    # its 1 MiB result comes back through the store too.
    @ray.remote
    def reverse(b):
        return b[::-1]
    assert ray.get(reverse.remote(ref)) == value[::-1]
    assert ray.get(reverse.remote(value)) == value[::-1]


def test_ref_arguments_and_options(ray):
    small = ray.put(6)
    assert ray.get(square.remote(small)) == 36
    assert ray.get(square.options(num_cpus=0.5, name="sq-half").remote(square.remote(3))) == 81


def test_wait_with_timeout(ray):
    slow = sleepy.remote(30)
    fast = square.remote(2)
    ready, not_ready = ray.wait([slow, fast], num_returns=1, timeout=20)
    assert ready == [fast] and not_ready == [slow]
    t0 = time.monotonic()
    ready, not_ready = ray.wait([slow], timeout=0.3)
    assert ready == [] and not_ready == [slow]
    assert time.monotonic() - t0 >= 0.3
    with pytest.raises(GetTimeoutError):
        ray.get(slow, timeout=0.2)
    with pytest.raises(TimeoutError):  # as Ray's, GetTimeoutError is a TimeoutError
        ray.get([fast, slow], timeout=0.2)


def test_task_error_has_original_type_and_remote_traceback(ray):
    class QuotaError(ValueError):
        def __init__(self, msg, quota):
            super().__init__(msg)
            self.quota = quota

    @ray.remote
    def fails_deep(n):
        def inner_helper():
            raise QuotaError(f"over quota by {n}", quota=n)
        inner_helper()

    with pytest.raises(ValueError) as info:
        ray.get(fails_deep.remote(5))
    e = info.value
    assert isinstance(e, RayTaskError)
    assert isinstance(e, QuotaError)
    assert e.quota == 5
    assert "over quota by 5" in str(e)
    # The remote traceback names the frames that ran in the worker.
    assert "inner_helper" in e.traceback_str and "fails_deep" in e.traceback_str
    assert e.pid != os.getpid()


def test_num_returns_two(ray):
    @ray.remote(num_returns=2)
    def pair(x):
        return x, x + 1

    a, b = pair.remote(1)
    assert ray.get(a) == 1 and ray.get(b) == 2
    c, d = pair.options(num_returns=2).remote(10)
    assert ray.get([c, d]) == [10, 11]


def test_tasks_run_in_parallel(ray):
    # Two 1 s tasks on the 2-CPU node: their run times overlap.
    (s1, e1, p1), (s2, e2, p2) = ray.get([sleepy.remote(1), sleepy.remote(1)])
    assert max(s1, s2) < min(e1, e2), f"tasks ran [{s1}, {e1}] and [{s2}, {e2}]: no overlap"
    # Each concurrent lease has a worker process of its own, so CPU-bound
    # Python tasks do not share one interpreter lock.
    assert p1 != p2


def test_max_retries_after_worker_crash(ray, tmp_path):
    marker = str(tmp_path / "crashed-once")

    @ray.remote(max_retries=1)
    def crash_once(path):
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(1)
        return "survived"

    assert ray.get(crash_once.remote(marker), timeout=60) == "survived"

    marker2 = str(tmp_path / "crashed-again")
    with pytest.raises(WorkerCrashedError):
        ray.get(crash_once.options(max_retries=0).remote(marker2), timeout=60)


def test_cluster_resources_and_nodes(ray):
    assert ray.cluster_resources()["CPU"] == 2
    ns = ray.nodes()
    assert len(ns) == 1 and ns[0]["Alive"] and ns[0]["Resources"]["CPU"] == 2


def test_remote_function_not_callable_and_bad_options():
    with pytest.raises(TypeError):
        square(3)
    with pytest.raises(ValueError):
        nodeup.remote(num_cpus=1, placement_group=object())(lambda: 1)
    with pytest.raises(ValueError, match="unsupported"):
        nodeup.remote(num_cpus=1, no_such_option=1)(lambda: 1)



@pytest.mark.parametrize("opts,match", [
    ({"max_retries": -2}, "max_retries"),
    ({"num_returns": 0}, "num_returns"),
    ({"num_cpus": -1}, "non-negative"),
    ({"resources": {"CPU": 1}}, "use num_cpus"),
    ({"resources": ["TPU"]}, "want a dict"),
    ({"name": 3}, "want a str"),
    ({"max_restarts": 1}, "unsupported task options"),
])
def test_task_options_are_checked_at_definition(opts, match):
    with pytest.raises(ValueError, match=match):
        nodeup.remote(**opts)(lambda: 1)
    with pytest.raises(ValueError, match=match):
        nodeup.remote(lambda: 1).options(**opts)


@pytest.mark.parametrize("opts,match", [
    ({"lifetime": "forever"}, "lifetime"),
    ({"max_restarts": -2}, "max_restarts"),
    ({"get_if_exists": True}, "needs a name"),
    ({"num_gpus": "one"}, "non-negative"),
    ({"num_returns": 2}, "unsupported actor options"),
    ({"scheduling_strategy": "PACK"}, "scheduling_strategy"),
])
def test_actor_options_are_checked_at_definition(opts, match):
    class C:
        pass
    with pytest.raises(ValueError, match=match):
        nodeup.remote(**opts)(C)
    with pytest.raises(ValueError, match=match):
        nodeup.remote(C).options(**opts)


def test_init_finds_the_node_from_its_current_address_file(node):
    # The node recorded its address under TMPDIR: init() needs no address.
    env = dict(node.env, PYTHONPATH=PYDIR)
    out = subprocess.run([sys.executable, "-c", "import nodeup; nodeup.init(); print(nodeup.cluster_resources()['CPU']); nodeup.shutdown()"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2.0"


def test_example_hello(node):
    env = dict(node.env, PYTHONPATH=PYDIR)
    out = subprocess.run([sys.executable, os.path.join(REPO, "examples", "python", "hello.py")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "squares [0, 1, 4, 9] divmod 3 2" in out.stdout


def test_example_sync_runs_seed_002s_signal_actor_and_queue(node):
    env = dict(node.env, PYTHONPATH=PYDIR)
    out = subprocess.run([sys.executable, os.path.join(REPO, "examples", "python", "sync.py")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "go! go! go! go!" in out.stdout and "10 work items consumed" in out.stdout


def test_python_install_writes_the_package(tmp_path):
    out = subprocess.run([NODEUP, "python", "install", "--target", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for sub in ("nodeup", os.path.join("nodeup", "util")):  # subpackages too
        for name in os.listdir(os.path.join(PYDIR, sub)):
            if name.endswith(".py"):
                with open(os.path.join(PYDIR, sub, name), "rb") as a, open(tmp_path / sub / name, "rb") as b:
                    assert a.read() == b.read(), name
    out = subprocess.run([sys.executable, "-c", "import nodeup, nodeup.util; print(nodeup.__file__)"],
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith(str(tmp_path)), out.stderr
    path = subprocess.run([NODEUP, "python", "path"], capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.isfile(os.path.join(path, "nodeup", "worker.py"))


def test_nested_tasks_and_refs_in_values(ray):
    @ray.remote
    def fan_out(n):
        # Submitted from a worker: these tasks are owned by the worker
        # process, and the parent lends its CPU while it waits in get.
        return sum(ray.get([square.remote(i) for i in range(n)]))

    # Three parents on a 2-CPU node only finish if blocked parents lend CPUs.
    assert ray.get([fan_out.remote(4) for _ in range(3)], timeout=60) == [14, 14, 14]

    @ray.remote
    def unwrap(d):
        return ray.get(d["ref"]) + 1

    assert ray.get(unwrap.remote({"ref": ray.put(41)})) == 42


@nodeup.remote
class Counter:
    def __init__(self, start, step=1):
        self.value = start
        self.step = step
        self.pid = os.getpid()

    def incr(self, times=1):
        self.value += self.step * times
        return self.value

    def where(self):
        return self.pid

    def fail(self):
        raise KeyError("no such counter key")


def test_actor_calls_run_in_order_and_keep_state(ray):
    c = Counter.remote(ray.put(10), step=2)  # a ref among the constructor's args is resolved
    refs = [c.incr.remote() for _ in range(20)]
    # max_concurrency 1: calls run one at a time, in the order they were made.
    assert ray.get(refs) == [10 + 2 * i for i in range(1, 21)]
    assert ray.get(c.incr.remote(times=5)) == 60
    # The actor runs in a dedicated worker process of its own.
    c2 = Counter.remote(0)
    assert ray.get(c.where.remote()) != ray.get(c2.where.remote())
    assert ray.get(c2.incr.remote()) == 1


def test_actor_method_error_has_original_type(ray):
    c = Counter.remote(0)
    with pytest.raises(KeyError) as info:
        ray.get(c.fail.remote())
    assert isinstance(info.value, RayTaskError)
    assert "no such counter key" in info.value.traceback_str
    assert ray.get(c.incr.remote()) == 1  # the actor lives on


def test_actor_whose_constructor_raises_is_dead(ray):
    from nodeup.exceptions import RayActorError

    @ray.remote
    class Broken:
        def __init__(self):
            raise RuntimeError("cannot start")

        def ping(self):
            return "pong"

    b = Broken.remote()
    with pytest.raises(RayActorError) as info:
        ray.get(b.ping.remote(), timeout=60)
    assert "cannot start" in str(info.value)


def test_init_with_nothing_running_starts_and_stops_a_local_node(tmp_path):
    # No NODEUP_ADDRESS and no current-address file under TMPDIR: init()
    # starts a node of its own with NODEUP_BIN, and shutdown() stops it.
    env = {k: v for k, v in os.environ.items() if k != "NODEUP_ADDRESS"}
    env.update(TMPDIR=str(tmp_path), NODEUP_BIN=NODEUP, PYTHONPATH=PYDIR)
    out = subprocess.run([sys.executable, os.path.join(REPO, "examples", "python", "hello.py")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "squares [0, 1, 4, 9] divmod 3 2" in out.stdout
    # Its temporary directory (data dir, log, recorded address) is gone with it.
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("nodeup-local-")] == []


def test_secure_node_refuses_plaintext_tcp_and_answers_the_socket(node):
    # The fixture's node runs without --insecure: over plaintext TCP only the
    # open methods answer, and the refusal says to use the socket or a token.
    c = P.Conn(node.address, timeout=5)
    try:
        with pytest.raises(P.RpcError) as info:
            c.call("Sched.ClusterView", {}, timeout=10)
        assert "permission_denied" in str(info.value) and "this node requires TLS" in str(info.value)
    finally:
        c.close()
    c = P.Conn(node.socket, timeout=5)
    try:
        assert any(n.get("Alive") for n in c.call("Sched.ClusterView", {}, timeout=10).get("Nodes") or [])
    finally:
        c.close()


def test_put_objects_freed_when_their_last_ref_goes(ray, node):
    """A put in a loop does not fill the store: a large object whose ref is
    dropped, and never left the process, is freed (Obj.Free), as Ray frees
    at a zero reference count; one passed to a task is kept while it may
    be read there."""
    import gc
    from nodeup import _state
    core = _state.get_core()
    size = 8 << 20
    for i in range(40):  # 320 MiB through the store
        r = ray.put(bytes([i % 251]) * size)
        assert len(ray.get(r)) == size
        del r
    gc.collect()

    def mine_in_store():
        rep = core.pool.call(core.node_addr, "Obj.List", {"Limit": 1000})
        return [e for e in rep.get("Entries") or [] if e["Key"].startswith(core.job_id + "/") and not e.get("Spilled")]
    until("dropped put objects freed in the node's store", lambda: not mine_in_store())
    assert not [o for o in list(core.objects.values()) if o.loc is not None]

    @ray.remote
    def first(b):
        return b[0]

    kept = ray.put(bytes([7]) * size)
    ref = first.remote(kept)
    del kept
    gc.collect()
    assert ray.get(ref) == 7


def test_underscore_remote_takes_args_kwargs_and_options(ray):
    # Ray's older f._remote(args=, kwargs=, **options), used by its
    # application-level scheduling examples (examples/python/seed001_app_scheduling.py).
    @ray.remote
    def pair(a, k=0):
        return a, k

    x, y = pair._remote(args=[3], kwargs={"k": 4}, num_returns=2)
    assert ray.get([x, y]) == [3, 4]
    assert ray.get(pair._remote(args=[1], kwargs={})) == (1, 0)

    @ray.remote
    class Box:
        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v

    Box._remote(args=[7], kwargs={}, name="underscore-remote-box")
    assert ray.get(ray.get_actor("underscore-remote-box").get.remote()) == 7
    with pytest.raises(ValueError):
        pair._remote(args=[1], no_such_option=1)
