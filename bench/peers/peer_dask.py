#!/usr/bin/python3
"""Dask distributed peer of `nodeup bench`, for `make compare`.

Same metric names, units and operation sizes as `nodeup bench` (bench/*.go), written as
idiomatic Dask: futures (client.submit / map / gather / wait), actors (actor=True), scatter.
Harness as Ray's ray_perf.py timeit and as nodeup bench: a warm-up window, then --reps timed
windows of --rep-time seconds (at least one operation each); value = MEDIAN of the windows.
Metrics Dask cannot express are written with "skipped": <reason>, never approximated.

Adapted from the reference peer at /work/shared/bench/peer_dask.py (harness, cluster setup,
loopback check, watchdog): names and units now match nodeup's; the wait metric uses
wait(return_when=FIRST_COMPLETED) one completion at a time, as Ray and nodeup do; the rest of
nodeup's metrics were added. The reference's own extras keep their names and are listed as
"extra" in the comparison.

Setup: LocalCluster(processes=True, n_workers=2, threads_per_worker=1) on 127.0.0.1 only
(scheduler + client in this process, 2 nanny-managed worker processes): one worker per core
of the 2-core target, as nodeup's node runs one task per CPU. Dask defaults are kept
(scatter/gather go through the scheduler) unless a metric says direct=True.

Run:   /usr/bin/python3 peer_dask.py [--out /tmp/peer_dask.json] [--quick] [--only a,b] [--filter REGEX]
Output: one line per metric on stderr as it finishes; JSON to --out
        ({"machine": ..., "metrics": [{name, value, unit, runs, min, median, max, ...}]}).
Requires (Debian): python3-distributed (pulls dask, psutil, msgpack, cloudpickle) and
                   python3-numpy.
"""
import argparse
import json
import logging
import os
import platform
import re
import statistics
import sys
import threading
import time
import warnings

EXIT_MISSING_DEP = 2
EXIT_NETWORK = 3
EXIT_WATCHDOG = 4

# Sizes: the same as nodeup bench (bench/tasks.go, objects.go, transfer.go, scalability.go).
ASYNC_BATCH = 1000          # tasks per *_async / batch operation
ACTOR_CREATION_BATCH = 50   # actors one actor_creation operation creates
MULTI_CLIENTS = 4           # client tasks of multi_client_tasks_async
MULTI_CLIENT_TASKS = 1000   # tasks each client submits
MULTI_PUT_TASKS = 10        # tasks of multi_client_put_*
MULTI_PUT_SMALL = 100       # small puts per task
MULTI_PUT_PER_TASK = 10     # large puts per task
MULTI_PUT_SIZE = 8 << 20    # bytes per large put of a task
PUT_LARGE_SIZE = 100 << 20  # bytes of single_client_put_gigabytes
PULL_SIZE = 64 << 20        # bytes of one cross-worker pull
WAIT_REFS = 1000
ITEM_INTS = 1000            # ints per item of the scalability metrics
LATENCY_MIN_SAMPLES = 20


def _die(code, msg):
    print(f"peer_dask: ERROR: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def _import_dask():
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
        import numpy  # noqa: F401
        import psutil  # noqa: F401
    except Exception as e:  # ImportError or broken install
        _die(EXIT_MISSING_DEP,
             f"Dask distributed is not importable with {sys.executable} ({e!r}).\n"
             "  Install with: apt-get install -y python3-distributed python3-numpy\n"
             "  and run with Debian's /usr/bin/python3 (not a pyenv/venv python).")


# ----------------------------------------------------------------- remote functions
# Defined in __main__: cloudpickle ships them by value to the worker processes.

def small_value():
    return b"ok"


def small_value_i(i):
    return b"ok"


def small_value_batch(n):
    """A client inside the cluster (Ray's Actor.small_value_batch, nodeup's small_value_batch)."""
    from distributed import worker_client
    with worker_client() as c:  # secedes from the worker's thread pool while it waits
        c.gather([c.submit(small_value, pure=False) for _ in range(n)])
    return n


def put_small(n):
    """n small puts from inside the cluster (Ray's do_put_small)."""
    from distributed import get_worker, worker_client
    with worker_client() as c:
        here = [get_worker().address]
        for _ in range(n):
            c.scatter(0, hash=False, workers=here, direct=True)
    return n


def put_large(n, size):
    """n puts of a size-byte buffer from inside the cluster (Ray's do_put), kept on this worker."""
    import numpy as np
    from distributed import get_worker, worker_client
    buf = np.zeros(size // 8, dtype=np.int64)
    with worker_client() as c:
        here = [get_worker().address]
        for _ in range(n):
            c.scatter(buf, hash=False, workers=here, direct=True)
    return n


def make_bytes(size):
    b = bytearray(size)
    b[4096::4096] = b"\x01" * len(range(4096, size, 4096))
    return bytes(b)


def sum_args(*args):
    return int(sum(a.sum() for a in args))


def rss_of_self():
    import psutil
    return psutil.Process().memory_info().rss


class Actor:
    """Ray's Actor of ray_perf.py (nodeup's benchActor): no-op methods run one at a time on the
    worker's actor thread (Dask's default for methods that are not `async def`)."""

    def small_value(self):
        return b"ok"

    def small_value_arg(self, x):
        # Dask does not resolve a future passed to an actor method (dask/distributed#3113, #4832):
        # the method gets the Future itself and fetches the value, as a Dask user has to.
        if x.result() != b"ok":
            raise RuntimeError("bad argument value")
        return b"ok"


class AsyncActor:
    """The concurrent actor of 1_1_actor_calls_concurrent. Dask actors have no max_concurrency;
    the documented way to make one serve calls concurrently is `async def` methods, which run on
    the worker's event loop instead of the single actor thread (docs: actors.rst, "Coroutines and
    async/await on the Actor"). Concurrency is then unbounded (nodeup: MaxConcurrency(16))."""

    async def small_value(self):
        return b"ok"


def call_actors(servers, n):
    """n calls spread over server actors (round robin), then every result awaited."""
    k = len(servers)
    fs = [servers[i % k].small_value() for i in range(n)]
    for f in fs:
        if f.result() != b"ok":
            raise RuntimeError("bad actor result")
    return n


def call_actors_task(servers, n):
    """A client task of n_n_actor_calls_async (Ray's `work`, nodeup's CPUs(0) callServersTask).
    secede() takes the task out of the worker's thread pool while it waits on actor calls (the
    Dask idiom for a task that waits on other cluster work), so the 4 clients all run at once on
    2 one-thread workers, as nodeup's CPUs(0) clients do. The Actor handles a task receives call
    the server's worker directly (worker rpc), not through the scheduler."""
    from distributed import secede
    secede()
    return call_actors(servers, n)


class ClientActor:
    """Ray's Client actor (nodeup's clientActor): calls its server actors from inside the cluster."""

    def __init__(self, servers):
        self.servers = servers

    def small_value_batch(self, n):
        return call_actors(self.servers, n)

    def small_value_batch_arg(self, n):
        """n calls to its server, each with a scattered value as argument (Ray's
        small_value_batch_arg: one ray.put, then n calls taking the ref)."""
        from distributed import get_client
        # From inside an actor method, scatter stores the value on this worker (the put's owner).
        x = get_client().scatter(b"ok", hash=False)
        s = self.servers[0]
        fs = [s.small_value_arg(x) for _ in range(n)]
        for f in fs:
            if f.result() != b"ok":
                raise RuntimeError("bad actor result")
        return n


# ----------------------------------------------------------------- timing harness

class Bench:
    def __init__(self, args):
        self.args = args
        self.t_start = time.perf_counter()
        self.results = []

    def remaining(self):
        return self.args.budget - (time.perf_counter() - self.t_start)

    def wanted(self, name):
        a = self.args
        if a.filter and not re.search(a.filter, name):
            return False
        return not a.only or any(p in name for p in a.only.split(","))

    def record(self, name, unit, samples=None, note="", skipped="", error="", lower=False, items=0, extra=False):
        r = {"name": name, "unit": unit, "note": note}
        if lower:
            r["lower_is_better"] = True
        if items:
            r["items"] = items
        if extra:
            r["extra"] = True
        if skipped:
            r["skipped"] = skipped
            print(f"{name}: skipped ({skipped})", file=sys.stderr, flush=True)
        elif error:
            r["error"] = error
            print(f"{name}: ERROR {error}", file=sys.stderr, flush=True)
        else:
            med = statistics.median(samples)
            r.update(value=med, median=med, min=min(samples), max=max(samples), runs=len(samples), samples=samples)
            print(f"{name}: {med:.4g} {unit} ({len(samples)} runs)", file=sys.stderr, flush=True)
        self.results.append(r)

    def skip(self, name, unit, reason, lower=False):
        if self.wanted(name):
            self.record(name, unit, skipped=reason, lower=lower)

    def measure(self, name, unit, run, note="", lower=False, items=0, extra=False, warmup=True, reps=None):
        """run(seconds) does one timed window and returns its value."""
        a = self.args
        if not self.wanted(name):
            return
        if self.remaining() < 2.0:
            self.record(name, unit, skipped="time budget of the Dask run exhausted", lower=lower)
            return
        try:
            if warmup:
                run(a.warmup)
            samples = [run(a.rep_time) for _ in range(reps or a.reps)]
        except Exception as e:  # record, keep going with the other metrics
            self.record(name, unit, error=repr(e)[:300], lower=lower)
            return
        self.record(name, unit, samples, note=note, lower=lower, items=items, extra=extra)

    def timeit(self, name, fn, multiplier=1, unit="ops/s", note="", extra=False, max_ops=0, reps=None):
        """Ray-style throughput: fn repeats until the window has passed; multiplier units per call."""
        a = self.args

        def run(seconds):
            start = time.perf_counter()
            n = 0
            while True:
                fn()
                n += 1
                el = time.perf_counter() - start
                if el >= seconds or n >= a.max_calls or (max_ops and n >= max_ops):
                    break
            return multiplier * n / el
        self.measure(name, unit, run, note=note, extra=extra, reps=reps)


# ----------------------------------------------------------------- loopback check

def listening_sockets():
    import psutil
    me = psutil.Process()
    procs = [me] + me.children(recursive=True)
    out = []
    for p in procs:
        try:
            conns = p.connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                out.append({"pid": p.pid, "addr": f"{c.laddr.ip}:{c.laddr.port}"})
    return out


def start_watchdog(seconds):
    def fire():
        print(f"peer_dask: ERROR: watchdog fired after {seconds:.0f}s; killing cluster "
              "processes and exiting", file=sys.stderr, flush=True)
        try:
            import psutil
            for ch in psutil.Process().children(recursive=True):
                try:
                    ch.kill()
                except Exception:
                    pass
        finally:
            os._exit(EXIT_WATCHDOG)
    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()
    return t


# ----------------------------------------------------------------- benchmarks

def actor_shape(b, name, setup, op, calls, note="", reps=None):
    """An actor metric whose actors are created (untimed) only when the metric runs."""
    if not b.wanted(name):
        return
    try:
        state = setup()
    except Exception as e:
        b.record(name, "calls/s", error="setup: " + repr(e)[:300])
        return
    b.timeit(name, lambda: op(state), calls, unit="calls/s", note=note, reps=reps)
    del state


def run_benchmarks(client, cluster, b, args, idle_rss):
    import numpy as np
    from distributed import wait
    T = args.op_timeout
    workers = sorted(client.scheduler_info()["workers"])

    # --- node footprint (measured right after boot, before any work) ---------
    b.measure("idle_node_rss", "MiB", lambda _s: idle_rss, lower=True, warmup=False, reps=1,
              note="RSS of one idle Dask worker process plus its nanny, right after the cluster "
                   "started (nodeup: an idle `nodeup start --head` daemon)")

    # --- tasks -------------------------------------------------------------
    def tasks_sync():
        assert client.submit(small_value, pure=False).result(timeout=T) == b"ok"
    b.timeit("single_client_tasks_sync", tasks_sync, unit="tasks/s",
             note="submit 1 no-op task, block on .result(); client->scheduler->worker->scheduler->client; "
                  "the client's BatchedSend to the scheduler flushes every 10 ms (hard-coded in Client)")

    def tasks_async():
        client.gather([client.submit(small_value, pure=False) for _ in range(ASYNC_BATCH)])
    b.timeit("single_client_tasks_async", tasks_async, ASYNC_BATCH, unit="tasks/s",
             note=f"{ASYNC_BATCH} x client.submit(pure=False), then client.gather")

    def tasks_async_map():
        client.gather(client.map(small_value_i, range(ASYNC_BATCH), pure=False))
    b.timeit("single_client_tasks_async_map", tasks_async_map, ASYNC_BATCH, unit="tasks/s", extra=True,
             note=f"extra: the idiomatic client.map over {ASYNC_BATCH} items (one graph message)")

    def multi_client():
        client.gather([client.submit(small_value_batch, MULTI_CLIENT_TASKS, pure=False)
                       for _ in range(MULTI_CLIENTS)])
    b.timeit("multi_client_tasks_async", multi_client, MULTI_CLIENTS * MULTI_CLIENT_TASKS, unit="tasks/s",
             note=f"{MULTI_CLIENTS} client tasks on the workers, each worker_client() submitting "
                  f"{MULTI_CLIENT_TASKS} no-ops and gathering them")

    b.timeit("single_client_tasks_and_get_batch", tasks_async, unit="batches/s",
             note=f"one batch: {ASYNC_BATCH} x client.submit, then client.gather")

    # --- actors ------------------------------------------------------------
    actor = client.submit(Actor, actor=True, pure=False).result(timeout=T)

    def actor_sync():
        actor.small_value().result(timeout=T)
    b.timeit("1_1_actor_calls_sync", actor_sync, unit="calls/s",
             note="Dask actor (client.submit(cls, actor=True)); calls go client->worker directly")

    def actor_async():
        fs = [actor.small_value() for _ in range(ASYNC_BATCH)]
        for f in fs:
            f.result(timeout=T)
    b.timeit("1_1_actor_calls_async", actor_async, ASYNC_BATCH, unit="calls/s",
             note=f"{ASYNC_BATCH} actor calls issued, then all results awaited")
    del actor

    def actor_creation():
        actors = client.gather([client.submit(Actor, actor=True, pure=False) for _ in range(ACTOR_CREATION_BATCH)])
        for a in actors:
            a.small_value().result(timeout=T)
    b.timeit("actor_creation", actor_creation, ACTOR_CREATION_BATCH, unit="actors/s",
             note=f"{ACTOR_CREATION_BATCH} x client.submit(cls, actor=True), one call each; a Dask actor is an "
                  "object in an existing worker process, a nodeup actor gets a process of its own")
    def concurrent_setup():
        return [client.submit(AsyncActor, actor=True, pure=False).result(timeout=T)]
    actor_shape(b, "1_1_actor_calls_concurrent", concurrent_setup,
                lambda a: call_actors(a, ASYNC_BATCH), ASYNC_BATCH,
                note=f"{ASYNC_BATCH} calls to one actor whose method is `async def` (Dask's way to a concurrent "
                     "actor: methods run on the worker's event loop, unbounded; nodeup: MaxConcurrency(16)), "
                     "then all results awaited")

    # Actor-to-actor shapes. Dask runs a call from an actor's (sync) method to an actor on the same
    # worker as a plain local method call (EagerActorFuture), which is not an actor call; nodeup
    # gives each actor a process of its own. So client actors go on one worker and server actors on
    # the other, and every call is a message to another process, as in nodeup.
    k = max(1, (os.cpu_count() or 1) // 2)  # nodeup's serverCount(): max(1, CPUs/2)
    # One n:n operation takes seconds in Dask (4,000 calls; 1,000 calls whose argument is fetched):
    # 3 timed windows of one operation each, not 5, so that the whole run stays in its budget.
    slow_reps = min(3, args.reps)
    client_w, server_w = workers[0], workers[-1]

    def servers():
        return client.gather([client.submit(Actor, actor=True, pure=False, workers=[server_w])
                              for _ in range(k)])

    def one_n_setup():
        s = servers()
        c = client.submit(ClientActor, s, actor=True, pure=False, workers=[client_w]).result(timeout=T)
        return s, c
    actor_shape(b, "1_n_actor_calls_async", one_n_setup,
                lambda sc: sc[1].small_value_batch(ASYNC_BATCH).result(timeout=T), ASYNC_BATCH,
                note=f"one client actor makes {ASYNC_BATCH} calls spread over {k} server actor(s) on the other "
                     "worker, then awaits them all (Ray: 5,000 per server)")

    actor_shape(b, "n_n_actor_calls_async", servers,
                lambda s: client.gather([client.submit(call_actors_task, s, ASYNC_BATCH, pure=False)
                                         for _ in range(MULTI_CLIENTS)]),
                MULTI_CLIENTS * ASYNC_BATCH,
                reps=slow_reps,
                note=f"{MULTI_CLIENTS} client tasks (secede()d, as nodeup's CPUs(0)) each make {ASYNC_BATCH} calls "
                     f"spread over {k} server actor(s) and await them; tasks placed by the scheduler; "
                     f"{slow_reps} timed runs (one operation takes seconds)")

    def with_arg_setup():
        s = servers()
        cs = client.gather([client.submit(ClientActor, [x], actor=True, pure=False, workers=[client_w])
                            for x in s])
        return s, cs

    def with_arg(sc):
        fs = [c.small_value_batch_arg(ASYNC_BATCH) for c in sc[1]]  # all clients start, then all awaited
        for f in fs:
            f.result(timeout=T)
    actor_shape(b, "n_n_actor_calls_with_arg_async", with_arg_setup, with_arg, k * ASYNC_BATCH, reps=slow_reps,
                note=f"{k} client actor(s) each scatter one value and make {ASYNC_BATCH} calls with its future as "
                     "argument to their own server actor on the other worker; Dask does not resolve futures in "
                     "actor arguments, so the server's method calls .result() on it (dask/distributed#3113); "
                     f"{slow_reps} timed runs (one operation takes seconds)")

    # --- object store: put / get ------------------------------------------
    def put_small_call():
        client.scatter(0, hash=False, timeout=T)
    b.timeit("single_client_put_calls", put_small_call, unit="puts/s",
             note="client.scatter(0, hash=False): routed via the scheduler (Dask default)")

    def multi_put_small():
        client.gather([client.submit(put_small, MULTI_PUT_SMALL, pure=False) for _ in range(MULTI_PUT_TASKS)])
    b.timeit("multi_client_put_calls", multi_put_small, MULTI_PUT_TASKS * MULTI_PUT_SMALL, unit="puts/s",
             note=f"{MULTI_PUT_TASKS} tasks each scatter {MULTI_PUT_SMALL} small values to their own worker "
                  "(worker_client().scatter(workers=[self], direct=True))")

    big = np.zeros(PUT_LARGE_SIZE // 8, dtype=np.int64)

    def put_large_call():
        f = client.scatter(big, hash=False, timeout=T)
        del f  # released at once, so worker memory stays flat
    b.timeit("single_client_put_gigabytes", put_large_call, PUT_LARGE_SIZE / 1e9, unit="GB/s",
             note="scatter of a 100 MiB zero numpy int64 array via the scheduler (lz4 on the wire by default); GB = 1e9 bytes")

    def put_large_direct():
        f = client.scatter(big, hash=False, direct=True, timeout=T)
        del f
    b.timeit("single_client_put_gigabytes_direct", put_large_direct, PUT_LARGE_SIZE / 1e9, unit="GB/s",
             extra=True, note="extra: scatter(direct=True), client->worker")
    del big

    def multi_put_large():
        client.gather([client.submit(put_large, MULTI_PUT_PER_TASK, MULTI_PUT_SIZE, pure=False)
                       for _ in range(MULTI_PUT_TASKS)])
    b.timeit("multi_client_put_gigabytes", multi_put_large,
             MULTI_PUT_TASKS * MULTI_PUT_PER_TASK * MULTI_PUT_SIZE / 1e9, unit="GB/s",
             note=f"{MULTI_PUT_TASKS} tasks each scatter {MULTI_PUT_PER_TASK} x 8 MiB zero numpy arrays to their own worker; "
                  "Dask compresses frames with lz4 by default, which makes zeros nearly free")

    small = client.submit(small_value, pure=False)
    wait(small, timeout=T)

    def get_small():
        small.result(timeout=T)
    b.timeit("single_client_get_calls", get_small, unit="gets/s",
             note="Future.result() of a finished tiny result: fetched again on every call")

    small_d = client.scatter(0, hash=False, direct=True)

    def get_small_direct():
        client.gather(small_d, direct=True)
    b.timeit("single_client_get_calls_direct", get_small_direct, unit="gets/s", extra=True,
             note="extra: client.gather(direct=True) straight from the worker")

    b.skip("single_client_get_object_containing_10k_refs", "gets/s",
           "a result holding 10,000 futures is not idiomatic Dask (futures do not travel inside results)")

    def wait_refs():
        not_done = [client.submit(small_value, pure=False) for _ in range(WAIT_REFS)]
        while not_done:
            _, not_done = wait(not_done, timeout=T, return_when="FIRST_COMPLETED")
    b.timeit("single_client_wait_1k_refs", wait_refs, unit="batches/s",
             note=f"one batch: submit {WAIT_REFS} no-ops, then wait(return_when=FIRST_COMPLETED) "
                  "on the rest until none is left")

    def wait_refs_as_completed():
        from distributed import as_completed
        futs = [client.submit(small_value, pure=False) for _ in range(WAIT_REFS)]
        k = sum(1 for _ in as_completed(futs))
        if k != WAIT_REFS:
            raise RuntimeError("as_completed lost futures")
    b.timeit("single_client_wait_1k_refs_as_completed", wait_refs_as_completed, unit="batches/s", extra=True,
             note="extra: the same, consuming completions with as_completed")

    b.skip("placement_group_create/removal", "groups/s", "Dask has no placement groups")

    # --- tasks with a 1 MB argument (reference peer's extra) -----------------
    payload = os.urandom(1024 * 1024)
    arg = client.scatter(payload, hash=False, broadcast=True, timeout=T)

    def tasks_1mb_arg():
        client.gather([client.submit(len, arg, pure=False) for _ in range(100)])
    b.timeit("tasks_with_1MB_arg", tasks_1mb_arg, 100, unit="tasks/s", extra=True,
             note="extra: 1 MiB bytes scattered once (broadcast), then 100 tasks take the future as argument")
    del arg

    # --- transfer: worker -> client pull -------------------------------------
    there = workers[-1]
    wait(client.submit(make_bytes, 1, workers=[there], pure=False), timeout=T)

    def pull(seconds):
        timed, nbytes, n = 0.0, 0, 0
        while n == 0 or (timed < seconds and n < 6):
            f = client.submit(make_bytes, PULL_SIZE, workers=[there], pure=False)
            wait(f, timeout=T)
            t0 = time.perf_counter()
            v = client.gather(f, direct=True)
            timed += time.perf_counter() - t0
            assert len(v) == PULL_SIZE
            nbytes += len(v)
            n += 1
            del f, v
        return nbytes / 1e9 / timed
    b.measure("cross_node_object_pull_gigabytes", "GB/s", pull,
              note="a task on one worker returns 64 MiB of bytes; only client.gather(direct=True) of it is "
                   "timed (worker process -> client process over loopback TCP, lz4-compressed by default; the buffer is "
                   "mostly zeros, as nodeup's; nodeup: node -> node, uncompressed)")

    # --- latency ------------------------------------------------------------
    p99 = []

    def latency(seconds):
        lat = []
        start = time.perf_counter()
        while len(lat) < LATENCY_MIN_SAMPLES or time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            client.submit(small_value, pure=False).result(timeout=T)
            lat.append((time.perf_counter() - t0) * 1e6)
        lat.sort()
        p99.append(lat[min(len(lat) - 1, max(0, -(-99 * len(lat) // 100) - 1))])
        return lat[max(0, -(-50 * len(lat) // 100) - 1)]
    b.measure("task_latency_p50", "µs", latency, lower=True,
              note="Remote-to-result time of one no-op task, one at a time (nearest-rank percentile)")
    if b.wanted("task_latency_p50") and p99:
        b.record("task_latency_p99", "µs", p99[-args.reps:], lower=True, note="same runs as task_latency_p50")

    # --- scalability (reduced, as nodeup's) -----------------------------------
    def once(items, setup, op):
        def run(_seconds):
            state = setup()
            t0 = time.perf_counter()
            op(state)
            return (time.perf_counter() - t0) * 1e6 / items
        return run

    n = max(1, int(10000 * args.scale))
    b.measure("scalability_10000_args", "µs/item", once(n,
              lambda: client.scatter([np.ones(ITEM_INTS, dtype=np.int64) for _ in range(n)], hash=False),
              lambda fs: client.submit(sum_args, *fs, pure=False).result(timeout=T)),
              lower=True, items=n, warmup=False, reps=3,
              note=f"{n} scattered numpy arrays of {ITEM_INTS} int64 passed as {n} arguments to one task; per argument "
                   "(numpy, not lists: Dask serializes a list element by element, ~20 ms per 1,000-int list here)")
    b.skip("scalability_3000_returns", "µs/item",
           "Dask tasks have one result (no num_returns); a list result is one object, not 3,000", lower=True)
    n = max(1, int(10000 * args.scale))
    b.measure("scalability_get_10000_refs", "µs/item", once(n,
              lambda: client.scatter([np.arange(ITEM_INTS) for _ in range(n)], hash=False),
              lambda fs: client.gather(fs)),
              lower=True, items=n, warmup=False, reps=3,
              note=f"client.gather of {n} scattered numpy arrays of {ITEM_INTS} int64; scatter not timed")
    n = max(1, int(args.queued * args.scale))
    b.measure("scalability_100000_queued_tasks", "µs/item", once(n,
              lambda: None,
              lambda _: client.gather(client.map(small_value_i, range(n), pure=False))),
              lower=True, items=n, warmup=False, reps=3,
              note=f"client.map of {n} no-op tasks, then gather (nodeup: 100,000; reduced for Dask's "
                   "~2.5 ms per task here so the run stays in budget); per task")


# ----------------------------------------------------------------- main

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="/tmp/peer_dask.json")
    p.add_argument("--reps", type=int, default=5, help="timed windows per metric (median reported); nodeup: --runs 5")
    p.add_argument("--rep-time", type=float, default=0.5, help="seconds per timed window; nodeup: --duration 500ms")
    p.add_argument("--warmup", type=float, default=0.5, help="seconds of warm-up per metric")
    p.add_argument("--max-calls", type=int, default=100000, help="hard cap on calls per window")
    p.add_argument("--budget", type=float, default=300.0, help="soft time budget for all metrics (s)")
    p.add_argument("--hard-limit", type=float, default=480.0, help="watchdog: kill everything after (s)")
    p.add_argument("--op-timeout", type=float, default=120.0, help="timeout for any single blocking call (s)")
    p.add_argument("--queued", type=int, default=2000, help="tasks of scalability_100000_queued_tasks")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the scalability sizes")
    p.add_argument("--only", default="", help="comma-separated substrings: run only matching metrics")
    p.add_argument("--filter", default="", help="regular expression: run only metrics whose name it matches "
                                               "(re.search, as nodeup bench --filter)")
    p.add_argument("--quick", action="store_true", help="smoke test: 1 short rep each, scale 0.1")
    args = p.parse_args()
    if args.quick:
        args.reps, args.rep_time, args.warmup, args.scale = 1, 0.2, 0.1, 0.1

    _import_dask()
    import dask
    import distributed
    import psutil
    from distributed import Client, LocalCluster

    watchdog = start_watchdog(args.hard_limit)
    t_boot = time.perf_counter()
    dask.config.set({"distributed.admin.tick.limit": "60s"})  # no 'event loop unresponsive' noise
    warnings.filterwarnings("ignore", message="Large object of size")
    cluster = client = None
    rc = 0
    try:
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True,
            host="127.0.0.1", scheduler_port=0,
            # Dask's HTTP servers default to all interfaces; pin them to loopback.
            dashboard_address=None,
            scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
            worker_dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        )
        client = Client(cluster, timeout=args.op_timeout)
        client.wait_for_workers(2, timeout=args.op_timeout)
        boot = time.perf_counter() - t_boot
        socks = listening_sockets()
        bad = [s for s in socks if not s["addr"].startswith("127.")]
        if bad:
            print(f"peer_dask: ERROR: non-loopback listeners: {bad}", file=sys.stderr, flush=True)
            return EXIT_NETWORK
        # Idle footprint first: one worker process and its nanny (its parent).
        addr, rss = sorted(client.run(rss_of_self).items())[0]
        pid = client.run(os.getpid)[addr]
        nanny = psutil.Process(pid).parent()
        idle_rss = (rss + nanny.memory_info().rss) / 2**20

        b = Bench(args)
        run_benchmarks(client, cluster, b, args, idle_rss)
        mem = psutil.virtual_memory().total
        info = {
            "peer": "dask.distributed",
            "machine": {"cpus": os.cpu_count(), "memory_gib": round(mem / 2**30, 1),
                        "os": platform.platform(), "python": sys.version.split()[0],
                        "dask_version": dask.__version__, "distributed_version": distributed.__version__},
            "cluster": {"n_workers": 2, "threads_per_worker": 1, "processes": True,
                        "scheduler": cluster.scheduler_address, "listeners": socks,
                        "boot_seconds": round(boot, 2)},
            "settings": vars(args),
            "elapsed_s": round(time.perf_counter() - t_boot, 1),
            "metrics": b.results,
        }
        with open(args.out, "w") as f:
            json.dump(info, f, indent=2)
        print(f"# dask {dask.__version__} distributed {distributed.__version__}; "
              f"boot {boot:.1f}s; total {info['elapsed_s']}s; json -> {args.out}", file=sys.stderr, flush=True)
        if any("error" in r for r in b.results):
            rc = 1  # some metric errored
    finally:
        try:
            if client is not None:
                client.close(timeout=20)
            if cluster is not None:
                cluster.close(timeout=20)
        except Exception as e:
            print(f"peer_dask: warning: close failed: {e!r}", file=sys.stderr)
        watchdog.cancel()
    return rc


if __name__ == "__main__":
    sys.exit(main())
