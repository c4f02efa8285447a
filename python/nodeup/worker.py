"""A Python job's worker process: ``python3 -m nodeup.worker``, started by
the node (docs/protocol.md, Worker processes). It serves Task.Push and
Object.Get, registers with its node, and exits when the node is gone."""

import asyncio
import concurrent.futures
import ctypes
import hashlib
import inspect
import os
import pickle
import sys
import threading
import time

from . import _actor
from . import _context
from . import _core
from . import _protocol as P
from . import _runtime_env
from . import _serialize
from . import _state
from . import _taskevents as TE
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
        self.core.events.set_worker(self.worker_id)  # reports every 100 ms: the node kills it at the job's end
        self.core.env_vars = _runtime_env.inherited()  # what its nested tasks and actors inherit
        self.actor_id = env.get("NODEUP_ACTOR_ID", "")
        self.actor = None  # the instance, once constructed
        self.actor_incarnation = 0
        # How the actor's calls run (Ray's threaded and async actors): one at
        # a time in each caller's order (max_concurrency 1, no async method);
        # up to N at once on the server's threads (sem); or, for a class
        # with an async method, on one event loop (loop), N at once (asem).
        self.sem = None
        self.loop = None
        self.asem = None
        # Concurrency groups (Ray's concurrency_groups): name -> its
        # threading semaphore, or for an async actor (event loop, semaphore).
        self.groups = {}
        self.actor_cond = threading.Condition()
        self.serial = threading.Lock()  # held by the running call of a one-at-a-time actor
        self.sessions = {}  # caller session -> next Seq to run (max_concurrency 1: calls in caller order)
        self.funcs = {}
        self.flock = threading.Lock()
        self.lease_locks = {}
        self.rlock = threading.Lock()  # guards running and cancelled
        self.running = {}  # task ID -> ident of the thread running its function
        self.async_calls = {}  # task ID -> the Future of an async actor's running call
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
            return _serialize.loads(a.get("Inline") or b"")
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
        (args, kwargs), whose top-level ObjectRefs are resolved here. A class
        with an ``async def`` method gets an event loop of its own, on which
        the constructor and every method run (Ray's async actors)."""
        req = req or {}
        if req.get("ActorID") != self.actor_id:
            raise P.RpcError("not_found", f"this worker runs actor {self.actor_id!r}, not {req.get('ActorID')!r}")
        try:
            cls = self.function(req.get("Code") or b"")
            wargs = req.get("Args") or []
            ctor = self.arg(wargs[0]) if wargs else ((), {})
            args, kwargs = ctor[0], ctor[1]
            groups = (ctor[2] if len(ctor) > 2 else {}).get("concurrency_groups") or {}
            args = [self.core.get([a])[0] if isinstance(a, _core.ObjectRef) else a for a in args]
            kwargs = {k: (self.core.get([v])[0] if isinstance(v, _core.ObjectRef) else v) for k, v in kwargs.items()}
            n = max(1, int(req.get("MaxConcurrency") or 1))
            self.actor_incarnation = int(req.get("Incarnation") or 0)
            _context.set_actor(self.actor_id, self.actor_incarnation)
            if _actor.is_async_class(cls):
                # Each semaphore is made on its own loop (before Python 3.10
                # asyncio objects bind to the loop current where they are made).
                self.loop = _event_loop("default")
                self.asem = _on(self.loop, lambda: asyncio.Semaphore(n))
                for g, k in groups.items():
                    loop = _event_loop(g)
                    self.groups[g] = (loop, _on(loop, lambda k=k: asyncio.Semaphore(int(k))))
                self.actor = _on(self.loop, lambda: cls(*args, **kwargs))
            else:
                if n > 1:
                    self.sem = threading.BoundedSemaphore(n)
                self.groups = {g: threading.BoundedSemaphore(int(k)) for g, k in groups.items()}
                self.actor = cls(*args, **kwargs)
            return {"Error": None}
        except Exception as e:
            return {"Error": _core.failure_of(e, self.core)}

    def call(self, req):
        """Actor.Call: runs method Spec.Function. With max_concurrency 1 and
        no async method, each session's calls run one at a time in Seq order
        (a missing predecessor is waited for at most 5 s, as Go's); a
        threaded actor runs up to max_concurrency calls at once in no set
        order, and an async actor runs them on its event loop, as Ray's. A
        call in a concurrency group (Spec.ConcurrencyGroup, else the
        method's @method(concurrency_group=...)) runs under that group's
        limit instead, on its own event loop in an async actor."""
        req = req or {}
        if self.actor is None or req.get("ActorID") != self.actor_id:
            raise P.RpcError("not_found", f"actor {req.get('ActorID')!r} does not run in this worker")
        spec = req.get("Spec") or {}
        method = getattr(self.actor, spec.get("Function") or "", None)
        session, seq = req.get("Session") or "", int(req.get("Seq") or 0)
        group = spec.get("ConcurrencyGroup") or (getattr(method, "__nodeup_method_options__", None) or {}).get(
            "concurrency_group")
        if group and group not in self.groups:
            with self.actor_cond:
                self.await_turn(session, seq)
                self.end_turn(session, seq)
            e = ValueError(f"concurrency_group {group!r} is not one of actor {self.actor_id}'s "
                           f"concurrency_groups {sorted(self.groups)}")
            return {"Returns": None, "Stored": None, "Error": _core.failure_of(e, self.core), "RunNanos": 0}
        if self.loop is not None:
            loop, asem = self.groups[group] if group else (self.loop, self.asem)
            return self.run_async(spec, method, session, seq, loop, asem)
        sem = self.groups[group] if group else self.sem
        if sem is not None:
            with self.actor_cond:  # started in each caller's order, then run at once
                self.await_turn(session, seq)
                self.end_turn(session, seq)
            with sem:
                return self.run(0, spec, method, actor=True)
        with self.actor_cond:
            self.await_turn(session, seq)
        with self.serial:  # one at a time; not under actor_cond, so other groups' calls start meanwhile
            try:
                return self.run(0, spec, method, actor=True)
            finally:
                with self.actor_cond:
                    self.end_turn(session, seq)

    def await_turn(self, session, seq):
        """Waits (actor_cond held) until the calls of session before seq
        have had their turn, at most 5 s (a predecessor lost on the way)."""
        deadline = time.monotonic() + 5
        self.sessions.setdefault(session, 0)
        while seq > self.sessions[session] and time.monotonic() < deadline:
            self.actor_cond.wait(deadline - time.monotonic())

    def end_turn(self, session, seq):
        """Lets session's call after seq go (actor_cond held)."""
        self.sessions[session] = max(self.sessions[session], seq + 1)
        self.actor_cond.notify_all()

    def event(self, spec, state, fail=None, actor=False):
        """Records a state change of a task (or, with actor, an actor call)
        this process runs: RUNNING, FINISHED, or FAILED with fail's
        message, with this worker's node and PID, as Go's
        executorTaskEvent. A task's outcome whose RUNNING is still unsent
        is not recorded (its owner's outcome carries this worker's PID
        and run time: one event for a short task). Never raises."""
        try:
            core = self.core
            tid = spec.get("TaskID") or ""
            if not actor and state != TE.RUNNING and core.events.retract(tid):
                return
            ev = TE.new_event(tid, spec.get("JobID") or core.job_id, TE.clip_name(spec.get("Name") or ""), state,
                              int(spec.get("Attempt") or 0), Function=TE.clip_name(spec.get("Function") or ""),
                              NodeID=core.node_id, NodeName=core.node_name, WorkerID=core.events.worker_id,
                              PID=core.events.pid, Owner=spec.get("Owner") or "")
            if actor:
                ev.update(Type=TE.ACTOR_TASK, ActorID=self.actor_id)
            if fail:
                ev["Error"] = TE.clip_error(fail.get("Message") or "")
            core.events.record(ev)
        except Exception:
            pass

    def run_async(self, spec, method, session, seq, loop, asem):
        """_run_async, its outcome recorded (event)."""
        rep = self._run_async(spec, method, session, seq, loop, asem)
        self.event(spec, TE.FAILED if rep.get("Error") else TE.FINISHED, rep.get("Error"), actor=True)
        return rep

    def _run_async(self, spec, method, session, seq, loop, asem):
        """Runs an async actor's call: arguments are fetched and results
        stored on this (the server's) thread, the method itself on the
        actor's event loop, at most max_concurrency at once; a sync method
        runs there too, so it may touch the loop's objects (asyncio.Event).
        Each session's calls are handed to the loop in Seq order, so they
        start in the order their caller made them (they may then interleave
        at each await)."""
        start = time.monotonic_ns()
        try:
            try:
                if method is None:
                    raise AttributeError(f"no method {spec.get('Function')!r}")
                args, kwargs = self.args_of(spec)
            except BaseException:
                with self.actor_cond:
                    self.await_turn(session, seq)
                    self.end_turn(session, seq)
                raise

            async def invoke():
                async with asem:
                    _context.set_task(spec)
                    self.event(spec, TE.RUNNING, actor=True)
                    r = method(*args, **kwargs)
                    if inspect.isawaitable(r):
                        r = await r
                    return r

            tid = spec.get("TaskID") or ""
            with self.actor_cond:
                self.await_turn(session, seq)
                try:
                    with self.rlock:
                        if tid in self.cancelled:
                            self.cancelled.discard(tid)
                            raise TaskCancelledError(f"actor call {spec.get('Name')} ({tid}) was cancelled")
                        fut = asyncio.run_coroutine_threadsafe(invoke(), loop)
                        self.async_calls[tid] = fut
                finally:
                    self.end_turn(session, seq)
            try:
                result = fut.result()
            except (concurrent.futures.CancelledError, asyncio.CancelledError):
                raise TaskCancelledError(f"actor call {spec.get('Name')} ({tid}) was cancelled") from None
            finally:
                with self.rlock:
                    self.async_calls.pop(tid, None)
            return self.reply(spec, result, start)
        except Exception as e:
            return {"Returns": None, "Stored": None, "Error": _core.failure_of(e, self.core),
                    "RunNanos": time.monotonic_ns() - start}

    def cancel(self, req):
        """Task.Cancel (docs/protocol.md): a task not started here never
        starts (its push answers NotRun); a running one gets
        TaskCancelledError raised in its thread (at its next Python
        bytecode: a blocking C call finishes first), or with Force this
        process exits at once, as Ray's force=True. An async actor's call
        has its coroutine cancelled (asyncio.CancelledError at its await)
        and answers TaskCancelledError, or never starts if it has not yet;
        other actors' calls run on, as Ray's."""
        req = req or {}
        tid = req.get("TaskID") or ""
        with self.rlock:
            fut = self.async_calls.get(tid)
            if fut is not None:  # an async actor's call: its coroutine is cancelled (as Ray's)
                fut.cancel()
                return {}
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

    def args_of(self, spec):
        """The positional and keyword arguments of spec, refs resolved."""
        args = [self.arg(a) for a in (spec.get("Args") or [])]
        names = spec.get("KwargNames") or []
        kwargs = {}
        if names:
            kwargs = dict(zip(names, args[len(args) - len(names):]))
            args = args[:len(args) - len(names)]
        return args, kwargs

    def reply(self, spec, result, start):
        """The PushTaskReply for result: values over P.INLINE_MAX pickled, or
        with large out-of-band buffers (numpy arrays), go into the node's
        store."""
        n = int(spec.get("NumReturns") or 1)
        values = [result] if n == 1 else list(result)
        if len(values) != n:
            raise ValueError(f"task {spec.get('Name')} returned {len(values)} values, num_returns={n}")
        returns, stored = [], []
        for i, v in enumerate(values):
            data, loc = self.core.stored_or_inline(f"{spec.get('TaskID')}.{i}", v)
            stored.append(loc)
            returns.append(data)
        if all(s is None for s in stored):
            stored = None
        return {"Returns": returns, "Stored": stored, "Error": None, "RunNanos": time.monotonic_ns() - start}

    def run(self, lease, spec, fn=None, actor=False):
        """Runs a task (fn None: spec's Code) or, with actor, an actor call
        (fn, the method; None for a method the actor lacks) and answers its
        PushTaskReply, its states recorded (event)."""
        rep = self._run(lease, spec, fn, actor)
        self.event(spec, TE.FAILED if rep.get("Error") else TE.FINISHED, rep.get("Error"), actor=actor)
        return rep

    def _run(self, lease, spec, fn=None, actor=False):
        start = time.monotonic_ns()
        core = self.core
        core.local.lease_id = lease
        _context.set_task(spec)
        try:
            task = fn is None  # a task, not an actor call: cancel may interrupt it
            if actor and fn is None:
                raise AttributeError(f"no method {spec.get('Function')!r}")
            if task:
                if not spec.get("Code"):
                    raise AttributeError(f"no method or function {spec.get('Function')!r}")
                fn = self.function(spec["Code"])
            args, kwargs = self.args_of(spec)
            self.event(spec, TE.RUNNING, actor=actor)
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
            return self.reply(spec, result, start)
        except Exception as e:
            return {"Returns": None, "Stored": None, "Error": _core.failure_of(e, core),
                    "RunNanos": time.monotonic_ns() - start}
        finally:
            core.local.lease_id = 0
            _context.set_task(None)

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


def _on(loop, fn):
    """fn() run on loop's thread (inside a coroutine, so asyncio objects
    made there belong to loop); its result, or its exception raised."""
    async def call():
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), loop).result()


def _event_loop(name):
    """A new asyncio event loop running on a daemon thread of its own."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name=f"nodeup-actor-loop-{name}", daemon=True).start()
    return loop


def main():
    _Executor().serve()


if __name__ == "__main__":
    main()
