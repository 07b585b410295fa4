"""The experiments over real benchmarks (experiments/lcbench, hpobench_mlp, fcnet) in smoke size
through the command's own main, and the summary across tasks (tuning/report/tasks.py)."""

import json

import pandas as pd
import pytest

from cli_helpers import refused
from conftest import ROOT
from tuning.compare import peers, runner as compare
from tuning.report import tasks


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ["lcbench", "hpobench_mlp", "fcnet"])
def test_a_real_benchmark_experiment_runs_in_smoke_size_with_its_summary(ray_2cpus, tmp_path, monkeypatch, capsys,
                                                                        name):
    # In this process, on the module's Ray (the comparison uses a running one): three commands as
    # subprocesses spent ~20 s of the suite starting and stopping Python and Ray; test_compare.py
    # runs the command itself.
    monkeypatch.chdir(ROOT)
    out = tmp_path / name
    assert compare.main([f"experiments/{name}", "--smoke", "--out", str(out)]) == 0, capsys.readouterr().err[-3000:]
    _, exp = compare.load_experiment(f"experiments/{name}")
    task = exp.tasks[0]
    finals = pd.read_csv(out / task / "finals.csv")
    assert set(finals["strategy"]) == set(exp.strategies) | set(peers.PEERS)
    assert json.loads((out / task / "experiment.json").read_text())["benchmark"] == task
    summary = (out / "summary.md").read_text()
    assert f"| {task} |" in summary and "mean normalized regret" in summary and "worst ratio to optuna_tpe" in summary
    if name == "lcbench":  # multi-fidelity: the task's report says whether its low epochs mislead
        assert "ranks like epoch" in (out / task / "report.md").read_text()


def test_the_development_experiment_runs_every_listed_task_and_links_the_ones_run_at_10_seeds():
    from tuning.compare.benchmarks import BENCHMARKS
    from tuning.compare.realbench import LCBENCH_TASKS

    _, dev = compare.load_experiment("experiments/lcbench_dev")
    _, six = compare.load_experiment("experiments/lcbench")
    assert dev.tasks == tuple(f"lcbench_{t}" for t in LCBENCH_TASKS) and len(dev.tasks) == 29
    assert set(dev.tasks) <= set(BENCHMARKS) and (dev.strategies, dev.budget) == (six.strategies, six.budget)
    for task in six.tasks:  # its summary reads them where experiments/lcbench wrote them
        linked = ROOT / "docs" / "compare" / "lcbench_dev" / task
        assert linked.is_symlink() and linked.resolve() == (ROOT / "docs" / "compare" / "lcbench" / task).resolve()


def test_the_summary_normalizes_per_task_ranks_and_holds_rows_against_the_peer():
    runs = pd.DataFrame([
        # task a: regrets 0..10; task b: 0..1000 (its scale must not dominate)
        ("a", "x", 0, 0.0), ("a", "x", 1, 2.0), ("a", "y", 0, 10.0), ("a", "y", 1, 10.0),
        ("a", "optuna_tpe", 0, 4.0), ("a", "optuna_tpe", 1, 4.0),
        ("b", "x", 0, 1000.0), ("b", "x", 1, 1000.0), ("b", "y", 0, 0.0), ("b", "y", 1, 0.0),
        ("b", "optuna_tpe", 0, 500.0), ("b", "optuna_tpe", 1, 500.0),
    ], columns=["task", "strategy", "seed", "final"])
    per_task, overall = tasks.summarize(runs)
    row = overall.set_index("strategy")
    assert row.loc["x", "normalized"] == pytest.approx((0.1 + 1.0) / 2)  # a: (0 + 0.2) / 2, b: 1
    assert row.loc["y", "normalized"] == pytest.approx((1.0 + 0.0) / 2)
    assert row.loc["x", "rank"] == pytest.approx((1 + 3) / 2) and row.loc["optuna_tpe", "rank"] == 2
    assert row.loc["x", "worst_ratio_to_peer"] == pytest.approx(2.0)  # b: 1000 / 500
    assert row.loc["y", "worst_ratio_to_peer"] == pytest.approx(2.5)  # a: 10 / 4


def test_a_task_that_is_no_development_benchmark_is_refused(tmp_path, capsys):
    held_out = tmp_path / "held_out.py"
    held_out.write_text("from tuning.compare import Experiment\n"
                        "EXPERIMENT = Experiment(space='lcbench', budget=2, tasks=('lcbench_167152',))\n")
    refused(capsys, compare.main, [str(held_out), "--out", str(tmp_path / "o")], "'lcbench_167152' is no benchmark")
    refused(capsys, compare.main, ["experiments/lcbench", "--tasks", "lcbench_7593", "--out", str(tmp_path / "o")],
            "--tasks", "not one of the experiment's tasks")
    refused(capsys, compare.main, ["experiments/lcbench", "--strategies", "bohb,smac", "--out", str(tmp_path / "o")],
            "--strategies", "'smac' is not one of the experiment's strategies or peers")
    assert not (tmp_path / "o").exists()
