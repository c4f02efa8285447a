"""Task events (Ray's task events), as the Go SDK's worker/taskevents.go:
the owner and the executing worker record each task state change in a
Reporter; a thread sends them to this process's node (``TaskEvents.Report``,
docs/protocol.md) in batches. Recording never blocks on the network nor
raises: past MAX_BUFFERED events it drops and counts (sent as ``Dropped``).

An event is a dict of wire.TaskEvent's field names (TaskID, JobID, Name,
Function, Type, ActorID, State, Attempt, NodeID, NodeName, WorkerID, PID,
Owner, Error) and ``Times``, a list of the unix nanoseconds the attempt
entered each of STATES (0 for a state not seen). On the wire it is a
msgpack array of those 14 values then the six times (wire/taskeventcodec.go),
not a map."""

import logging
import os
import threading
import time

log = logging.getLogger("nodeup")

# Task states in order (wire.TaskStates, as Ray's TaskStatus); a state's
# index is its rank: of two events of one attempt the higher is the later.
PENDING_ARGS_AVAIL = "PENDING_ARGS_AVAIL"
PENDING_NODE_ASSIGNMENT = "PENDING_NODE_ASSIGNMENT"
SUBMITTED_TO_WORKER = "SUBMITTED_TO_WORKER"
RUNNING = "RUNNING"
FINISHED = "FINISHED"
FAILED = "FAILED"
STATES = (PENDING_ARGS_AVAIL, PENDING_NODE_ASSIGNMENT, SUBMITTED_TO_WORKER, RUNNING, FINISHED, FAILED)
_RANK = {s: i for i, s in enumerate(STATES)}

# Task types (wire.TaskType*, as Ray's TaskType).
NORMAL_TASK = "NORMAL_TASK"
ACTOR_TASK = "ACTOR_TASK"
ACTOR_CREATION_TASK = "ACTOR_CREATION_TASK"
_TYPES = ("", NORMAL_TASK, ACTOR_TASK, ACTOR_CREATION_TASK)

MAX_NAME = 256  # wire.MaxTaskEventName: bytes of a name, function, node name or owner
MAX_ERROR = 1024  # wire.MaxTaskEventError: bytes of an error text (clip_error cuts longer)
MAX_BATCH = 1000  # wire.MaxTaskEventBatch: events per report
MAX_BUFFERED = 10 * MAX_BATCH  # events buffered before recording drops (Go's taskEventsMaxBuffered)
FLUSH_EVERY = 0.5  # s between reports of a driver (Go's taskEventsFlushEvery)
WORKER_FLUSH_EVERY = 0.1  # s between reports of a worker process, killed when its job ends
CALL_TIMEOUT = 5.0  # s a report may take (Go's taskEventsCallTimeout)
_MAX_ID = 128  # wire.MaxIDLen
_ID_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_.")
_ALNUM = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

# The encoded array's values (wire/taskeventcodec.go's order): strings and
# two ints, then the six times.
_STR_FIELDS = ("TaskID", "JobID", "Name", "Function", "Type", "ActorID", "State")
_MID_FIELDS = ("NodeID", "NodeName", "WorkerID")
_END_FIELDS = ("Owner", "Error")
_FIELDS = _STR_FIELDS + ("Attempt",) + _MID_FIELDS + ("PID",) + _END_FIELDS
_INT_FIELDS = ("Attempt", "PID")
FIELDS = 20  # wire's taskEventFields: 14 values and 6 times


def new_event(task_id, job_id, name, state, attempt=0, **fields):
    """An event of task_id at state (times all 0; record stamps the
    state's). fields: any other field of the module doc, e.g. Type,
    ActorID, NodeID, PID, Owner, Error."""
    ev = {"TaskID": task_id, "JobID": job_id, "Name": name, "Function": name, "Type": NORMAL_TASK, "ActorID": "",
          "State": state, "Attempt": attempt, "NodeID": "", "NodeName": "", "WorkerID": "", "PID": 0, "Owner": "",
          "Error": "", "Times": [0] * len(STATES)}
    ev.update(fields)
    return ev


def encode(ev):
    """ev as the list msgpack writes as wire.TaskEvent's array."""
    out = [ev.get(f) or (0 if f in _INT_FIELDS else "") for f in _FIELDS]
    times = list(ev.get("Times") or ())
    return out + (times + [0] * len(STATES))[:len(STATES)]


def decode(arr):
    """The event of a decoded wire.TaskEvent array (what TaskEvents.List
    answers): values past FIELDS are skipped, missing ones are zero."""
    arr = list(arr or ())
    ev = {}
    for i, f in enumerate(_FIELDS):
        v = arr[i] if i < len(arr) else None
        ev[f] = v if v is not None else (0 if f in _INT_FIELDS else "")
    ev["Times"] = [(arr[len(_FIELDS) + i] if len(_FIELDS) + i < len(arr) else 0) or 0 for i in range(len(STATES))]
    return ev


def rank(state):
    """state's place in STATES, -1 for an unknown state."""
    return _RANK.get(state, -1)


def merge(dst, src):
    """Folds src into dst, two events of one task, as wire.MergeTaskEvent:
    the later attempt wins; within an attempt the later state wins, each
    state's time is the earliest reported, and fields one side left empty
    are taken from the other."""
    if src["Attempt"] < dst["Attempt"]:
        _fill_identity(dst, src)
        return
    if src["Attempt"] > dst["Attempt"]:
        old = dict(dst)
        dst.clear()
        dst.update(src)
        dst["Times"] = list(src["Times"])
        _fill_identity(dst, old)
        return
    if rank(src["State"]) > rank(dst["State"]):
        dst["State"] = src["State"]
        if src["Error"]:
            dst["Error"] = src["Error"]
    for i, v in enumerate(src["Times"]):
        if v and (not dst["Times"][i] or v < dst["Times"][i]):
            dst["Times"][i] = v
    _fill_identity(dst, src)
    for f in ("NodeID", "NodeName", "WorkerID", "Error", "PID"):
        if not dst[f]:
            dst[f] = src[f]


def _fill_identity(dst, src):
    for f in ("JobID", "Name", "Function", "Type", "ActorID", "Owner"):
        if not dst[f]:
            dst[f] = src[f]


def clip_error(s):
    """s cut to MAX_ERROR bytes of UTF-8 (marking the cut), as
    wire.ClipTaskError."""
    s = str(s)
    b = s.encode("utf-8", "replace")
    if len(b) <= MAX_ERROR:
        return s
    mark = b" [...]"
    return b[:MAX_ERROR - len(mark)].decode("utf-8", "ignore") + mark.decode()


def clip_name(s):
    """s cut to MAX_NAME bytes of UTF-8 (a long qualified name)."""
    s = str(s)
    b = s.encode("utf-8", "replace")
    return s if len(b) <= MAX_NAME else b[:MAX_NAME].decode("utf-8", "ignore")


def check_id(field, v):
    """Why v is not a valid ID (wire.CheckID), None if it is."""
    if not isinstance(v, str) or not v or len(v) > _MAX_ID or v in (".", "..") or not set(v) <= _ID_CHARS:
        return f"{field} {v!r}: want 1 to {_MAX_ID} characters of letters, digits, '-', '_' and '.'"
    return None


def check(ev):
    """Why the node would refuse ev (wire.CheckTaskEvent), None if it
    would not: a bad event is dropped here rather than cost its batch."""
    err = check_id("task ID", ev.get("TaskID"))
    if err:
        return err
    job = ev.get("JobID")
    if not isinstance(job, str) or not 0 < len(job) <= 64 or job[0] not in _ALNUM or not set(job) <= _ID_CHARS:
        return f"job ID {job!r}: want 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"
    for f in ("ActorID", "NodeID", "WorkerID"):
        if ev.get(f):
            err = check_id(f, ev[f])
            if err:
                return err
    if rank(ev.get("State")) < 0:
        return f"state {ev.get('State')!r}: want one of {list(STATES)}"
    if ev.get("Type") not in _TYPES:
        return f"type {ev.get('Type')!r}: want one of {list(_TYPES[1:])}"
    for f, most in (("Name", MAX_NAME), ("Function", MAX_NAME), ("NodeName", MAX_NAME), ("Owner", MAX_NAME),
                    ("Error", MAX_ERROR)):
        v = ev.get(f) or ""
        if not isinstance(v, str) or len(v.encode("utf-8", "replace")) > most:
            return f"{f} of {len(str(v))} characters: the most accepted is {most} bytes"
    for f, most in (("Attempt", 1 << 20), ("PID", 1 << 62)):
        v = ev.get(f)
        if not isinstance(v, int) or not 0 <= v <= most:
            return f"{f} {v!r}: want 0 to {most}"
    times = ev.get("Times")
    if not isinstance(times, list) or len(times) != len(STATES) or any(
            not isinstance(t, int) or not 0 <= t < 1 << 63 for t in times):
        return f"times {times!r}: want {len(STATES)} unix nanoseconds, 0 or more"
    return None


class Reporter:
    """Buffers this process's task events for its node (core.node_addr)
    and sends them from a thread of its own, started at the first record:
    every FLUSH_EVERY s (WORKER_FLUSH_EVERY in a worker process), or at
    once when MAX_BATCH wait, until the core closes. A task's changes
    between two reports are merged into one event."""

    def __init__(self, core):
        self.core = core
        self.every = FLUSH_EVERY
        self.worker_id = ""  # this worker process's ID from its node; "" in a driver
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.buf = {}  # task ID -> its event, oldest first (dicts keep insertion order)
        self.dropped = 0  # since the last report
        self.flush_lock = threading.Lock()  # one send at a time
        self.kick = threading.Event()
        self.started = False

    def set_worker(self, worker_id):
        """Makes this a worker process's reporter: WORKER_FLUSH_EVERY, and
        worker_id in its executor events."""
        self.every = WORKER_FLUSH_EVERY
        self.worker_id = worker_id or ""

    def record(self, ev):
        """Buffers ev, its state's time stamped now if unset. Never raises
        nor blocks on the network: a full buffer drops ev (counted)."""
        try:
            i = rank(ev["State"])
            if i >= 0 and not ev["Times"][i]:
                ev["Times"][i] = time.time_ns()
            with self.lock:
                if not self.started:
                    self.started = True
                    threading.Thread(target=self._loop, daemon=True, name="nodeup-taskevents").start()
                cur = self.buf.get(ev["TaskID"])
                if cur is not None:
                    merge(cur, ev)
                    return
                if len(self.buf) >= MAX_BUFFERED:
                    self.dropped += 1
                    return
                self.buf[ev["TaskID"]] = ev
                full = len(self.buf) >= MAX_BATCH
            if full:
                self.kick.set()
        except Exception as e:  # task events are best effort: never into a task
            log.debug("record task event: %s", e)

    def retract(self, task_id):
        """Drops task_id's buffered, unsent event; True if there was one."""
        with self.lock:
            return self.buf.pop(task_id, None) is not None

    def _loop(self):
        closed = self.core._closed_event
        while not closed.is_set():
            self.kick.wait(self.every)
            self.kick.clear()
            if closed.is_set():
                return
            self.flush()

    def flush(self, timeout=CALL_TIMEOUT):
        """Sends every buffered event, in batches of at most MAX_BATCH. A
        batch the node does not take is dropped (counted in the next
        report): task events are best effort, as Ray's. An event that
        would not pass the node's checks is dropped here. Never raises."""
        try:
            with self.flush_lock:
                while True:
                    with self.lock:
                        ids = []
                        for tid in self.buf:
                            if len(ids) >= MAX_BATCH:
                                break
                            ids.append(tid)
                        batch = []
                        for tid in ids:
                            ev = self.buf.pop(tid)
                            if check(ev) is None:
                                batch.append(encode(ev))
                            else:
                                self.dropped += 1
                        dropped, self.dropped = self.dropped, 0
                        more = bool(self.buf)
                    if not batch and not dropped:
                        return
                    req = {"Events": batch}
                    if dropped:
                        req["Dropped"] = dropped
                    try:
                        self.core.pool.call(self.core.node_addr, "TaskEvents.Report", req, timeout=timeout)
                    except Exception as e:
                        log.debug("report %d task events to node %s; dropping them: %s", len(batch),
                                  self.core.node_addr, e)
                        with self.lock:
                            self.dropped += dropped + len(batch)
                        return
                    if not more:
                        return
        except Exception as e:
            log.debug("report task events: %s", e)
