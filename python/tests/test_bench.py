"""nodeup.bench (nodeup bench --python) measures what it names."""

import json
import os
import subprocess
import sys

from conftest import PYDIR


def test_bench_reports_each_metric_it_runs(node, tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ, PYTHONPATH=PYDIR)
    p = subprocess.run(
        [sys.executable, "-m", "nodeup.bench", "--address", node.socket, "--quick",
         "--filter", "^(single_client_tasks_sync|1_1_actor_calls_async)$", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = {m["name"]: m for m in json.loads(out.read_text())["metrics"]}
    assert sorted(got) == ["1_1_actor_calls_async", "single_client_tasks_sync"], got
    for m in got.values():
        assert "error" not in m, m
        assert m["value"] > 0 and m["samples"] == [m["value"]], m
    # The summary on stdout names the same metrics, one per line.
    assert sorted(line.split()[0] for line in p.stdout.splitlines()) == sorted(got)
