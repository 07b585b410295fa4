"""The benchmark suite end to end at its quick sizes: every section runs through the real paths
(Ray, the CIFAR trainable, DDP ranks) and every figure comes out finite. Goals are not asserted:
they are read from the output (README, Performance)."""

import csv
import json
import math
import subprocess
import sys

import pytest

from tuning import bench


@pytest.mark.timeout(240)
def test_quick_bench_produces_every_figure(tmp_path):
    out = tmp_path / "bench"
    done = subprocess.run([sys.executable, "-m", "tuning.bench", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=230)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "bench.csv")))
    assert {r["section"] for r in rows} == set(bench.SECTIONS)
    assert all(math.isfinite(float(r["value"])) for r in rows), rows
    metrics = {r["metric"] for r in rows}
    assert set(bench.GOALS) <= metrics  # every goal has its figure
    assert all(r["goal"] == bench.GOALS.get(r["metric"], "") for r in rows)
    assert json.loads((out / "machine.json").read_text())["cpus"] >= 1
    for r in rows:  # the printed table carries every figure
        assert r["metric"] in done.stdout
