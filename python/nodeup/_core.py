"""The core worker: owner of objects, task submitter and (in worker
processes) task executor, speaking docs/protocol.md. One per process."""

import collections
import logging
import mmap
import os
import pickle
import queue
import secrets
import ssl
import threading
import time
import traceback
import weakref

from . import _jobauth
from . import _netstore
from ._objectref import ObjectRef, dumps  # noqa: F401 (dumps: _core.dumps, as before)
from . import _options
from . import _protocol as P
from . import _serialize
from . import _state
from . import _taskevents as TE
from . import _transport
from .exceptions import (GetTimeoutError, ObjectLostError, RayTaskError, RuntimeEnvSetupError,
                         TaskCancelledError, WorkerCrashedError)

log = logging.getLogger("nodeup")

_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"

# WORKER_CERT_RENEW is how often (s) a core worker fetches a new certificate:
# about two thirds of pki.WorkerCertValidity (7 days), as Go's RenewAt.
WORKER_CERT_RENEW = 4.5 * 24 * 3600


def _base36(n):
    s = ""
    while True:
        n, r = divmod(n, 36)
        s = _B36[r] + s
        if n == 0:
            return s


class _Obj:
    """An object's state as this process knows it: pending, a value (pickle
    bytes), a store location, or a failure."""

    __slots__ = ("ready", "value", "loc", "error", "task_name", "callbacks")

    def __init__(self):
        self.ready = threading.Event()
        self.callbacks = None  # functions to call once ready (await on a ref)
        self.value = None
        self.loc = None
        self.error = None  # TaskFailure map, or an exception instance
        self.task_name = ""


_UNPIN = "unpin"  # tag of a (tag, key, ref) item on Core._unreferenced


class Core:
    """node_addr: the local node (host:port, its name in what this process
    sends); node_socket: its Unix socket (unix://PATH), dialed for calls to
    it when given (a secure node trusts local callers by their credentials
    there and refuses plaintext TCP); job_id: the job; bind_ip: where to
    serve; arena_path: the node's object store file; job_token: the job's
    token (JobRegisterReply.JobToken, or NODEUP_JOB_TOKEN in a worker),
    presented to other core workers and required of callers of this
    process's port ("" on an --insecure cluster: the port is open)."""

    def __init__(self, node_addr, job_id, bind_ip, arena_path, node_id="", node_name="", handlers=None,
                 node_socket=None, job_token="", remote=None):
        self.node_addr = node_addr
        self.job_id = job_id
        self.node_id = node_id
        self.node_name = node_name
        self.namespace = _options.DEFAULT_NAMESPACE  # named actors' namespace (init(namespace=...); NODEUP_NAMESPACE in a worker)
        # The runtime env vars work submitted from here inherits (init's
        # runtime_env; NODEUP_RUNTIME_ENV in a worker), and the refs of the
        # working dirs uploaded, by absolute path (_runtime_env).
        self.env_vars = {}
        self.working_dirs = {}
        self.prefix = secrets.token_hex(6)
        self.counter = 0
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.objects = {}  # object ID -> _Obj, for owned and fetched objects
        # Owned objects whose ref was pickled (sent in a task's arguments, a
        # put value or a result): a borrower may hold them, so they live
        # until the job ends, as before reference counting.
        self._escaped = set()
        # IDs of put objects whose last local handle is gone: freed by
        # _freer. A finalizer may run in any thread, even one holding
        # self.lock, so it only queues (SimpleQueue.put is reentrant).
        self._unreferenced = queue.SimpleQueue()
        threading.Thread(target=self._freer, daemon=True, name="nodeup-free").start()
        self.works = {}  # task ID -> the _Task, or (sender, call) of an actor call, until it finishes (cancel)
        self.qcond = threading.Condition()  # guards queues
        self.queues = {}  # resource shape -> _KeyQueue
        self._reaping = False  # a _reap_idle thread runs (qcond)
        self.closed = False
        self._closed_event = threading.Event()
        self.pool = P.Pool(job_token)
        # Task state changes for `nodeup list tasks` (Ray's task events),
        # sent to node_addr from a thread of the reporter's own.
        self.events = TE.Reporter(self)
        if node_socket:
            self.pool.route(node_addr, node_socket)
            # Other nodes (spillback, lease returns) want TLS with a node
            # certificate: this node's, as Go's worker.nodeCredential.
            self.pool.set_node_tls(lambda: _transport.node_tls_context(node_socket))
        elif remote is not None:
            remote.use(self.pool, node_addr, job_token)
        self.arena_path = arena_path
        self._maps_arena = None  # whether this process can map the node's store (maps_arena)
        self._arena = None
        self._fd = None  # the arena file, read-only, for zero-copy reads' own mappings
        self.local = threading.local()  # lease_id of the task this thread runs
        h = {"Object.Get": self._serve_get, "Object.GetMany": self._serve_get_many,
             "Owner.CancelTask": self._serve_owner_cancel}
        h.update(handlers or {})
        auth = None
        if job_token:
            auth = _jobauth.JobAuth(job_token, lambda tok: self.pool.call(
                self.node_addr, "Auth.Check", {"Token": tok}, timeout=_jobauth.AUTH_CHECK_TIMEOUT)).auth()
        # On a secure cluster this process serves TLS to, and dials TLS to,
        # core workers on other machines (Go's setupWorkerTLS).
        server_tls, client_tls = self._worker_tls() if job_token else (None, None)
        self.server = P.Server(bind_ip, h, auth=auth, tls=server_tls)
        self.address = self.server.address
        if client_tls is not None:
            self.pool.set_worker_tls(client_tls, self.address)
            threading.Thread(target=self._renew_worker_tls, daemon=True, name="nodeup-wtls").start()

    # ---- TLS with other core workers (docs/security.md#core-worker-traffic)

    def _worker_tls(self):
        """This process's (server, client) TLS contexts from a certificate
        its node gets it from the cluster CA (Worker.Certificate), as Go's
        coreWorker.fetchWorkerCert; (None, None) on an --insecure cluster
        (an empty reply). Raises ConnectionError when the node does not
        answer or answers with PEMs that do not load."""
        try:
            rep = self.pool.call(self.node_addr, "Worker.Certificate", {"JobID": self.job_id}, timeout=30)
        except (P.TransportError, P.RpcError) as e:
            raise ConnectionError(f"nodeup: get this process's TLS certificate from node {self.node_addr}: {e}") from e
        rep = rep or {}
        if not rep.get("CertPEM"):
            return None, None
        try:
            return _transport.worker_tls_contexts(rep["CertPEM"], rep["KeyPEM"] or b"", rep["CAPEM"] or b"")
        except (OSError, ssl.SSLError, TypeError) as e:
            raise ConnectionError(f"nodeup: the TLS certificate node {self.node_addr} gave: {e}") from e

    def _renew_worker_tls(self):
        """Serves with a fresh certificate every WORKER_CERT_RENEW seconds
        (a worker certificate is valid 7 days, pki.WorkerCertValidity; Go
        renews two thirds of the way), a minute after a failure, until
        close. Connections open keep theirs."""
        wait = WORKER_CERT_RENEW
        while not self._closed_event.wait(wait):
            try:
                server_tls, _ = self._worker_tls()
            except ConnectionError as e:
                log.warning("renew this process's TLS certificate failed; retrying in 60 s: %s", e)
                wait = 60.0
                continue
            if server_tls is not None:
                self.server.tls = server_tls
            wait = WORKER_CERT_RENEW

    # ---- IDs and object table

    def _next(self, kind=""):
        with self.lock:
            self.counter += 1
            return f"{self.prefix}-{kind}{_base36(self.counter)}"

    def _new_obj(self, oid):
        o = _Obj()
        with self.lock:
            self.objects[oid] = o
        return o

    def _finish(self, o, value=None, loc=None, error=None, task_name=""):
        with self.cond:
            o.value, o.loc, o.error, o.task_name = value, loc, error, task_name
            o.ready.set()
            self.cond.notify_all()
            cbs, o.callbacks = o.callbacks, None
        for cb in cbs or ():
            cb()

    def on_ready(self, ref, cb):
        """Calls cb() once ref's value (or failure) is here: at once if it
        is, else from the thread that receives it. cb must not block."""
        o = self._state(ref)
        with self.cond:
            if not o.ready.is_set():
                o.callbacks = (o.callbacks or []) + [cb]
                return
        cb()

    async def get_async(self, ref):
        """ref's value for ``await ref`` (as Ray's): waits on the running
        event loop without blocking it; a value in the node's store is
        read on the loop's default executor."""
        import asyncio
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def wake():
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(None))

        self.on_ready(ref, wake)
        await fut
        o = self._state(ref)
        if o.error is None and o.loc is not None:
            return await loop.run_in_executor(None, self.value_of, ref, o)
        return self.value_of(ref, o)

    # ---- object store (docs/protocol.md, Large objects)

    def maps_arena(self):
        """Whether this process can map its node's object store file: not
        when the node is on another machine (the file is not here) or runs
        as another user; large objects then go through the node
        (_netstore)."""
        with self.lock:
            if self._maps_arena is None:
                try:
                    os.close(os.open(self.arena_path, os.O_RDWR))
                    self._maps_arena = True
                except (OSError, ValueError):
                    self._maps_arena = False
            return self._maps_arena

    def arena(self):
        with self.lock:
            if self._arena is None:
                with open(self.arena_path, "r+b") as f:
                    self._arena = mmap.mmap(f.fileno(), 0)
            return self._arena

    def store_put(self, oid, ser):
        """Writes ser (a _serialize.Serialized) into the local node's store
        as <job>/<oid>, each of its parts copied once; returns its
        ObjectLoc."""
        key = f"{self.job_id}/{oid}"
        if not self.maps_arena():
            return _netstore.put(self.pool, self.node_addr, key, ser)
        loc = self.pool.call(self.node_addr, "Obj.Create", {"Key": key, "Size": ser.size})
        try:
            off = loc["Offset"]
            with memoryview(self.arena()) as m, m[off:off + ser.size] as dst:
                ser.write_into(dst)
            self.pool.call(self.node_addr, "Obj.Seal", {"Key": key})
        except BaseException:
            self.pool.call(self.node_addr, "Obj.Abort", {"Key": key})
            raise
        return {"Key": key, "NodeAddr": self.node_addr, "Size": ser.size}

    def store_read_value(self, ref, loc):
        """The value at loc (an ObjectLoc), made local by the node. A plain
        pickle is read from the store and the node's pin released at once.
        A frame with out-of-band buffers is read through a read-only
        mapping of its own pages: numpy arrays in it are zero-copy,
        read-only views of the store (as Ray's), and the object stays
        pinned, and ref held (so its owner keeps it), until the last of
        them is gone. Without the arena (maps_arena) the bytes come over
        the network, and arrays are read-only views of that copy."""
        if not self.maps_arena():
            return _serialize.loads(_netstore.read(self.pool, self.node_addr, loc))
        key = loc["Key"]
        where = self.pool.call(self.node_addr, "Obj.Locate", {"Loc": loc})
        off, size = where["Offset"], where["Size"]
        pinned = True
        try:
            a = self.arena()
            if a[off:off + 4] != _serialize.MAGIC:
                with memoryview(a) as m, m[off:off + size] as src:
                    return pickle.loads(src)
            base = off - off % mmap.ALLOCATIONGRANULARITY
            mm = mmap.mmap(self._arena_fd(), size + off - base, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                           prot=mmap.PROT_READ, offset=base)
            # From here the mapping's finalizer releases the pin (from the
            # freer thread: a finalizer may run where RPCs must not).
            weakref.finalize(mm, self._unreferenced.put, (_UNPIN, key, ref))
            pinned = False
            return _serialize.loads(memoryview(mm)[off - base:off - base + size])
        finally:
            if pinned:
                self._unpin(key)

    def _arena_fd(self):
        with self.lock:
            if self._fd is None:
                self._fd = os.open(self.arena_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            return self._fd

    def _unpin(self, key):
        """Drops this process's reader pin on key (Obj.Release), so the
        node may spill it again."""
        try:
            self.pool.call(self.node_addr, "Obj.Release", {"Keys": [key]})
        except Exception as e:  # the job's end drops it anyway
            log.debug("release pin of %s: %s", key, e)

    def stored_or_inline(self, oid, value):
        """(inline bytes, None) for a value small enough to travel in
        messages, else (None, ObjectLoc) once it is written to the store
        as oid."""
        ser = _serialize.serialize(value)
        if ser.buffers or ser.size > P.INLINE_MAX:
            return None, self.store_put(oid, ser)
        return ser.to_bytes(), None

    # ---- serving owned objects to borrowers

    def _reply_for(self, o):
        if o.error is not None:
            if isinstance(o.error, dict):
                return {"Error": o.error, "TaskName": o.task_name}
            return {"Lost": str(o.error)}
        if o.loc is not None:
            return {"Loc": o.loc}
        return {"Value": o.value}

    def _serve_get(self, req):
        req = req or {}
        with self.lock:
            o = self.objects.get(req.get("ID", ""))
        if o is None:
            return {"Lost": f"object {req.get('ID')!r} is not known to its owner {self.address}"}
        wait = max(0, min(int(req.get("WaitMillis") or 0), 60000)) / 1000.0
        if not o.ready.wait(wait):
            return {"NotReady": True}
        return self._reply_for(o)

    def _serve_get_many(self, req):
        req = req or {}
        ids = list(req.get("IDs") or [])[:4096]
        deadline = time.monotonic() + max(0, min(int(req.get("WaitMillis") or 0), 60000)) / 1000.0
        with self.cond:
            while True:
                objs = [self.objects.get(i) for i in ids]
                if any(o is not None and o.ready.is_set() for o in objs) or time.monotonic() >= deadline:
                    break
                self.cond.wait(deadline - time.monotonic())
        out = []
        for i, o in zip(ids, objs):
            if o is None:
                out.append({"Lost": f"object {i!r} is not known to its owner {self.address}"})
            elif not o.ready.is_set():
                out.append({"NotReady": True})
            else:
                out.append(self._reply_for(o))
        return {"Objects": out}

    # ---- put / get / wait

    def put(self, value):
        oid = self._next("p")
        o = self._new_obj(oid)
        data, loc = self.stored_or_inline(oid, value)
        self._finish(o, value=data, loc=loc)
        ref = ObjectRef(oid, self.address)
        weakref.finalize(ref, self._unreferenced.put, oid)
        return ref

    # ---- freeing put objects (the Go SDK's reference counting, for the
    # case without borrowers: a ref that never left this process)

    def escaped(self, oid):
        """Notes that the ref to oid was pickled: it is never freed early."""
        with self.lock:
            self._escaped.add(oid)

    def _freer(self):
        while True:
            item = self._unreferenced.get()
            if item is None:
                return
            if isinstance(item, tuple):  # (_UNPIN, key, ref): a zero-copy read's mapping is gone
                self._unpin(item[1])
                # Let go of the ref it held before waiting again: else the
                # ref (and its object) lived until the next item came.
                item = None
                continue
            self.release(item)

    def release(self, oid):
        """Frees put object oid once its last handle in this process is gone
        and its ref never left the process: its entry here and, for a
        large value, its copy in the node's store (Obj.Free), as Ray frees
        an object whose reference count reaches zero."""
        with self.lock:
            if oid in self._escaped or self.closed:
                return
            o = self.objects.pop(oid, None)
        if o is None or o.loc is None:
            return
        try:
            self.pool.call(self.node_addr, "Obj.Free", {"Keys": [o.loc["Key"]]})
        except Exception as e:  # the job's end frees it anyway
            log.debug("free object %s: %s", oid, e)

    def _state(self, ref):
        """The local state of ref, starting a fetch from its owner if needed."""
        with self.lock:
            o = self.objects.get(ref.id)
            if o is not None:
                return o
            o = _Obj()
            self.objects[ref.id] = o
        threading.Thread(target=self._fetch, args=(ref, o), daemon=True).start()
        return o

    def _fetch(self, ref, o):
        while True:
            try:
                rep = self.pool.call(ref.owner, "Object.Get", {"ID": ref.id, "WaitMillis": 10000}, timeout=30)
            except P.TransportError as e:
                self._finish(o, error=ObjectLostError(f"object {ref.id}: its owner {ref.owner} is unreachable ({e})"))
                return
            except P.RpcError as e:
                self._finish(o, error=ObjectLostError(f"object {ref.id}: {e}"))
                return
            if rep.get("NotReady"):
                continue
            if rep.get("Lost"):
                self._finish(o, error=ObjectLostError(f"object {ref.id}: {rep['Lost']}"))
            elif rep.get("Error"):
                self._finish(o, error=rep["Error"], task_name=rep.get("TaskName", ""))
            elif rep.get("Loc"):
                self._finish(o, loc=rep["Loc"])
            else:
                self._finish(o, value=rep.get("Value") or b"")
            return

    def _blocked(self):
        """Lends this task's CPU back to the node while it waits (Sched.Blocked)."""
        lease = getattr(self.local, "lease_id", 0)
        if lease:
            try:
                self.pool.call(self.node_addr, "Sched.Blocked", {"LeaseID": lease})
            except Exception:
                return 0
        return lease

    def _unblocked(self, lease):
        if lease:
            try:
                self.pool.call(self.node_addr, "Sched.Unblocked", {"LeaseID": lease})
            except Exception:
                pass

    def _wait_ready(self, states, num, deadline):
        """Waits until num of states are ready or the deadline (monotonic, or None) passes."""
        if sum(o.ready.is_set() for o in states) >= num:
            return True
        lease = self._blocked()
        try:
            with self.cond:
                while sum(o.ready.is_set() for o in states) < num:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self.cond.wait(left if left is not None else 1.0)
            return True
        finally:
            self._unblocked(lease)

    def value_of(self, ref, o):
        if o.error is not None:
            if isinstance(o.error, BaseException):
                raise o.error
            raise task_error(o.error, o.task_name)
        if o.loc is not None:
            return self.store_read_value(ref, o.loc)
        return _serialize.loads(o.value)

    def get(self, refs, timeout=None):
        states = [self._state(r) for r in refs]
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._wait_ready(states, len(states), deadline):
            n = sum(not o.ready.is_set() for o in states)
            raise GetTimeoutError(f"get timed out after {timeout} s: {n} of {len(states)} objects not ready")
        return [self.value_of(r, o) for r, o in zip(refs, states)]

    def wait(self, refs, num_returns, timeout):
        states = [self._state(r) for r in refs]
        deadline = None if timeout is None else time.monotonic() + timeout
        self._wait_ready(states, num_returns, deadline)
        ready, rest = [], []
        for r, o in zip(refs, states):
            (ready if o.ready.is_set() and len(ready) < num_returns else rest).append(r)
        return ready, rest

    # ---- submitting tasks (docs/protocol.md, Task lifecycle)

    def submit(self, code, name, args, kwargs, num_returns, resources, max_retries, retry_exceptions=False,
               strategy=None, env_vars=None):
        """Submits a task and returns its num_returns refs at once. The task
        waits for the refs among its arguments that this process owns,
        then joins the queue of its resource shape and runtime env vars
        (``env_vars``, already merged: every worker of a queue's leases
        starts with exactly these)."""
        tid = self._next()
        refs = [ObjectRef(f"{tid}.{i}", self.address) for i in range(num_returns)]
        outs = [self._new_obj(r.id) for r in refs]
        t = _Task(tid, code, name, num_returns, resources, max_retries, retry_exceptions, outs,
                  strategy or {"Kind": ""}, env_vars or {})
        with self.lock:
            self.works[tid] = t
        waits = any(isinstance(v, ObjectRef) and v.owner == self.address and not self._state(v).ready.is_set()
                    for v in list(args) + list(kwargs.values()))
        if waits:
            self._note(t, TE.PENDING_ARGS_AVAIL)
            threading.Thread(target=self._prepare_and_enqueue, args=(t, args, kwargs), daemon=True,
                             name=f"nodeup-deps-{tid}").start()
        else:
            self._prepare_and_enqueue(t, args, kwargs)
        return refs

    def _prepare_and_enqueue(self, t, args, kwargs):
        try:
            wargs = [self._arg(a) for a in args] + [self._arg(v) for v in kwargs.values()]
        except _ArgFailed as f:
            self._done(t.tid)
            if not t.cancelled:
                self._note(t, TE.FAILED, error=f.obj.error)
                for o in t.outs:
                    self._finish(o, error=f.obj.error, task_name=f.obj.task_name)
            return
        except Exception as e:
            self._fail_task(t, failure_of(e, self))
            return
        t.spec = {"TaskID": t.tid, "JobID": self.job_id, "Name": t.name, "Function": t.name, "Args": wargs,
                  "NumReturns": t.num_returns, "Owner": self.address, "Attempt": 0, "Code": t.code,
                  "KwargNames": list(kwargs.keys()) or None, "Resources": t.resources or None}
        self._enqueue(t)

    def _fail_task(self, t, fail):
        self._done(t.tid)
        self._note(t, TE.FAILED, lease=t.lease, error=fail)
        for o in t.outs:
            if not o.ready.is_set():
                self._finish(o, error=fail, task_name=t.name)

    def _done(self, tid):
        with self.lock:
            self.works.pop(tid, None)

    # ---- cancel (docs/protocol.md, Task.Cancel; Go's worker.Cancel)

    def cancel(self, ref, force=False, timeout=5.0):
        """Cancels the task or actor call producing ref, as Go's
        worker.Cancel: a queued task is dropped; a pushed one is told to its
        worker (Task.Cancel: interrupted there, or with force its worker
        exits); a queued actor call is dropped, a sent one is told to its
        worker (an async actor cancels its coroutine; others run it on). The
        refs of what was cancelled then raise TaskCancelledError at get. A
        finished task, a put's ref
        or an unknown one are left alone. Raises ValueError for a ref this
        process does not own or force on an actor call, RuntimeError when
        the worker could not be told (its refs are cancelled all the same)."""
        if ref.owner != self.address:
            raise ValueError(f"cancel {ref.id}: it is owned by the process at {ref.owner}; only the process that "
                             f"submitted a task can cancel it")
        tid = ref.id.rsplit(".", 1)[0]
        with self.lock:
            w = self.works.get(tid)
        if w is None:
            return
        if isinstance(w, tuple):
            sender, call = w
            if force:
                raise ValueError(f"cancel {ref.id}: force is not supported for actor calls (as Ray); cancel without it")
            if sender.drop(call):
                call.fail(self, TaskCancelledError(f"actor call {call.method} ({tid}) was cancelled"))
                return
            addr = call.sent_to
            if addr is None:
                return
            # Sent: an async actor cancels its coroutine and answers
            # TaskCancelledError; other actors run it on (as Ray's).
            try:
                self.pool.call(addr, "Task.Cancel", {"TaskID": tid, "Force": False}, timeout=timeout)
            except P.TransportError:
                pass  # the worker is gone: the call fails with it
            except P.RpcError as e:
                raise RuntimeError(f"cancel actor call {call.method}: tell its worker at {addr}: {e}") from e
            return
        t = w
        with self.qcond:
            if t.cancelled:
                return
            t.cancelled = True
            lease = t.lease
            q = self.queues.get(t.key)
            if lease is None and q is not None and t in q.tasks:
                q.tasks.remove(t)
        self._fail_task(t, TaskCancelledError(f"task {t.name} ({tid}) was cancelled"))
        if lease is None:
            return
        try:
            self.pool.call(lease["WorkerAddr"], "Task.Cancel", {"TaskID": tid, "Force": bool(force)}, timeout=timeout)
        except P.TransportError:
            if not force:  # a forced worker may exit before it answers
                raise RuntimeError(f"cancel task {t.name}: tell its worker at {lease['WorkerAddr']}: unreachable")
        except P.RpcError as e:
            raise RuntimeError(f"cancel task {t.name}: tell its worker at {lease['WorkerAddr']}: {e}") from e

    def _serve_owner_cancel(self, req):
        """Owner.CancelTask (``nodeup cancel <task-id>``): cancels a task or
        actor call this process submitted, by its ID, as cancel does (Go's
        handleOwnerCancel). bad_input for a malformed ID or force on an
        actor call; not_found when no unfinished work of that ID is here."""
        req = req or {}
        tid = req.get("TaskID")
        err = TE.check_id("task ID", tid)
        if err:
            raise P.RpcError("bad_input", err)
        with self.lock:
            known = tid in self.works
        if not known:
            raise P.RpcError("not_found", f"task {tid}: the process at {self.address} holds no unfinished task of that "
                                          f"ID (it finished, its refs were dropped, or another process submitted it)")
        try:
            self.cancel(ObjectRef(f"{tid}.0", self.address), force=bool(req.get("Force")))
        except ValueError as e:
            raise P.RpcError("bad_input", str(e)) from e
        return {}

    def _enqueue(self, t, front=False):
        """Queues t (at the front to run again); a lingering lease of its
        shape takes it at once, sent from this thread."""
        with self.qcond:
            if t.cancelled:
                return
            q = self.queues.get(t.key)
            if q is None:
                q = self.queues[t.key] = _KeyQueue(t.resources, t.name, t.strategy, t.env_vars)
            if front:
                q.tasks.appendleft(t)
            else:
                q.tasks.append(t)
            self._note(t, TE.PENDING_NODE_ASSIGNMENT)
            lease = None
            if q.idle:
                lease, _ = q.idle.pop()
                t = q.tasks.popleft()
                t.lease = lease
            else:
                self._pump(q)
        if lease is not None:
            self._send_push(q, lease, t)

    def _pump(self, q):
        """Keeps up to MAX_LEASE_REQUESTS Sched.Lease calls out while the
        queue is longer than the leases asked for; qcond held."""
        while q.requests < MAX_LEASE_REQUESTS and q.requests < len(q.tasks):
            q.requests += 1
            threading.Thread(target=self._lease_request, args=(q,), daemon=True, name="nodeup-lease").start()

    def _arg(self, v):
        if isinstance(v, ObjectRef):
            o = self._state(v)
            with self.lock:
                owned = v.owner == self.address
            if owned:
                o.ready.wait()
                if o.error is not None:
                    raise _ArgFailed(o)
                if o.loc is None:
                    return {"Inline": o.value, "RefID": "", "Owner": "", "IsRef": False}
                self.escaped(v.id)  # the task reads it from the store, maybe after the caller let go
            return {"Inline": None, "RefID": v.id, "Owner": v.owner, "IsRef": True}
        oid = self._next("a")
        data, loc = self.stored_or_inline(oid, v)
        if loc is not None:
            self._finish(self._new_obj(oid), loc=loc)
            return {"Inline": None, "RefID": oid, "Owner": self.address, "IsRef": True}
        return {"Inline": data, "RefID": "", "Owner": "", "IsRef": False}

    def _lease(self, resources, name, strategy, env_vars=None):
        req = {"JobID": self.job_id, "BinaryHash": "", "BinaryNode": "", "Env": None, "Resources": resources,
               "Strategy": strategy, "Spilled": False, "TaskName": name, "NoQueueIfNot": False,
               "Language": P.LANGUAGE}
        if env_vars:
            req["EnvVars"] = env_vars
        addr, warned = self.node_addr, False
        while True:
            if self.closed:
                raise RuntimeError("nodeup was shut down")
            try:
                rep = self.pool.call(addr, "Sched.Lease", req)
            except P.TransportError:
                time.sleep(0.1)
                addr, req["Spilled"] = self.node_addr, addr != self.node_addr
                continue
            if rep.get("LeaseID"):
                return rep
            if rep.get("Spillback"):
                addr = rep["Spillback"]
                self.pool.mark_node(addr)
                req["Spilled"] = True
                continue
            if rep.get("Infeasible"):
                if not warned:
                    log.warning("task %s is infeasible: %s (waiting for a node that fits)", name, rep["Infeasible"].get("Reason"))
                    warned = True
                time.sleep(1)
                addr, req["Spilled"] = self.node_addr, False
                continue
            time.sleep(0.1)

    def _lease_request(self, q):
        """Leases a worker for q's shape and runs q's next task on it; a
        lease that cannot be had fails the queued tasks (none may hang)."""
        try:
            lease = self._lease(q.resources, q.name, q.strategy, q.env_vars)
        except Exception as e:  # e.g. worker_failed: the queued tasks fail, never hang
            with self.qcond:
                q.requests -= 1
                tasks = list(q.tasks) if q.requests == 0 and q.holders == 0 else []
                for t in tasks:
                    q.tasks.remove(t)
            for t in tasks:
                if isinstance(e, P.RpcError) and e.code == "runtime_env_setup_failed":
                    self._fail_task(t, RuntimeEnvSetupError(f"task {t.name}: {e}"))
                else:
                    self._fail_task(t, {"Message": f"task {t.name} could not get a worker: {e}", "Stack": "", "Panic": False})
            return
        with self.qcond:
            q.requests -= 1
            q.holders += 1
        self._dispatch(q, lease)

    def _dispatch(self, q, lease):
        """Sends q's next task to lease's worker; with none queued the lease
        lingers LEASE_LINGER seconds for the next task of its shape (the
        reaper gives it back after)."""
        with self.qcond:
            if not q.tasks:
                q.idle.append((lease, time.monotonic() + LEASE_LINGER))
                if not self._reaping:
                    self._reaping = True
                    threading.Thread(target=self._reap_idle, daemon=True, name="nodeup-linger").start()
                return
            t = q.tasks.popleft()
            t.lease = lease
        self._send_push(q, lease, t)

    def _reap_idle(self):
        """Gives back the leases that lingered past their time, while any
        linger; ends when none is left (the next one starts it again)."""
        while True:
            time.sleep(LEASE_LINGER / 2)
            now, expired = time.monotonic(), []
            with self.qcond:
                left = False
                for q in self.queues.values():
                    keep = [(lease, until) for lease, until in q.idle if until > now and not self.closed]
                    expired += [lease for lease, until in q.idle if until <= now or self.closed]
                    q.holders -= len(q.idle) - len(keep)
                    q.idle = keep
                    left = left or bool(keep)
                if not left:
                    self._reaping = False
            for lease in expired:
                self._return(lease)
            if not left:
                return

    def _send_push(self, q, lease, t):
        """Sends t to lease's worker; its answer is handled by _pushed on
        the connection's reader thread (no thread per task)."""
        self._note(t, TE.SUBMITTED_TO_WORKER, lease=lease)
        try:
            self.pool.call_async(lease["WorkerAddr"], "Task.Push", {"LeaseID": lease["LeaseID"], "Spec": t.spec},
                                 lambda rep, err: self._pushed(q, lease, t, rep, err))
        except Exception as e:  # cannot dial the worker: as a failed push
            self._pushed(q, lease, t, None, e if isinstance(e, P.TransportError) else P.TransportError(str(e)))

    def _pushed(self, q, lease, t, rep, err):
        """Handles a Task.Push's answer (or failure), then gives the lease
        the next task, or drops it when it is unusable. Runs on the thread
        that read the answer: node calls go to a thread of their own."""
        keep, finish = self._push_outcome(lease, t, rep, err)
        t.lease = None
        # The lease takes its next task (or lingers) before t's results
        # are handed out: a driver woken by them and submitting at once
        # finds it idle rather than asking the node for another.
        if keep and not q.spread:
            self._dispatch(q, lease)
        else:
            with self.qcond:
                q.holders -= 1
                self._pump(q)
            if keep:  # SPREAD: one task per lease, each lease placed anew (as Go's)
                threading.Thread(target=self._return, args=(lease,), daemon=True, name="nodeup-return").start()
        if finish is not None:
            finish()

    def _push_outcome(self, lease, t, rep, err):
        """Records t's push answer rep (or err): returns whether the lease
        is usable still (not when its worker died, or the lease was
        revoked), and a function handing out t's results (None when there
        are none to hand out). A task to run again is queued."""
        if isinstance(err, P.TransportError):
            t.crashes += 1
            if t.cancelled:  # e.g. cancel(force=True) ended the worker: not retried
                pass
            elif t.max_retries >= 0 and t.crashes > t.max_retries:
                failure = WorkerCrashedError(f"task {t.name}: the worker process died while running it "
                                             f"({t.crashes} times; max_retries={t.max_retries}): {err}")
                self._done(t.tid)
                self._note(t, TE.FAILED, lease=lease, error=failure)
                for o in t.outs:
                    self._finish(o, error=failure)
            else:
                log.info("task %s: worker %s died, retrying (%d/%s)", t.name, lease.get("WorkerID"), t.crashes, t.max_retries)
                t.spec["Attempt"] += 1
                self._enqueue(t, front=True)
            return False, None  # the node releases the dead worker's leases
        if isinstance(err, P.RpcError):
            if err.code == "lease_revoked":
                self._enqueue(t, front=True)
                threading.Thread(target=self._return, args=(lease,), daemon=True, name="nodeup-return").start()
                return False, None
            if not t.cancelled:
                self._fail_task(t, {"Message": str(err), "Stack": "", "Panic": False})
            return True, None
        if err is not None:
            if not t.cancelled:
                self._fail_task(t, {"Message": f"task {t.name}: {err}", "Stack": "", "Panic": False})
            return True, None
        if t.cancelled:  # cancelled while it ran: what it brought back is discarded
            return True, None
        if rep.get("NotRun"):
            self._enqueue(t, front=True)
            return True, None
        if rep.get("Error") and t.retry_exceptions and t.spec["Attempt"] < t.max_retries:
            t.spec["Attempt"] += 1
            self._enqueue(t)
            return True, None
        self._done(t.tid)
        self._note(t, TE.FAILED if rep.get("Error") else TE.FINISHED, lease=lease, error=rep.get("Error"),
                   run_nanos=int(rep.get("RunNanos") or 0))
        return True, lambda: self.complete(t.outs, rep, t.name)

    def _note(self, t, state, lease=None, error=None, run_nanos=0):
        """Records an owner-side state change of task t (at its current
        attempt) for its node's task record, as Go's submitter.noteOnLease:
        on lease, its node, worker and PID; run_nanos (the worker's
        PushTaskReply.RunNanos, 0 if none) dates when it started running;
        error (a TaskFailure map or an exception) its error text. Never
        raises."""
        try:
            ev = TE.new_event(t.tid, self.job_id, TE.clip_name(t.name), state,
                              int((t.spec or {}).get("Attempt") or 0), Owner=self.address)
            if lease:
                ev.update(NodeID=lease.get("NodeID") or "", NodeName=lease.get("NodeName") or "",
                          WorkerID=lease.get("WorkerID") or "", PID=int(lease.get("WorkerPID") or 0))
            if run_nanos > 0:
                now = time.time_ns()
                ev["Times"][TE.rank(state)] = now
                ev["Times"][TE.rank(TE.RUNNING)] = max(now - run_nanos, 1)
            if error is not None:
                ev["Error"] = TE.clip_error(error.get("Message") or "" if isinstance(error, dict)
                                            else f"{type(error).__name__}: {error}")
            self.events.record(ev)
        except Exception as e:  # best effort: never into submission
            log.debug("task event of %s: %s", t.tid, e)

    def complete(self, outs, rep, name):
        """Records a PushTaskReply's results (or failure) as outs."""
        fail = rep.get("Error")
        if fail:
            for o in outs:
                self._finish(o, error=fail, task_name=name)
            return
        returns = rep.get("Returns") or []
        stored = rep.get("Stored") or []
        for i, o in enumerate(outs):
            loc = stored[i] if i < len(stored) else None
            if loc:
                self._finish(o, loc=loc)
            elif i < len(returns) and returns[i] is not None:
                self._finish(o, value=returns[i])
            else:
                self._finish(o, error={"Message": f"task {name} returned {len(returns)} values, want {len(outs)}",
                                       "Stack": "", "Panic": False}, task_name=name)

    def _return(self, lease):
        if self.closed:
            return  # Job.Finish ended the job's workers, and their leases with them
        try:
            self.pool.mark_node(lease["NodeAddr"])
            self.pool.call(lease["NodeAddr"], "Sched.Return", {"LeaseID": lease["LeaseID"]})
        except Exception as e:
            log.debug("return lease %s: %s", lease.get("LeaseID"), e)

    def cluster_view(self):
        return self.pool.call(self.node_addr, "Sched.ClusterView", {}).get("Nodes") or []

    def close(self):
        self.closed = True
        self._closed_event.set()
        self._unreferenced.put(None)
        with self.lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # mappings made from it stay valid
        self.server.stop()
        self.pool.close()


MAX_LEASE_REQUESTS = 10  # Sched.Lease calls out per resource shape, as the Go SDK
LEASE_LINGER = 0.05  # seconds a lease without work is kept for the next task of its shape


class _Task:
    __slots__ = ("tid", "code", "name", "num_returns", "resources", "key", "max_retries", "retry_exceptions",
                 "outs", "spec", "crashes", "cancelled", "lease", "strategy", "env_vars")

    def __init__(self, tid, code, name, num_returns, resources, max_retries, retry_exceptions, outs, strategy,
                 env_vars):
        self.tid, self.code, self.name, self.num_returns = tid, code, name, num_returns
        self.strategy = strategy
        self.resources = resources
        self.env_vars = env_vars
        self.key = (tuple(sorted(resources.items())), _options.strategy_key(strategy), tuple(sorted(env_vars.items())))
        self.max_retries, self.retry_exceptions, self.outs = max_retries, retry_exceptions, outs
        self.spec, self.crashes = None, 0
        self.cancelled = False  # cancel: never run (again), its results discarded
        self.lease = None  # the lease it was pushed on, while out


class _KeyQueue:
    """The tasks of one resource shape waiting for a lease, and the leases
    asked for (requests), running its tasks (holders) and lingering (idle)."""

    def __init__(self, resources, name, strategy, env_vars):
        self.resources, self.name, self.strategy, self.env_vars = resources, name, strategy, env_vars
        self.spread = strategy.get("Kind") == "SPREAD"
        self.tasks = collections.deque()
        self.requests = self.holders = 0  # lease calls out; leases held (running a task, or idle)
        self.idle = []  # (lease, monotonic time it is given back) of leases lingering without work


class _ArgFailed(Exception):
    def __init__(self, obj):
        self.obj = obj


class _ExcShell:
    """Pickles an exception whose __init__ cannot be called again with its
    args (e.g. a required keyword): rebuilt with __new__, args and __dict__."""

    def __init__(self, e):
        self.cls, self.args, self.state = type(e), e.args, dict(getattr(e, "__dict__", {}))

    def __reduce__(self):
        return (_rebuild_exception, (self.cls, self.args, self.state))


def _rebuild_exception(cls, args, state):
    e = cls.__new__(cls, *args)
    e.args = args
    e.__dict__.update(state)
    return e


def _exception_payload(e):
    for obj in (e, _ExcShell(e)):
        try:
            payload = dumps(obj)
            pickle.loads(payload)
            return payload
        except Exception:
            continue
    return None


def failure_of(e, core):
    """A TaskFailure map for exception e raised in a task."""
    payload = _exception_payload(e)
    stack = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    text = str(e)
    return {"Message": f"{type(e).__name__}: {text}" if text else type(e).__name__, "Stack": stack, "Panic": False, "NodeID": core.node_id,
            "NodeName": core.node_name, "PID": os.getpid(), "Payload": payload}


def task_error(fail, task_name):
    """The exception to raise at get for a TaskFailure map."""
    cause = None
    if fail.get("Payload"):
        try:
            cause = pickle.loads(fail["Payload"])
        except Exception:
            cause = None
    if isinstance(cause, RayTaskError):
        return cause
    err = RayTaskError(task_name or "task", fail.get("Stack") or fail.get("Message", ""), cause,
                       fail.get("PID", 0), fail.get("NodeName", ""))
    return err.as_instanceof_cause()
