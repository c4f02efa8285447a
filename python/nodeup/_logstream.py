"""log_to_driver for Python drivers, as Ray's ray.init(log_to_driver=True)
and the Go SDK's (worker/logtodriver.go, internal/logfollow): the driver
polls its node every 300 ms for its job's worker and actor log files on
every node (Logs.List with Cluster) and prints what each gained since the
last poll (Logs.Read from an offset), each line prefixed
``(<actor class, or task> pid=<pid> node=<node name>) ``. A line printed by
several processes within one poll is printed once with
`` [repeated Nx across cluster]``, as Ray's log deduplication."""

import logging
import sys
import threading

from . import _protocol as P

log = logging.getLogger("nodeup")

INTERVAL = 0.3  # seconds between polls
DRAIN = 1.0  # seconds the last poll at shutdown may take
MAX_READS_PER_POLL = 8  # Logs.Read calls one file gets in one poll (1 MiB each at most)
MAX_BATCH = 4 << 20  # bytes of lines held for deduplication before printing


def prefix(f):
    """The text before each line of log file f (a wire LogFile map)."""
    who = "task"
    if f.get("Kind") == "actor":
        # A Python class is recorded by its qualified name: show its own
        # name, as Ray's "(Counter pid=...)".
        who = (f.get("Class") or "").rsplit(".", 1)[-1] or f"actor {f.get('Actor', '')}"
    return f"({who} pid={f.get('PID', 0)} node={f.get('NodeName', '')}) "


class Follower:
    """Follows the current (not rotated) files of a cluster-wide listing of
    job's logs through call(method, request) → answer, keeping an offset
    per file; lines go to line(file, text). A file whose size fell below
    its offset was rotated: the rest of its newest backup (``.1``) is
    read, then the file from its start."""

    def __init__(self, call, job, line):
        self.call = call
        self.request = {"Job": job, "Cluster": True}
        self.line = line
        self.offsets = {}

    def poll(self):
        listing = self.call("Logs.List", self.request) or {}
        seen = set()
        for f in listing.get("Files") or []:
            if f.get("Backup"):
                continue
            key = f"{f.get('Addr')}/{f.get('Name')}"
            seen.add(key)
            known = key in self.offsets
            off = self.offsets.get(key, 0)
            if int(f.get("Size") or 0) < off:
                self._read(f, f["Name"] + ".1", off)
                off = 0
            if not known or int(f.get("Size") or 0) > off:
                off = self._read(f, f["Name"], off)
            self.offsets[key] = off
        for key in list(self.offsets):
            if key not in seen:
                del self.offsets[key]

    def _read(self, f, name, off):
        """Reads name (f's file or its backup) from off; returns the offset
        after the last whole line handed over."""
        for _ in range(MAX_READS_PER_POLL):
            try:
                r = self.call("Logs.Read", {"Node": f.get("Addr", ""), "Name": name, "Offset": off})
            except (P.RpcError, P.TransportError):
                return off
            size = int(r.get("Size") or 0)
            if size < off:  # rotated since the listing
                return 0 if name == f["Name"] else off
            nxt = self._emit(f, int(r.get("Offset") or 0), size, r.get("Data") or b"")
            if nxt == off:
                return off
            off = nxt
            if off >= size:
                return off
        return off

    def _emit(self, f, start, size, data):
        end = data.rfind(b"\n") + 1
        if end == 0 and start + len(data) < size:
            end = len(data)  # a line longer than one read
        for ln in data[:end].splitlines():
            self.line(f, ln.decode("utf-8", "replace"))
        return start + end


class Streamer:
    """A driver's log_to_driver poller, printing to out (default stdout)."""

    def __init__(self, core, out=None):
        self.core = core
        self.out = out
        self.batch = []
        self.bytes = 0
        self.lock = threading.Lock()  # serializes polls: the thread's and the final drain
        self.stopped = threading.Event()
        self.follower = Follower(self._call, core.job_id, self._line)
        self.thread = threading.Thread(target=self._loop, name="nodeup-log-to-driver", daemon=True)
        self.thread.start()

    def _call(self, method, req, timeout=10.0):
        return self.core.pool.call(self.core.node_addr, method, req, timeout=timeout)

    def _line(self, f, text):
        self.batch.append((f, text))
        self.bytes += len(text)
        if self.bytes > MAX_BATCH:
            self._print()

    def _loop(self):
        while not self.stopped.wait(INTERVAL):
            self.poll()

    def poll(self):
        with self.lock:
            try:
                self.follower.poll()
            except Exception as e:  # the node is gone or busy: the next poll tells
                log.debug("log_to_driver: poll the node: %s", e)
            self._print()

    def _print(self):
        procs, count = {}, {}
        for f, text in self.batch:
            procs.setdefault(text, set()).add(f"{f.get('Addr')}/{f.get('Name')}")
            count[text] = count.get(text, 0) + 1
        out = self.out or sys.stdout
        done = set()
        try:
            for f, text in self.batch:
                if len(procs[text]) == 1:
                    out.write(f"{prefix(f)}{text}\n")
                elif text not in done:
                    done.add(text)
                    out.write(f"{prefix(f)}{text} [repeated {count[text]}x across cluster]\n")
            out.flush()
        except (OSError, ValueError):  # stdout closed
            pass
        self.batch, self.bytes = [], 0

    def stop(self):
        """Ends polling and prints what the job's processes wrote since the
        last poll (one more poll, at most DRAIN seconds a call)."""
        self.stopped.set()
        self.thread.join(timeout=5)
        with self.lock:
            self.follower.call = lambda m, r: self._call(m, r, timeout=DRAIN)
        self.poll()
