"""A Python job's worker process: ``python3 -m nodeup.worker``, started by
the node (docs/protocol.md, Worker processes). It serves Task.Push and
Object.Get, registers with its node, and exits when the node is gone."""

import hashlib
import os
import pickle
import sys
import threading
import time

from . import _core
from . import _protocol as P
from . import _state


class _Executor:
    def __init__(self):
        env = os.environ
        self.node_addr = env["NODEUP_NODE_ADDR"]
        self.worker_id = env["NODEUP_WORKER_ID"]
        self.core = _core.Core(env["NODEUP_NODE_ADDR"], env["NODEUP_JOB_ID"], env.get("NODEUP_BIND_IP", "127.0.0.1"),
                               env.get("NODEUP_ARENA_PATH", ""), env.get("NODEUP_NODE_ID", ""),
                               env.get("NODEUP_NODE_NAME", ""), handlers={"Task.Push": self.push})
        self.funcs = {}
        self.flock = threading.Lock()
        self.lease_locks = {}

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
            lk = self.lease_locks.setdefault(lease, threading.Lock())
        with lk:  # the tasks of one lease run one after another
            return self.run(lease, req.get("Spec") or {})

    def run(self, lease, spec):
        start = time.monotonic_ns()
        core = self.core
        core.local.lease_id = lease
        try:
            fn = self.function(spec.get("Code") or b"")
            args = [self.arg(a) for a in (spec.get("Args") or [])]
            names = spec.get("KwargNames") or []
            kwargs = {}
            if names:
                kwargs = dict(zip(names, args[len(args) - len(names):]))
                args = args[:len(args) - len(names)]
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
