"""The progress line (tuning/progress.py): the planned totals agree with what the strategies train
(real runs of a synthetic benchmark), and a run prints the plan, a line with each table, and at
the end its early estimate beside the time it took; the live report carries the same line."""

import json
import os

import pandas as pd
import pytest

import tuning
from tuning import progress


def test_planned_totals_follow_each_strategys_arithmetic():
    # cifar_asha: 24 trials at 1 epoch, 12 to 2, 6 to 4, 3 to 8, 1.5 to 16
    assert progress.planned_epochs("asha", trials=24, max_epochs=16, grace_period=1, reduction_factor=2) == 72
    # cifar_bohb's band: brackets 27@1, 12@3, 6@9, 4@27 (81 + 96 + 90 + 108)
    assert progress.hyperband_brackets(27, 3) == [(27, 1), (12, 3), (6, 9), (4, 27)]
    assert progress.planned_epochs("bohb", trials=49, max_epochs=27, reduction_factor=3) == 375
    assert progress.planned_epochs("grid", trials=16, max_epochs=10) == 160
    est = progress.estimate(done=30, done_at_start=0, planned=130, elapsed_s=60, epoch_s=[4.0, 6.0], at_once=2,
                            best=0.5)
    assert est.left_s == pytest.approx(100 * 5.0 / 2)
    assert "30/130 epochs (23 %)" in est.line("loss") and "best loss 0.5" in est.line("loss")


@pytest.mark.parametrize("strategy, samples", [("hyperband", 13), pytest.param("random", 4, marks=pytest.mark.slow)])
def test_a_synchronous_strategy_trains_exactly_its_planned_total(ray_2cpus, tmp_path, strategy, samples):
    """Hyperband's brackets (and random's full budgets) are deterministic: the epochs trained are
    the plan, to the epoch, including a partial last bracket."""
    env = dict(os.environ)
    result = tuning.search(None, "counting_ones", strategy=strategy, num_samples=samples, max_epochs=9,
                           seed=0, results_dir=tmp_path / "r")
    assert {k: v for k, v in os.environ.items() if k.startswith(("TUNE_", "RAY_AIR"))} == \
        {k: v for k, v in env.items() if k.startswith(("TUNE_", "RAY_AIR"))}  # Tune's switches put back
    trained = int(pd.read_csv(tmp_path / "r" / "trials.csv")["epochs"].sum())
    space = tuning.spaces.load("counting_ones")
    assert trained == progress.planned_epochs(strategy, trials=samples, max_epochs=9,
                                              reduction_factor=space.reduction_factor)
    saved = json.loads((tmp_path / "r" / progress.PROGRESS_FILE).read_text())
    assert saved["finished"] and saved["done"] == trained
    assert saved["line"] in (tmp_path / "r" / "report.md").read_text()
    assert result.status == "finished"


def test_the_cli_prints_the_plan_lines_and_the_early_estimate(tmp_path):
    from conftest import run_cli

    proc = run_cli("--space", "counting_ones", "--strategy", "random", "--num-samples", "6", "--max-epochs", "9",
                   "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "Planned: 54 epochs in all (random, 6 trials x 9 epochs)" in out
    assert out.index("Planned:") < out.index("Progress: ")
    last = [line for line in out.splitlines() if line.startswith("Ended after")]
    assert len(last) == 1 and "54 epochs of 54 planned" in last[0]
    assert "estimated after the first 10 % of the run" in last[0]


def test_tunes_switches_are_set_for_the_run_and_a_users_own_value_kept(monkeypatch):
    from tuning.backend import tune_switches

    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "7")  # the user's
    monkeypatch.delenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", raising=False)
    with tune_switches(snapshot_every_step=True):
        assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "7"
        assert os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] == "1"
    assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "7"
    assert "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS" not in os.environ
