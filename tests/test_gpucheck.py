"""make gpu-check without a GPU: one "no GPU" line, the CPU side measured, CSV and JSON written,
exit 0, so CI runs it. (--rehearse runs every GPU step on CPU at toy sizes: slow.)"""

import csv
import json
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU machine runs the real check")


def _check(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning.bench.gpucheck", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _read(out):
    rows = list(csv.DictReader(open(out / "gpu-check.csv")))
    return rows, json.loads((out / "gpu-check.json").read_text())


def test_without_a_gpu_it_says_so_runs_the_cpu_side_and_exits_0(tmp_path):
    out = tmp_path / "check"
    done = _check("--out", str(out), "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    no_gpu = [line for line in done.stdout.splitlines() if line.startswith("no GPU")]
    assert len(no_gpu) == 1 and "running the CPU side only" in no_gpu[0]
    rows, report = _read(out)
    assert report["mode"] == "cpu"
    assert [(r["metric"], str(r["value"])) for r in report["rows"]] == [(r["metric"], r["value"]) for r in rows]
    assert {s: v["status"] for s, v in report["steps"].items()} == {"doctor": "ok", "cpu_precision": "ok"}
    figures = {r["metric"]: r for r in rows}
    assert figures["gpu"]["value"] == "OK" and figures["gpu"]["detail"].startswith("no GPU")
    for metric in ("cpu_fp32_images_per_s", "cpu_bf16_images_per_s", "cpu_bf16_vs_fp32_speed"):
        assert float(figures[metric]["value"]) > 0
        assert metric in done.stdout  # printed as measured
    assert float(figures["cpu_bf16_vs_fp32_val_loss_diff"]["value"]) < 0.05


def test_bad_flags_and_an_earlier_check_are_one_line_and_exit_2(tmp_path):
    done = _check("--target-accuracy", "70")
    assert done.returncode == 2 and done.stderr.strip() == ("tuning.bench.gpucheck: error: --target-accuracy must be "
                                                            "in (0, 1], got 70")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "gpu-check.json").write_text("{}")
    done = _check("--out", str(earlier))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "--only STEP" in done.stderr
    assert (earlier / "gpu-check.json").read_text() == "{}"  # nothing lost


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rehearsal_runs_every_gpu_step_on_cpu(tmp_path):
    out = tmp_path / "check"
    done = _check("--rehearse", "--out", str(out), "--data-dir", str(tmp_path / "data"), "--budget-s", "800",
                  timeout=880)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows, report = _read(out)
    assert all(v["status"] == "ok" for v in report["steps"].values()), report["steps"]
    got = {(r["step"], r["metric"]): r["value"] for r in rows}
    assert got[("refuse", "exit_code")] == "2"
    assert got[("nccl", "allreduce_world_size_1")] == "1.0"
    for step in ("asha_gpu1", "asha_gpu025"):
        assert got[(step, "exit_code")] == "0" and float(got[(step, "trials_per_hour")]) > 0
    assert ("accuracy", "time_to_target_s") in got and ("throughput", "bf16_speedup_bs32") in got
