"""ray.cancel (Go's worker.Cancel over Task.Cancel): queued, running and
forced cancels."""

import os
import time

import pytest

from conftest import until
from nodeup.exceptions import TaskCancelledError


def test_cancel_interrupts_a_running_task(ray, tmp_path):
    started, stopped = tmp_path / "started", tmp_path / "stopped"

    @ray.remote
    def spin(started, stopped):
        open(started, "w").close()
        try:
            while True:  # Python bytecode between short sleeps: interruptible
                time.sleep(0.02)
        except TaskCancelledError:
            open(stopped, "w").close()
            raise

    ref = spin.remote(str(started), str(stopped))
    until("the task starts", started.exists, within=60)
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)
    # Its worker stopped running it, not only the driver giving up on it.
    until("the worker interrupts the task", stopped.exists, within=30)
    # The worker lives on and serves the next task.
    assert ray.get(ray.remote(lambda: 7).remote(), timeout=60) == 7


def test_cancel_force_ends_the_worker_and_is_not_retried(ray, tmp_path):
    pidfile = tmp_path / "pid"

    @ray.remote(max_retries=3)
    def block(pidfile):
        with open(pidfile, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(600)  # one C call: only force ends it

    ref = block.remote(str(pidfile))
    until("the task starts", lambda: pidfile.exists() and pidfile.read_text().strip(), within=60)
    pid = int(pidfile.read_text().split()[0])
    ray.cancel(ref, force=True)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)

    def gone():
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True
    until("the worker process exits", gone, within=30)
    # Not retried although max_retries allows: one attempt only, and the
    # driver goes on using fresh workers.
    assert ray.get(ray.remote(lambda: 8).remote(), timeout=60) == 8
    assert len(pidfile.read_text().split()) == 1


def test_cancel_a_queued_task_and_bad_cancels(ray):
    # Infeasible: it waits in the driver's queue for a node that fits.
    ref = ray.remote(resources={"no-such-resource": 1})(lambda: 1).remote()
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)
    ray.cancel(ref)  # again: nothing to do
    ray.cancel(ray.put(1))  # a put's ref: left alone
    assert ray.get(ray.put(2)) == 2

    @ray.remote
    def inner_put():
        import nodeup
        return [nodeup.put(1)]

    [owned_elsewhere] = ray.get(inner_put.remote(), timeout=60)
    with pytest.raises(ValueError, match="only the process that submitted"):
        ray.cancel(owned_elsewhere)
    with pytest.raises(TypeError):
        ray.cancel("not a ref")

    @ray.remote
    class A:
        def slow(self):
            time.sleep(30)  # still out when cancel looks at it

    a = A.remote()
    with pytest.raises(ValueError, match="force is not supported"):
        ray.cancel(a.slow.remote(), force=True)
    ray.kill(a)
