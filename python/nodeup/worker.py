"""A Python job's worker process: ``python3 -m nodeup.worker``, started by
the node (docs/protocol.md, Worker processes). It serves Task.Push and
Object.Get, registers with its node, and exits when the node is gone."""

import ctypes
import hashlib
import os
import pickle
import sys
import threading
import time

from . import _core
from . import _protocol as P
from . import _runtime_env
from . import _state
from .exceptions import TaskCancelledError


class _Executor:
    def __init__(self):
        env = os.environ
        self.node_addr = env["NODEUP_NODE_ADDR"]
        self.worker_id = env["NODEUP_WORKER_ID"]
        self.core = _core.Core(env["NODEUP_NODE_ADDR"], env["NODEUP_JOB_ID"], env.get("NODEUP_BIND_IP", "127.0.0.1"),
                               env.get("NODEUP_ARENA_PATH", ""), env.get("NODEUP_NODE_ID", ""),
                               env.get("NODEUP_NODE_NAME", ""),
                               handlers={"Task.Push": self.push, "Actor.Construct": self.construct,
                                         "Actor.Call": self.call, "Task.Cancel": self.cancel},
                               node_socket=env.get("NODEUP_NODE_SOCKET") or None,
                               job_token=env.get("NODEUP_JOB_TOKEN", ""))
        self.core.namespace = env.get("NODEUP_NAMESPACE") or self.core.namespace
        self.core.env_vars = _runtime_env.inherited()  # what its nested tasks and actors inherit
        self.actor_id = env.get("NODEUP_ACTOR_ID", "")
        self.actor = None  # the instance, once constructed
        self.actor_cond = threading.Condition()
        self.sessions = {}  # caller session -> next Seq to run (max_concurrency 1: calls in caller order)
        self.funcs = {}
        self.flock = threading.Lock()
        self.lease_locks = {}
        self.rlock = threading.Lock()  # guards running and cancelled
        self.running = {}  # task ID -> ident of the thread running its function
        self.cancelled = set()  # IDs of tasks cancelled before they started here

    def function(self, code):
        key = hashlib.sha256(code).digest()
        with self.flock:
            f = self.funcs.get(key)
        if f is None:
            f = pickle.loads(code)
            with self.flock:
                self.funcs[key] = f
        return f

    def arg(self, a):
        if not a.get("IsRef"):
            return pickle.loads(a.get("Inline") or b"")
        ref = _core.ObjectRef(a["RefID"], a["Owner"])
        return self.core.get([ref])[0]

    def push(self, req):
        req = req or {}
        lease = int(req.get("LeaseID") or 0)
        with self.flock:
            entry = self.lease_locks.setdefault(lease, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:  # the tasks of one lease run one after another
                spec = req.get("Spec") or {}
                with self.rlock:
                    if spec.get("TaskID") in self.cancelled:
                        self.cancelled.discard(spec.get("TaskID"))
                        return {"NotRun": True}
                return self.run(lease, spec, None)
        finally:
            with self.flock:
                entry[1] -= 1
                if entry[1] == 0:  # no push of this lease waits: forget it
                    del self.lease_locks[lease]

    def construct(self, req):
        """Actor.Construct: the class from Code; one Arg holding the pickled
        (args, kwargs), whose top-level ObjectRefs are resolved here."""
        req = req or {}
        if req.get("ActorID") != self.actor_id:
            raise P.RpcError("not_found", f"this worker runs actor {self.actor_id!r}, not {req.get('ActorID')!r}")
        try:
            cls = self.function(req.get("Code") or b"")
            wargs = req.get("Args") or []
            args, kwargs = self.arg(wargs[0]) if wargs else ((), {})
            args = [self.core.get([a])[0] if isinstance(a, _core.ObjectRef) else a for a in args]
            kwargs = {k: (self.core.get([v])[0] if isinstance(v, _core.ObjectRef) else v) for k, v in kwargs.items()}
            self.actor = cls(*args, **kwargs)
            return {"Error": None}
        except Exception as e:
            return {"Error": _core.failure_of(e, self.core)}

    def call(self, req):
        """Actor.Call: runs method Spec.Function, each session's calls in Seq
        order (a missing predecessor is waited for at most 5 s, as Go's)."""
        req = req or {}
        if self.actor is None or req.get("ActorID") != self.actor_id:
            raise P.RpcError("not_found", f"actor {req.get('ActorID')!r} does not run in this worker")
        session, seq = req.get("Session") or "", int(req.get("Seq") or 0)
        spec = req.get("Spec") or {}
        deadline = time.monotonic() + 5
        with self.actor_cond:
            self.sessions.setdefault(session, 0)
            while seq > self.sessions[session] and time.monotonic() < deadline:
                self.actor_cond.wait(deadline - time.monotonic())
            try:
                return self.run(0, spec, getattr(self.actor, spec.get("Function") or "", None))
            finally:
                self.sessions[session] = max(self.sessions[session], seq + 1)
                self.actor_cond.notify_all()

    def cancel(self, req):
        """Task.Cancel (docs/protocol.md): a task not started here never
        starts (its push answers NotRun); a running one gets
        TaskCancelledError raised in its thread (at its next Python
        bytecode: a blocking C call finishes first), or with Force this
        process exits at once, as Ray's force=True."""
        req = req or {}
        tid = req.get("TaskID") or ""
        with self.rlock:
            ident = self.running.get(tid)
            if ident is None:
                if len(self.cancelled) >= 1024:  # cancels of tasks that never came (Go keeps 1,024 too)
                    self.cancelled.clear()
                self.cancelled.add(tid)
                return {}
            if not req.get("Force"):
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(TaskCancelledError))
                return {}

        def exit_soon():  # after the answer is on its way
            time.sleep(0.05)
            print(f"nodeup worker: task {tid} cancelled with force: exiting", file=sys.stderr)
            os._exit(1)

        threading.Thread(target=exit_soon, daemon=True).start()
        return {}

    def run(self, lease, spec, fn=None):
        start = time.monotonic_ns()
        core = self.core
        core.local.lease_id = lease
        try:
            task = fn is None  # a task, not an actor call: cancel may interrupt it
            if task:
                if not spec.get("Code"):
                    raise AttributeError(f"no method or function {spec.get('Function')!r}")
                fn = self.function(spec["Code"])
            args = [self.arg(a) for a in (spec.get("Args") or [])]
            names = spec.get("KwargNames") or []
            kwargs = {}
            if names:
                kwargs = dict(zip(names, args[len(args) - len(names):]))
                args = args[:len(args) - len(names)]
            if task:
                with self.rlock:
                    self.running[spec.get("TaskID") or ""] = threading.get_ident()
                try:
                    result = fn(*args, **kwargs)
                finally:
                    with self.rlock:
                        self.running.pop(spec.get("TaskID") or "", None)
            else:
                result = fn(*args, **kwargs)
            n = int(spec.get("NumReturns") or 1)
            values = [result] if n == 1 else list(result)
            if len(values) != n:
                raise ValueError(f"task {spec.get('Name')} returned {len(values)} values, num_returns={n}")
            returns, stored = [], []
            for i, v in enumerate(values):
                data = _core.dumps(v)
                if len(data) > P.INLINE_MAX:
                    stored.append(core.store_put(f"{spec.get('TaskID')}.{i}", data))
                    returns.append(None)
                else:
                    stored.append(None)
                    returns.append(data)
            if all(s is None for s in stored):
                stored = None
            return {"Returns": returns, "Stored": stored, "Error": None, "RunNanos": time.monotonic_ns() - start}
        except Exception as e:
            return {"Returns": None, "Stored": None, "Error": _core.failure_of(e, core),
                    "RunNanos": time.monotonic_ns() - start}
        finally:
            core.local.lease_id = 0

    def serve(self):
        _state.set_core(self.core, is_worker=True)
        self.core.pool.call(self.node_addr, "Worker.Register",
                            {"WorkerID": self.worker_id, "Addr": self.core.address, "PID": os.getpid()})
        failures = 0
        while True:  # exit when the node is gone: 3 failed hellos 2 s apart
            time.sleep(2)
            try:
                self.core.pool.call(self.node_addr, "Cluster.Hello", {}, timeout=5)
                failures = 0
            except Exception:
                failures += 1
                if failures >= 3:
                    print("nodeup worker: node unreachable, exiting", file=sys.stderr)
                    os._exit(1)


def main():
    _Executor().serve()


if __name__ == "__main__":
    main()
