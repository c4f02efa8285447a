"""log_to_driver for Python drivers (as Ray's): worker and actor output
reaches the driver's stdout, prefixed with who printed it, repeated lines
collapsed; log_to_driver=False keeps it in the node's files."""

import io

import nodeup
from conftest import until
from nodeup import _logstream


def test_worker_and_actor_output_reaches_the_driver(ray, capsys):
    @ray.remote
    def hello(i):
        import os
        print(f"hello from task {i}")
        return os.getpid()

    @ray.remote
    class Talker:
        def say(self):
            print("talker says hi")
            return 1

    pids = set(ray.get([hello.remote(i) for i in range(3)], timeout=60))
    t = Talker.remote()
    assert ray.get(t.say.remote(), timeout=60) == 1
    seen = []

    def arrived():
        seen.append(capsys.readouterr().out)
        out = "".join(seen)
        return all(f"hello from task {i}" in out for i in range(3)) and "talker says hi" in out

    until("worker and actor lines on the driver's stdout", arrived, within=30)
    lines = "".join(seen).splitlines()
    for i in range(3):
        line = next(ln for ln in lines if ln.endswith(f"hello from task {i}"))
        assert line.startswith("(task pid=") and " node=" in line, line
        assert int(line.split("pid=")[1].split()[0]) in pids, (line, pids)
    talker = next(ln for ln in lines if ln.endswith("talker says hi"))
    assert talker.startswith("(Talker pid="), talker


def test_repeated_lines_collapse_and_prefix():
    out = io.StringIO()

    class FakeCore:
        job_id = "0123abcd"
        node_addr = "n"

    s = _logstream.Streamer.__new__(_logstream.Streamer)
    s.out, s.batch, s.bytes = out, [], 0
    a = {"Addr": "a", "Name": "worker-x-1-7.log", "Kind": "worker", "PID": 7, "NodeName": "n0"}
    b = {"Addr": "b", "Name": "actor-y-2-8.log", "Kind": "actor", "Class": "C", "PID": 8, "NodeName": "n1"}
    for f in (a, b, a):
        s._line(f, "same")
    s._line(b, "once")
    s._print()
    assert out.getvalue().splitlines() == ["(task pid=7 node=n0) same [repeated 3x across cluster]",
                                           "(C pid=8 node=n1) once"]


def test_log_to_driver_off(node, capsys):
    nodeup.init(address=node.socket, log_to_driver=False)
    try:
        @nodeup.remote
        def noisy():
            print("should stay in the node's file")
            return 1

        assert nodeup.get(noisy.remote(), timeout=60) == 1
        core = nodeup._core_or_raise()
        assert core.log_streamer is None
    finally:
        nodeup.shutdown()
    assert "should stay in the node's file" not in capsys.readouterr().out
