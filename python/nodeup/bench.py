"""Ray's Python microbenchmarks on nodeup: ``python3 -m nodeup.bench``.

The metric names, and what one operation is, follow Ray's
``python/ray/_private/ray_perf.py``; the timing follows the Dask peer
(``bench/peers/peer_dask.py``): a warm-up window, then ``--reps`` timed
windows of ``--rep-time`` seconds each, and the median reported. The JSON
written to ``--out`` has the peer's shape (``{"metrics": [{"name", "value",
"unit", "samples", ...}]}``), so ``bench/peers/compare.py`` sets the two
side by side (``make bench-python``; ``nodeup bench --python``).

With no ``--address`` (and no ``NODEUP_ADDRESS``) ``nodeup.init()`` starts a
node of its own, as ``ray.init()`` does.
"""

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time

import nodeup

ASYNC_BATCH = 1000  # tasks or calls issued before their results are awaited (Ray: 1,000)
PUT_LARGE_SIZE = 100 * 1024 * 1024  # bytes of one large put (Ray: a 100 MiB numpy array)


@nodeup.remote
def small_value():
    return b"ok"


@nodeup.remote
class Actor:
    def small_value(self):
        return b"ok"


class Bench:
    """Runs and records metrics, as the Dask peer's Bench."""

    def __init__(self, args):
        self.args = args
        self.results = []

    def wanted(self, name):
        return not self.args.filter or re.search(self.args.filter, name)

    def timeit(self, name, fn, multiplier=1, unit="ops/s", note=""):
        """fn repeats until a window of --rep-time seconds has passed;
        multiplier units per call. The median of --reps windows is kept."""
        if not self.wanted(name):
            return
        a = self.args

        def window(seconds):
            start = time.perf_counter()
            n = 0
            while True:
                fn()
                n += 1
                el = time.perf_counter() - start
                if el >= seconds:
                    return multiplier * n / el

        r = {"name": name, "unit": unit, "note": note}
        try:
            window(a.warmup)
            samples = [window(a.rep_time) for _ in range(a.reps)]
        except Exception as e:  # recorded; the other metrics go on
            r["error"] = repr(e)[:300]
            print(f"{name}: ERROR {r['error']}", file=sys.stderr, flush=True)
        else:
            med = statistics.median(samples)
            r.update(value=med, median=med, min=min(samples), max=max(samples), runs=len(samples), samples=samples)
            print(f"{name}: {med:.4g} {unit} ({len(samples)} runs)", file=sys.stderr, flush=True)
        self.results.append(r)


def run(b):
    def tasks_sync():
        assert nodeup.get(small_value.remote()) == b"ok"

    b.timeit("single_client_tasks_sync", tasks_sync, unit="tasks/s",
             note="submit one no-op task, block on get (Ray: small_value.remote(), ray.get)")

    def tasks_async():
        nodeup.get([small_value.remote() for _ in range(ASYNC_BATCH)])

    b.timeit("single_client_tasks_async", tasks_async, ASYNC_BATCH, unit="tasks/s",
             note=f"{ASYNC_BATCH} no-op tasks submitted, then one get of all")

    a = Actor.remote()
    nodeup.get(a.small_value.remote())

    def actor_sync():
        nodeup.get(a.small_value.remote())

    b.timeit("1_1_actor_calls_sync", actor_sync, unit="calls/s", note="one call to one actor, then get")

    def actor_async():
        nodeup.get([a.small_value.remote() for _ in range(ASYNC_BATCH)])

    b.timeit("1_1_actor_calls_async", actor_async, ASYNC_BATCH, unit="calls/s",
             note=f"{ASYNC_BATCH} calls to one actor issued, then one get of all")

    if b.wanted("single_client_put_gigabytes"):
        try:
            import numpy as np
            big = np.zeros(PUT_LARGE_SIZE // 8, dtype=np.int64)
            what = "a 100 MiB zero numpy int64 array"
        except ImportError:
            big = bytes(PUT_LARGE_SIZE)
            what = "100 MiB of bytes (numpy is not installed)"

        def put_large():
            nodeup.put(big)

        b.timeit("single_client_put_gigabytes", put_large, PUT_LARGE_SIZE / 1e9, unit="GB/s",
                 note=f"put of {what}, released at once; GB = 1e9 bytes")

    small = nodeup.put(0)

    def get_small():
        nodeup.get(small)

    b.timeit("single_client_get_calls", get_small, unit="gets/s", note="get of a small object put before")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m nodeup.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=None, help="a node's address (default: NODEUP_ADDRESS, else a node of its own)")
    p.add_argument("--out", default="", help="write the results as JSON to this file")
    p.add_argument("--reps", type=int, default=5, help="timed windows per metric (the median is reported)")
    p.add_argument("--rep-time", type=float, default=0.5, help="seconds per timed window")
    p.add_argument("--warmup", type=float, default=0.5, help="seconds of warm-up per metric")
    p.add_argument("--filter", default="", help="regular expression: run only the metrics whose name it matches")
    p.add_argument("--quick", action="store_true", help="smoke test: one short window per metric")
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.rep_time, args.warmup = 1, 0.2, 0.1
    t0 = time.perf_counter()
    nodeup.init(address=args.address)
    b = Bench(args)
    try:
        run(b)
    finally:
        nodeup.shutdown()
    info = {
        "peer": "nodeup (Python SDK)",
        "machine": {"cpus": os.cpu_count(), "os": platform.platform(), "python": sys.version.split()[0],
                    "nodeup_version": os.environ.get("NODEUP_VERSION", "(Python SDK)"),
                    "go_version": "Python " + sys.version.split()[0],
                    "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
        "settings": vars(args),
        "runs": args.reps,
        "duration_per_run_s": args.rep_time,
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "metrics": b.results,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(info, f, indent=2)
    for r in b.results:
        if "value" in r:
            print(f"{r['name']} {r['value']:.6g} {r['unit']}")
    return 1 if any("error" in r for r in b.results) else 0


if __name__ == "__main__":
    sys.exit(main())
