"""Task events from Python programs (Ray's task events): the driver and its
workers report their tasks' states to their node (TaskEvents.Report), which
`nodeup list tasks` and TaskEvents.List show."""

import json
import os
import subprocess
import time

import msgpack
import pytest

from conftest import NODEUP, until
from nodeup import _protocol as P
from nodeup import _taskevents as TE

# The bytes of GOLDEN_EVENT as wire.TaskEvent's encoding; wire's
# TestTaskEventPythonBytes decodes and re-encodes the same hex in Go.
GOLDEN_EVENT = TE.new_event("ab12-c3", "job1", "f.<locals>.g", TE.FAILED, 2, NodeID="node-1", NodeName="n1",
                            WorkerID="w-9", PID=4242, Owner="127.0.0.1:5000", Error="ValueError: é",
                            Times=[0, 1, 1 << 20, 1 << 40, 0, 1764355200000000000])
GOLDEN_HEX = ("dc0014a7616231322d6333a46a6f6231ac662e3c6c6f63616c733e2e67ac662e3c6c6f63616c733e2e67ab4e4f524d414c5f"
              "5441534ba0a64641494c454402a66e6f64652d31a26e31a3772d39cd1092ae3132372e302e302e313a35303030ae56616c75"
              "654572726f723a20c3a90001ce00100000cf000001000000000000cf187c3fb4d99d0000")


def tasks(core, **filters):
    """The node's task list for core's job, each task an event dict."""
    rep = core.pool.call(core.node_addr, "TaskEvents.List", dict({"JobID": core.job_id}, **filters), timeout=30)
    return {ev["TaskID"]: ev for ev in map(TE.decode, rep.get("Tasks") or [])}, rep


def by_name(evs, name):
    return [ev for ev in evs.values() if ev["Name"] == name]


def test_tasks_are_listed_with_their_states(ray, node):
    core = ray._state.get_core()

    @ray.remote
    def square(x):
        return x * x

    @ray.remote
    def boom():
        raise ValueError("boom-7f3a")

    @ray.remote
    def slow():
        time.sleep(2)
        return os.getpid()

    assert ray.get([square.remote(i) for i in range(3)], timeout=60) == [0, 1, 4]
    with pytest.raises(ValueError):
        ray.get(boom.remote(), timeout=60)
    ref = slow.remote()
    qual = "test_tasks_are_listed_with_their_states.<locals>."

    def slow_running():
        evs, _ = tasks(core, Name=qual + "slow")
        ev = next(iter(evs.values()), None)
        return ev if ev is not None and ev["State"] == TE.RUNNING else None
    running = until("the long task shows RUNNING", slow_running, within=30)
    assert ray.wait([ref], timeout=0)[0] == [], "the long task had already finished: RUNNING was not seen while it ran"
    assert running["PID"] > 0 and running["NodeID"] and running["WorkerID"]
    assert running["Times"][TE.rank(TE.RUNNING)] > 0
    pid = ray.get(ref, timeout=60)

    def all_done():
        evs, _ = tasks(core)
        done = [ev for ev in evs.values() if ev["State"] in (TE.FINISHED, TE.FAILED)]
        return evs if len(done) == 5 and len(evs) == 5 else None
    evs = until("all five tasks are FINISHED or FAILED", all_done, within=30)
    squares = by_name(evs, qual + "square")
    assert len(squares) == 3 and all(ev["State"] == TE.FINISHED for ev in squares)
    for ev in squares:
        assert ev["Type"] == TE.NORMAL_TASK and ev["JobID"] == core.job_id and ev["Owner"] == core.address
        assert ev["PID"] > 0 and ev["NodeID"] == core.node_id
        times = ev["Times"]
        assert 0 < times[TE.rank(TE.PENDING_NODE_ASSIGNMENT)] <= times[TE.rank(TE.SUBMITTED_TO_WORKER)]
        assert times[TE.rank(TE.RUNNING)] > 0 and times[TE.rank(TE.FINISHED)] >= times[TE.rank(TE.RUNNING)]
    [failed] = by_name(evs, qual + "boom")
    assert failed["State"] == TE.FAILED and "boom-7f3a" in failed["Error"] and "ValueError" in failed["Error"]
    [long] = by_name(evs, qual + "slow")
    assert long["State"] == TE.FINISHED and long["PID"] == pid and long["Attempt"] == 0
    ran = long["Times"][TE.rank(TE.FINISHED)] - long["Times"][TE.rank(TE.RUNNING)]
    assert 1.5e9 < ran < 60e9, f"the long task ran {ran} ns by its events, want about 2 s"

    # The CLI shows them too, named as Ray's state API.
    out = subprocess.run([NODEUP, "list", "tasks", "--json", "--address", node.socket, "--filter",
                          f"job_id={core.job_id}"], capture_output=True, text=True, timeout=60, env=node.env)
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert {t["task_id"]: t["state"] for t in listed["tasks"]} == {i: ev["State"] for i, ev in evs.items()}
    assert any(t["state"] == TE.FAILED and "boom-7f3a" in t["error_message"] for t in listed["tasks"])


def test_pending_args_and_retries_are_recorded(ray, tmp_path):
    core = ray._state.get_core()
    marker = tmp_path / "tried"

    @ray.remote
    def gate():
        time.sleep(0.5)
        return 1

    @ray.remote
    def plus(x):
        return x + 1

    @ray.remote(max_retries=2, retry_exceptions=True)
    def flaky(marker):
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("first try fails")
        return "ok"

    r = plus.remote(gate.remote())
    assert ray.get(r, timeout=60) == 2
    assert ray.get(flaky.remote(str(marker)), timeout=60) == "ok"
    tid = r.id.rsplit(".", 1)[0]

    def seen():
        evs, _ = tasks(core)
        ev, fl = evs.get(tid), by_name(evs, "test_pending_args_and_retries_are_recorded.<locals>.flaky")
        return (ev, fl[0]) if ev and ev["State"] == TE.FINISHED and fl and fl[0]["State"] == TE.FINISHED else None
    ev, fl = until("the dependent and the retried task FINISHED", seen, within=30)
    assert ev["Times"][TE.rank(TE.PENDING_ARGS_AVAIL)] > 0  # it waited for gate's result
    assert fl["Attempt"] == 1  # the second attempt won


def test_encoding_matches_go_and_the_node_checks_it(ray):
    core = ray._state.get_core()
    # Byte for byte what wire.TaskEvent's codec writes (wire's
    # TestTaskEventPythonBytes holds the same hex).
    assert P.pack(TE.encode(GOLDEN_EVENT)).hex() == GOLDEN_HEX
    assert TE.decode(msgpack.unpackb(bytes.fromhex(GOLDEN_HEX), raw=False)) == GOLDEN_EVENT
    # Extra values past the known ones are skipped; missing ones are zero.
    assert TE.decode(TE.encode(GOLDEN_EVENT) + ["later", 1]) == GOLDEN_EVENT
    assert TE.decode(["t1", "j"])["Times"] == [0] * 6

    tid = f"pyev-{os.getpid()}-ok"
    good = TE.new_event(tid, core.job_id, "hand-made", TE.RUNNING, 0, PID=7, Times=[0, 0, 0, time.time_ns(), 0, 0])
    assert core.pool.call(core.node_addr, "TaskEvents.Report", {"Events": [TE.encode(good)]}, timeout=30) == {}
    evs, _ = tasks(core, TaskID=tid)
    assert evs[tid]["State"] == TE.RUNNING and evs[tid]["PID"] == 7 and evs[tid]["Name"] == "hand-made"

    # One bad event refuses the whole batch with bad_input, naming it.
    other = f"pyev-{os.getpid()}-refused"
    for bad, words in ((dict(State="EXPLODED"), "EXPLODED"), (dict(TaskID="a/../b"), "task ID"),
                       (dict(Name="x" * 257), "name"), (dict(Type="WEIRD"), "WEIRD"), (dict(JobID="-x"), "job ID")):
        ev = {**good, "TaskID": other, **bad}
        assert TE.check(ev) is not None, bad  # the reporter drops it before sending
        with pytest.raises(P.RpcError) as e:
            core.pool.call(core.node_addr, "TaskEvents.Report",
                           {"Events": [TE.encode(dict(good, TaskID=other)), TE.encode(ev)]}, timeout=30)
        assert e.value.code == "bad_input" and words in e.value.message, e.value
    assert not tasks(core, TaskID=other)[0]
    with pytest.raises(P.RpcError) as e:
        core.pool.call(core.node_addr, "TaskEvents.Report", {"Events": [TE.encode(good)] * 1001}, timeout=30)
    assert e.value.code == "bad_input"


def test_a_refused_report_never_reaches_a_task(ray, monkeypatch):
    core = ray._state.get_core()
    # The driver's reporter sends an event the node refuses (its local
    # check is off): the batch, tasks' events with it, is refused and
    # counted as dropped; the tasks run on untouched.
    monkeypatch.setattr(TE, "check", lambda ev: None)
    core.events.record(TE.new_event(f"pyev-{os.getpid()}-bad", core.job_id, "bad", "NOT_A_STATE"))

    @ray.remote
    def one():
        return 1
    assert ray.get([one.remote() for _ in range(5)], timeout=60) == [1] * 5
    monkeypatch.undo()
    core.events.flush()

    def dropped():
        _, rep = tasks(core)
        return rep.get("Dropped")
    assert until("the node counts the refused batch as dropped", dropped, within=30) >= 1


class _RefusingCore:
    """A Core stand-in whose node refuses every call."""

    def __init__(self, exc):
        import threading
        self.node_addr = "127.0.0.1:1"
        self._closed_event = threading.Event()
        self.calls = 0
        self.exc = exc

        class Pool:
            def call(pool, *a, **k):
                self.calls += 1
                raise self.exc
        self.pool = Pool()


@pytest.mark.parametrize("exc", [P.RpcError("bad_input", "no"), P.TransportError("gone"), ValueError("odd")])
def test_reporter_never_raises_and_counts_drops(exc):
    core = _RefusingCore(exc)
    r = TE.Reporter(core)
    r.started = True  # no sending thread: flushed by hand only
    for i in range(TE.MAX_BUFFERED + 5):
        r.record(TE.new_event(f"t{i}", "job", "f", TE.PENDING_NODE_ASSIGNMENT))
    r.record(TE.new_event("t0", "job", "f", TE.RUNNING))  # merged with t0's: not a drop
    r.record({"no": "fields"})  # malformed: ignored, not raised
    assert len(r.buf) == TE.MAX_BUFFERED and r.dropped == 5
    assert r.buf["t0"]["State"] == TE.RUNNING and r.buf["t0"]["Times"][TE.rank(TE.PENDING_NODE_ASSIGNMENT)] > 0
    r.flush()  # the first batch is refused: dropped, counted; the rest waits for the next flush
    assert core.calls == 1 and len(r.buf) == TE.MAX_BUFFERED - TE.MAX_BATCH and r.dropped == TE.MAX_BATCH + 5
    for _ in range(TE.MAX_BUFFERED // TE.MAX_BATCH - 1):
        r.flush()
    assert not r.buf and r.dropped == TE.MAX_BUFFERED + 5
    r.flush()  # only the count left: sent (and refused) alone
    assert core.calls == TE.MAX_BUFFERED // TE.MAX_BATCH + 1 and r.dropped == TE.MAX_BUFFERED + 5


def test_reporter_sends_a_full_batch_at_once():
    core = _RefusingCore(P.TransportError("gone"))
    r = TE.Reporter(core)
    r.every = 3600  # only a full batch sends before then
    try:
        for i in range(TE.MAX_BATCH - 1):
            r.record(TE.new_event(f"t{i}", "job", "f", TE.RUNNING))
        assert core.calls == 0
        r.record(TE.new_event("last", "job", "f", TE.RUNNING))
        until("the full batch is sent", lambda: core.calls >= 1, within=10)
    finally:
        core._closed_event.set()
        r.kick.set()


def test_merge_follows_go():
    a = TE.new_event("t", "j", "f", TE.SUBMITTED_TO_WORKER, 0, Owner="o", Times=[0, 5, 9, 0, 0, 0])
    b = TE.new_event("t", "j", "f", TE.RUNNING, 0, PID=3, NodeID="n", Times=[0, 0, 0, 10, 0, 0])
    TE.merge(a, b)
    assert a["State"] == TE.RUNNING and a["PID"] == 3 and a["Owner"] == "o" and a["Times"] == [0, 5, 9, 10, 0, 0]
    TE.merge(a, TE.new_event("t", "j", "f", TE.PENDING_NODE_ASSIGNMENT, 0, Times=[0, 4, 0, 0, 0, 0]))
    assert a["State"] == TE.RUNNING and a["Times"][1] == 4  # later state kept, earliest time taken
    TE.merge(a, TE.new_event("t", "j", "f", TE.PENDING_NODE_ASSIGNMENT, 1, Times=[0, 20, 0, 0, 0, 0]))
    assert a["Attempt"] == 1 and a["State"] == TE.PENDING_NODE_ASSIGNMENT and a["Times"] == [0, 20, 0, 0, 0, 0]
    assert a["Owner"] == "o"  # identity kept from the older attempt
    long = "é" * 600
    clipped = TE.clip_error(long)
    assert len(clipped.encode()) <= TE.MAX_ERROR and clipped.endswith(" [...]")



def test_owner_cancel_task_is_served(ray):
    core = ray._state.get_core()
    # Over TCP with the job's token (a secure cluster): the method is let
    # through to the handler, which checks the ID.
    for bad, code in (("nope-1", "not_found"), ("a/b", "bad_input"), ("", "bad_input")):
        with pytest.raises(P.RpcError) as e:
            core.pool.call(core.address, "Owner.CancelTask", {"TaskID": bad, "Force": False}, timeout=30)
        assert e.value.code == code, e.value


def test_nodeup_cancel_reaches_a_python_owner(tmp_path):
    # A secure cluster: the CLI, a local client on the node's socket, gets
    # the owner's job token from the node (Job.TokenOf) and presents it.
    import nodeup
    from conftest import Node
    from nodeup.exceptions import TaskCancelledError
    n = Node(str(tmp_path))
    try:
        nodeup.init(address=n.socket)
        core = nodeup._state.get_core()
        started = tmp_path / "started"

        @nodeup.remote
        def spin(started):
            open(started, "w").close()
            while True:  # Python bytecode between short sleeps: interruptible
                time.sleep(0.02)

        ref = spin.remote(str(started))
        tid = ref.id.rsplit(".", 1)[0]
        until("the task is listed RUNNING",
              lambda: tasks(core, TaskID=tid)[0].get(tid, {}).get("State") == TE.RUNNING, within=60)
        out = subprocess.run([NODEUP, "cancel", tid, "--address", n.socket], capture_output=True, text=True,
                             timeout=60, env=n.env)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"cancelled task {tid}" in out.stdout
        with pytest.raises(TaskCancelledError):
            nodeup.get(ref, timeout=30)
        ev = until("the task is listed FAILED",
                   lambda: (tasks(core, TaskID=tid)[0].get(tid) or {}).get("State") == TE.FAILED
                   and tasks(core, TaskID=tid)[0][tid], within=30)
        assert "TaskCancelledError" in ev["Error"], ev  # the owner's text or the interrupted worker's
    finally:
        nodeup.shutdown()
        n.stop()


def test_actor_calls_are_listed_by_their_worker(ray):
    core = ray._state.get_core()

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def add(self, k):
            self.n += k
            return self.n

        def fail(self):
            raise KeyError("nope-actor")

    c = Counter.remote()
    assert ray.get([c.add.remote(1), c.add.remote(2)], timeout=60) == [1, 3]
    with pytest.raises(KeyError):
        ray.get(c.fail.remote(), timeout=60)

    def listed():
        evs, _ = tasks(core, ActorID=c._actor_id)
        return evs if len(evs) == 3 and all(ev["State"] in (TE.FINISHED, TE.FAILED) for ev in evs.values()) else None
    evs = until("the actor's three calls are listed", listed, within=30)
    for ev in evs.values():
        assert ev["Type"] == TE.ACTOR_TASK and ev["ActorID"] == c._actor_id and ev["JobID"] == core.job_id
        assert ev["PID"] > 0 and ev["Owner"] == core.address and ev["Times"][TE.rank(TE.RUNNING)] > 0
    assert sorted(ev["Function"] for ev in evs.values()) == ["add", "add", "fail"]
    [failed] = [ev for ev in evs.values() if ev["State"] == TE.FAILED]
    assert "KeyError" in failed["Error"] and "nope-actor" in failed["Error"]


def test_async_actor_calls_are_listed(ray):
    core = ray._state.get_core()

    @ray.remote
    class Pinger:
        async def ping(self):
            return "pong"

    a = Pinger.remote()
    assert ray.get(a.ping.remote(), timeout=60) == "pong"

    def listed():
        evs, _ = tasks(core, ActorID=a._actor_id)
        return next((ev for ev in evs.values() if ev["State"] == TE.FINISHED), None)
    ev = until("the async call is listed FINISHED", listed, within=30)
    assert ev["Name"].endswith(".Pinger.ping") and ev["Type"] == TE.ACTOR_TASK and ev["Times"][TE.rank(TE.RUNNING)] > 0
