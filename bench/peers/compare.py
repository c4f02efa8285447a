#!/usr/bin/python3
"""Print one table comparing `nodeup bench --json` with the Dask peer's JSON (peer_dask.py).

Usage: compare.py NODEUP.json DASK.json
Columns: metric, nodeup, Dask, unit, and "nodeup/Dask": how many times better nodeup is
(a rate divided by the peer's rate; for latencies, times per item and memory, the peer's
value divided by nodeup's). A side that did not measure a metric shows why in the notes.
Output is a Markdown table (pasted as is into docs/benchmarks.md).
"""
import json
import sys


def fmt(v):
    if v is None:
        return "—"
    a = abs(v)
    if a >= 1e4:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    nodeup = json.load(open(argv[1]))
    dask = json.load(open(argv[2]))
    peer = {m["name"]: m for m in dask["metrics"]}
    rows, notes = [], []

    def why(side, m):
        if m is None:
            return f"{side}: not measured"
        if m.get("skipped"):
            return f"{side}: {m['skipped']}"
        if m.get("error"):
            return f"{side} failed: {m['error']}"
        return ""

    seen = set()
    for m in nodeup["metrics"]:
        if m.get("group") == "baseline":
            continue
        name = m["name"]
        seen.add(name)
        d = peer.get(name)
        nv = m.get("value") if not (m.get("skipped") or m.get("error")) else None
        dv = d.get("value") if d and not (d.get("skipped") or d.get("error")) else None
        ratio = ""
        if nv and dv:
            r = dv / nv if m.get("lower_is_better") else nv / dv
            ratio = f"{r:,.0f}×" if r >= 100 else f"{r:.3g}×"
        note = "; ".join(x for x in (why("nodeup", m) if nv is None else "",
                                     why("Dask", d) if dv is None else "") if x)
        items = ""
        if m.get("items") or (d and d.get("items")):
            items = f" (items: nodeup {m.get('items', '—')}, Dask {d.get('items', '—') if d else '—'})"
        rows.append((name, fmt(nv), fmt(dv), m["unit"], ratio, note + items))
    for d in dask["metrics"]:
        if d["name"] in seen or "value" not in d:
            continue
        if d.get("extra"):
            note = "Dask-only extra: " + d.get("note", "").removeprefix("extra: ")
        else:  # a shared metric the nodeup JSON lacks (e.g. nodeup bench --filter)
            note = "nodeup: not in this nodeup run"
        rows.append((d["name"], "—", fmt(d["value"]), d["unit"], "", note))

    nm = nodeup["machine"]
    dm = dask["machine"]
    print(f"nodeup {nm.get('nodeup_version')} ({nm.get('go_version')}) vs dask.distributed "
          f"{dm.get('distributed_version')} (Python {dm.get('python')}), {nm.get('cpus')} CPUs, "
          f"{nm.get('memory_gib', 0):.1f} GiB RAM; nodeup {nodeup.get('runs')} runs of "
          f"{nodeup.get('duration_per_run_s')}s, Dask {dask['settings']['reps']} runs of {dask['settings']['rep_time']}s; "
          f"medians (the scalability metrics, and Dask's n:n actor metrics, use 3 runs).\n")
    print("| metric | nodeup | Dask | unit | nodeup/Dask | notes |")
    print("| --- | ---: | ---: | --- | ---: | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
