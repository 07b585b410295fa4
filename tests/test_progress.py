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
def test_a_synchronous_strategy_trains_exactly_its_planned_total(ray_here, tmp_path, strategy, samples):
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


# ---------------------------------------------------------------- an honest line (issue 40)

def _trial(status: str, epochs: int = 0, loss: float = 1.0):
    from types import SimpleNamespace

    result = {"training_iteration": epochs, "time_total_s": 2.0 * epochs, "loss": loss} if epochs else {}
    return SimpleNamespace(status=status, last_result=result,
                           metric_analysis={"loss": {"min": loss}} if epochs else {})


def _line(capsys, reporter, trials, done=False) -> str:
    capsys.readouterr()
    reporter._progress(trials, done)
    return capsys.readouterr().out.strip()


def test_the_line_never_reaches_the_end_while_a_trial_runs(capsys):
    """ASHA's first plan is halving's expected cost; its first trials pass rungs that cannot judge
    them yet, so the epochs done reach the plan with trials still running. The line keeps counting,
    says why the plan grew, and says it again at the end."""
    from tuning.backend import tune_parts

    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="mf_hartmann", num_samples=8, max_epochs=4)
    reporter = tune_parts.reporter(space, planned=16, strategy="asha")
    trials = [_trial("TERMINATED", 4), _trial("TERMINATED", 4), *[_trial("TERMINATED", 2)] * 4,
              _trial("RUNNING", 1), _trial("PENDING")]
    line = _line(capsys, reporter, trials)
    assert "17/19 epochs (89 %) (plan grew from 16: ASHA let trials on before their rungs could judge them; " \
           "1 running and 1 waiting, each with an epoch to come)" in line
    assert "about 0 s left" not in line and "100 %" not in line
    # The count reaches the first plan while one still runs: not 100 %, and time left.
    line = _line(capsys, reporter, [_trial("TERMINATED", 4)] * 3 + [_trial("TERMINATED", 1)] * 4 + [_trial("RUNNING", 0)])
    assert "16/17 epochs (94 %) (plan grew from 16: 1 running, each with an epoch to come)" in line
    assert "about 0 s left" not in line
    end = _line(capsys, reporter, [_trial("TERMINATED", 4)] * 3 + [_trial("TERMINATED", 1)] * 5, done=True)
    assert "17 epochs of 16 planned (1 more: ASHA let trials on before their rungs could judge them)" in end
    # Where the plan holds, the line says nothing of it.
    est = progress.estimate(done=10, done_at_start=0, planned=54, elapsed_s=5, epoch_s=[1.0], at_once=2, best=None,
                            running=2, waiting=1, strategy="random")
    assert "plan grew" not in est.line("loss") and est.planned == 54


def test_the_summary_says_why_each_agreement_weighted_strategy_outgrew_its_plan():
    """tpe and adaptive start trials past rungs the run has not seen rank like the top (a smoke run
    of cifar_tpe trained 27 epochs of 18 planned): the end line names that, not a shrug."""
    def end(strategy):
        return progress.estimate(done=27, done_at_start=0, planned=18, elapsed_s=41, epoch_s=[1.0], at_once=2,
                                 best=None, running=0, waiting=0, strategy=strategy).line("loss", finished=True)

    assert ("27 epochs of 18 planned (9 more: tpe started trials past rungs not yet seen to rank like the top"
            in end("tpe"))
    assert "(9 more: adaptive opened brackets that start past rungs seen to rank unlike the top)" in end("adaptive")
    assert "(9 more: the strategy trained more than its arithmetic expected)" in end("bohb")


def test_a_resumed_run_keeps_its_elapsed_time(ray_here, tmp_path, capsys):
    """A time budget stops the first segment; the resume's first line goes on from the wall time
    run.json recorded for it, not from 0 s."""
    import re

    from user_trainers import slow

    # 12 trials x 9 epochs x 0.1 s on two workers: 5.4 s of training, past the 3 s budget on any
    # machine (mf_hartmann's epochs cost nothing, and a fast machine finished before the budget).
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer=slow,
                         num_samples=12, max_epochs=9, gpus_per_trial=0)
    first = tuning.search(None, space, strategy="random", time_budget=3, seed=0, results_dir=tmp_path / "r")
    assert first.status == "time budget spent"
    before = json.loads((tmp_path / "r" / "run.json").read_text())["wall_time_s"]
    assert before >= 3
    capsys.readouterr()
    done = tuning.resume(tmp_path / "r", time_budget=600)
    assert done.status == "finished"
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("Progress:", "Ended after"))]

    def seconds(line: str) -> int:
        m = re.search(r"(?:(\d+) min )?(\d+) s elapsed" if line.startswith("Progress") else
                      r"Ended after (?:(\d+) min )?(\d+) s", line)
        return int(m.group(1) or 0) * 60 + int(m.group(2))

    assert seconds(lines[0]) >= int(before) - 1, lines[0]
    saved = json.loads((tmp_path / "r" / progress.PROGRESS_FILE).read_text())
    assert saved["elapsed_s"] >= before


@pytest.mark.parametrize("budget", [8, 0.5])  # 0.5 s: spent before any trial could start
def test_a_spent_time_budget_starts_no_trial(ray_here, tmp_path, budget):
    """Tune starts the trials a search made ahead (random search: all of them) by itself, not only
    those its scheduler chooses. Once the budget was spent, each then trained an epoch before it was
    paused: a 10 s budget of this run took 42 s."""
    space = tuning.Space(params={"x": tuning.Uniform(0.0, 1.0)}, trainer="tuning.bench.harness:busy",
                         fixed={"seconds": 1.0}, num_samples=40, max_epochs=3, gpus_per_trial=0)
    result = tuning.search(None, space, strategy="random", time_budget=budget, seed=0, results_dir=tmp_path / "r")
    assert result.status == "time budget spent"
    assert f"tuning.resume({str(tmp_path / 'r')!r}, time_budget=LONGER)" in result.summary()  # how to go on
    trials = result.trials
    # Only the trials running when it was spent stop short: one per CPU, two here.
    short = trials[(trials["epochs"] > 0) & (trials["epochs"] < 3)]
    assert len(short) <= 2, short[["trial_id", "epochs", "status"]]
    assert (trials["epochs"] > 0).sum() < len(trials)  # the budget left some trials unstarted
    # and a resume starts them; also where the budget was spent before any trial could start. Tune
    # holds them PAUSED, though they never ran: the table says they wait (backend/interrupted.py).
    assert (trials.loc[trials["epochs"] == 0, "status"] == "PENDING").all()


def test_cheap_epochs_count_the_time_left_at_the_rate_the_run_goes():
    """Trials of a few milliseconds: their epoch times say nothing of what each costs the driver,
    and 10,000 no-op trials were said to have 13 s left with 4 minutes to go. Long epochs keep the
    estimate from their own times, however the last interval went."""
    cheap = progress.estimate(done=1000, done_at_start=0, planned=10_000, elapsed_s=30, epoch_s=[0.01] * 50,
                              at_once=2, best=None, recent_rate=33.0)
    assert cheap.left_s == pytest.approx(9000 / 33.0)  # not 9,000 x 0.01 / 2 = 45 s
    slow = progress.estimate(done=10, done_at_start=0, planned=20, elapsed_s=300, epoch_s=[30.0] * 10,
                             at_once=2, best=None, recent_rate=0.01)
    assert slow.left_s == pytest.approx(10 * 30.0 / 2)
    unknown = progress.estimate(done=1000, done_at_start=0, planned=10_000, elapsed_s=30, epoch_s=[0.01] * 50,
                                at_once=2, best=None)
    assert unknown.left_s == pytest.approx(45.0)  # no interval measured yet: the epochs' own times


def test_the_time_left_is_at_most_what_the_time_budget_has_left():
    """--time-budget 34s: "about 18 s left" at 30 s, and the budget stopped the run at 34."""
    kw = dict(done=112, done_at_start=0, planned=180, elapsed_s=30, epoch_s=[0.5] * 20, at_once=2, best=None)
    assert progress.estimate(**kw).left_s == pytest.approx(68 * 0.5 / 2)
    assert progress.estimate(**kw, budget_left_s=4.0).left_s == pytest.approx(4.0)
    assert progress.estimate(**kw, budget_left_s=600.0).left_s == pytest.approx(68 * 0.5 / 2)  # the run ends first
    assert progress.estimate(**{**kw, "epoch_s": []}, budget_left_s=4.0).left_s is None  # still estimating
