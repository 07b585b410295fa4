"""The Python API and the trainer contract, with a user's trainer that reports `score` (higher is
better) and no loss: every strategy, the same search from Python and from tuning.run, a function
defined in a script's __main__, and each way a user's trainer goes wrong. Real Ray, real runs."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

import tuning
from tuning import Space, Uniform, run
from tuning.trial import trialstate
from tuning.results import incumbent

from cli_helpers import refused

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent



def score_space(**kw) -> Space:
    settings = dict(params={"lr": Uniform(0.0, 1.0, grid=3)}, trainer="user_trainers:scored", metric="score",
                    mode="max", num_samples=6, max_epochs=3, reduction_factor=3, gpus_per_trial=0)
    return Space(**{**settings, **kw})


@pytest.mark.slow  # two Ray starts; the searches below each reuse a Ray of the caller's
def test_a_second_search_in_the_same_process(tmp_path):
    """Without a Ray of the caller's, each search starts its own and stops it: the second starts afresh.
    First in this module: the tests below share a Ray of their own (ray_here), which searches leave up."""
    import ray

    assert not ray.is_initialized()
    for name in ("a", "b"):
        result = tuning.search(None, "counting_ones", strategy="random", num_samples=2, max_epochs=2, smoke=True,
                               results_dir=tmp_path / name)
        assert result.status == "finished" and len(result.trials) == 2
        assert not ray.is_initialized()


# test_strategies runs every strategy end to end in the default suite; here a user's max-mode metric,
# under BOHB (whose model minimises) by default and under the others in make test-all.
@pytest.mark.parametrize("strategy", [*(pytest.param(s, marks=pytest.mark.slow)
                                       for s in ("grid", "random", "asha", "hyperband")), "bohb"])
def test_a_score_trainer_completes_under_every_strategy(ray_here, tmp_path, strategy):
    result = tuning.search(None, score_space(), strategy=strategy, seed=1, results_dir=tmp_path / "r")
    assert result.status == "finished" and result.succeeded == len(result.trials)
    trials = pd.read_csv(tmp_path / "r" / "trials.csv")
    assert {"score", "best_score", "error_rate", "best_error_rate"} <= set(trials.columns)
    assert "loss" not in trials and "loss" not in pd.read_csv(tmp_path / "r" / "epochs.csv")
    full = trials[trials["epochs"] == 3]
    winner = full.loc[full["score"].idxmax()]
    assert result.best.trial_id == winner["trial_id"] and result.best.note == ""
    assert result.best.metrics["score"] == pytest.approx(winner["score"])
    best = json.loads((tmp_path / "r" / "best_config.json").read_text())
    assert best["metric"] == "score" and best["trial_id"] == winner["trial_id"]
    assert best["config"]["lr"] == pytest.approx(winner["lr"])
    report = (tmp_path / "r" / "report.md").read_text()
    assert "score" in report and result.report == tmp_path / "r" / "report.html"
    assert result.record.metric == "score" and result.record.trainer == "user_trainers:scored"


def test_best_is_the_full_budget_incumbent_not_the_best_last_value(ray_here, tmp_path):
    """ASHA stops trials after their first epoch whose score there beats every full-budget score:
    the incumbent is counted at the full budget, everywhere."""
    space = score_space(trainer="user_trainers:fades", params={"lr": Uniform(0.0, 1.0)}, max_epochs=3,
                        reduction_factor=3, num_samples=9, grace_period=1)
    result = tuning.search(None, space, strategy="asha", seed=4, results_dir=tmp_path / "r")
    trials = result.trials
    full = trials[trials["epochs"] == 3]
    assert len(full) and (trials["score"] > full["score"].max()).any(), "the case the test needs did not arise"
    assert result.best.trial_id == full.loc[full["score"].idxmax(), "trial_id"]
    assert json.loads((tmp_path / "r" / "best_config.json").read_text())["trial_id"] == result.best.trial_id
    assert result.record.best.trial_id == result.best.trial_id  # what warm start and the report read


def test_a_trainer_without_torch_runs_in_trials_that_never_import_it(ray_here, tmp_path):
    """Torch's import is seconds of every trial process's start: a trainer that does not use torch
    is run, checkpointed (pickle) and resumed from its checkpoints (Hyperband's pauses) without it."""
    space = score_space(trainer="user_trainers:torch_free")
    result = tuning.search(None, space, strategy="hyperband", seed=0, results_dir=tmp_path / "r")
    assert result.status == "finished" and result.succeeded == len(result.trials)
    epochs = pd.read_csv(tmp_path / "r" / "epochs.csv")
    assert (epochs["torch_loaded"] == 0.0).all()
    assert (epochs["restored_from"] > 0).any(), "no trial was resumed from a checkpoint: the case did not arise"
    written = sorted((tmp_path / "r").rglob("state.p*"))
    assert {p.name for p in written} == {"state.pkl"}
    state = trialstate.read_checkpoint(written[0].parent)
    assert state["epoch"] >= 1 and 0.0 <= state["lr"] <= 1.0


def test_tunes_own_keys_are_never_taken_for_a_trainers_metrics():
    """results.TUNE_KEYS names every key Tune adds to a result (ray.tune.result's AUTO_RESULT_KEYS):
    a Ray upgrade that adds one fails here instead of growing a metric column."""
    from ray.tune.result import AUTO_RESULT_KEYS

    from tuning.results import TUNE_KEYS

    assert set(AUTO_RESULT_KEYS) <= TUNE_KEYS


def test_incumbent_falls_back_to_the_furthest_budget_and_says_so():
    trials = pd.DataFrame({"trial_id": ["a", "b", "c", "d"], "score": [0.9, 0.5, 0.7, 0.99],
                           "epochs": [1, 2, 2, 2], "diverged": [False, False, False, True]})
    row, note = incumbent(trials, "score", "max", max_epochs=4)
    assert row["trial_id"] == "c" and "no trial trained the full budget of 4 epochs" in note
    row, note = incumbent(trials.assign(epochs=[4, 4, 2, 4]), "score", "max", max_epochs=4)
    assert row["trial_id"] == "a" and note == ""  # d diverged: its value is a stand-in


@pytest.mark.slow  # make test-all; the default suite runs tuning.run's CLI end to end in test_smoke and test_progress
def test_the_api_and_tuning_run_give_the_same_trials(ray_here, tmp_path):
    space = tmp_path / "score_space.py"
    space.write_text("from tuning import Space, Uniform\n"
                     "SPACE = Space(params={'lr': Uniform(0.0, 1.0)}, trainer='user_trainers:scored', metric='score', "
                     "mode='max', num_samples=6, max_epochs=3, gpus_per_trial=0)\n")
    result = tuning.search(None, str(space), strategy="random", num_samples=4, seed=7, results_dir=tmp_path / "api")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "tuning.run", "--space", str(space), "--strategy", "random",
                           "--num-samples", "4", "--seed", "7", "--results-dir", str(tmp_path / "cli")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cli = pd.read_csv(tmp_path / "cli" / "trials.csv")
    assert sorted(cli["lr"]) == pytest.approx(sorted(result.trials["lr"]))
    assert sorted(cli["score"]) == pytest.approx(sorted(result.trials["score"]))
    assert f"Best trial {cli.loc[cli['lr'] == result.best.config['lr'], 'trial_id'].item()}" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_function_defined_in_main_runs(ray_here, tmp_path):
    """A notebook's or script's function lives in __main__, which Ray's workers cannot import: it
    travels by value."""
    namespace = {"__name__": "__main__"}
    exec("def train(*, lr, epochs, state=None, on_epoch):\n"
         "    for e in range(state['epoch'] if state else 0, epochs):\n"
         "        on_epoch({'score': -(lr - 0.25) ** 2 + e}, {'epoch': e + 1})\n", namespace)
    result = tuning.search(namespace["train"], score_space(), strategy="random",
                           num_samples=3, max_epochs=2, results_dir=tmp_path / "r")
    assert result.status == "finished" and len(result.trials) == 3 and result.best is not None
    assert result.record.trainer == "__main__:train" and (result.trials["epochs"] == 2).all()


def test_a_user_trainer_as_ddp_ranks(ray_here, tmp_path):
    """--workers-per-trial 2: two gloo ranks in one process group, rank 0 reporting for the trial."""
    space = score_space(trainer="user_trainers:ranked")
    result = tuning.search(None, space, strategy="random", num_samples=1, max_epochs=2, workers_per_trial=2,
                           results_dir=tmp_path / "r")
    assert result.status == "finished", result.trials.get("error")
    assert result.trials["ranks_sum"].tolist() == [3.0] and result.trials["ranks"].tolist() == [2]


# ---------------------------------------------------------------- a user's trainer gone wrong

def _argv(tmp_path, trainer: str, *more) -> list[str]:
    space = tmp_path / "space.py"
    space.write_text("from tuning import Space, Uniform\n"
                     f"SPACE = Space(params={{'lr': Uniform(0.0, 1.0)}}, trainer={trainer!r}, metric='score', "
                     "mode='max', num_samples=2, max_epochs=2, gpus_per_trial=0, strategy='random')\n")
    return ["--space", str(space), "--results-dir", str(tmp_path / "r"), "--max-failures", "0", *more]


def test_a_trainer_the_workers_cannot_import(ray_here, tmp_path, capsys, monkeypatch):
    """The driver imports it from a folder put on sys.path after Ray started; Ray's workers cannot."""
    folder = tmp_path / "late"
    folder.mkdir()
    (folder / "late_trainer.py").write_text("from user_trainers import scored as train\n")
    monkeypatch.syspath_prepend(str(folder))
    refused(capsys, run.main, _argv(tmp_path, "late_trainer:train"), "imports here but not in Ray's worker processes",
            "ModuleNotFoundError", "PYTHONPATH")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("trainer,why", [("no_such_module:train", "No module named 'no_such_module'"),
                                         ("user_trainers:no_such_function", "has no attribute 'no_such_function'")])
@pytest.mark.parametrize("by_flag", [False, True])  # the space's trainer=, or --trainer over a space's own
def test_a_trainer_the_driver_cannot_import(tmp_path, capsys, trainer, why, by_flag):
    argv = _argv(tmp_path, "user_trainers:scored", "--trainer", trainer) if by_flag else _argv(tmp_path, trainer)
    refused(capsys, run.main, argv, f"trainer '{trainer}' cannot be imported", why, "importable from where you run")
    assert not (tmp_path / "r").exists()


def test_a_trainer_with_the_wrong_signature(tmp_path, capsys):
    line = refused(capsys, run.main, _argv(tmp_path, "user_trainers:no_on_epoch"), "does not take on_epoch",
                   "its signature is no_on_epoch(*, lr, epochs, state=None)")
    assert "docs/your-trainer.md" in line and not (tmp_path / "r").exists()


def test_a_trainer_as_ddp_ranks_is_told_what_ranks_need(tmp_path, capsys):
    """--workers-per-trial 2: a trainer lacking rank, world_size and device was told to take the
    parameters, epochs, state and on_epoch, which it did; one in a space file was told that too,
    where no signature helps (ranks import the trainer by name)."""
    refused(capsys, run.main, [*_argv(tmp_path, "user_trainers:scored"), "--workers-per-trial", "2"],
            "does not take rank, world_size, device", "epochs, state and on_epoch, and as one of 2 ranks rank, "
            "world_size and device, as keyword arguments (docs/ddp.md)")
    (tmp_path / "inline.py").write_text("from tuning import Space, Uniform\n"
                                        "def train(*, lr, epochs, state=None, on_epoch):\n    pass\n"
                                        "SPACE = Space(params={'lr': Uniform(0.0, 1.0)}, trainer=train, "
                                        "gpus_per_trial=0)\n")
    refused(capsys, run.main, ["--space", str(tmp_path / "inline.py"), "--workers-per-trial", "2",
                               "--results-dir", str(tmp_path / "r")], "spawns DDP ranks, which import the trainer "
            "by name: define it in an importable module")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("keywords, says", [
    ({"num_samples": 2.5}, "num_samples must be a whole number, got 2.5"),
    ({"num_samples": "4"}, "num_samples must be a whole number, got '4'"),
    ({"max_epochs": 0}, "max_epochs must be at least 1, got 0"),
    ({"seed": 1.5}, "seed must be a whole number"),
])
def test_counts_from_python_are_whole_numbers_as_the_flags_take_them(tmp_path, keywords, says):
    """2.5 trials reached Tune, which raised its own TuneError after the results dir was made. The
    line names the keyword the caller gave (it named the command's flag, --num-samples)."""
    with pytest.raises(tuning.TuningError, match=says):
        tuning.search(None, score_space(), strategy="random", results_dir=tmp_path / "r", **keywords)
    assert not (tmp_path / "r").exists()


def test_a_resume_runs_the_trainer_the_run_ran(tmp_path):
    """--resume DIR --trainer other:fn ran the new trials with another trainer while run.json kept
    the old name; a trainer that imports by name is the one a resume runs."""
    from tuning import inputs, record

    rec = record.RunRecord(space="counting_ones", strategy="random", seed=0, num_samples=2, max_epochs=2,
                           trainer="user_trainers:scored")
    with pytest.raises(tuning.TuningError, match="this run's trials ran user_trainers:scored"):
        inputs.recorded_space(rec, "user_trainers:raises")


def test_a_resume_of_a_script_trainer_without_it_is_told_to_give_it_as_the_caller_would(tmp_path):
    """From Python it was told "resume it from Python", in Python; the command is told to go to Python."""
    from tuning import cli, inputs, record

    rec = record.RunRecord(space=str(tmp_path / "gone.py"), strategy="random", seed=0, num_samples=2, max_epochs=2,
                           trainer="__main__:train")
    with pytest.raises(tuning.TuningError, match="defined in a script") as python:
        inputs.recorded_space(rec, None)
    assert "from Python" not in str(python.value) and "tuning.resume(DIR, trainer=your_function)" in str(python.value)
    with cli.speaking_flags(), pytest.raises(tuning.TuningError, match="resume it from Python, tuning.resume"):
        inputs.recorded_space(rec, None)


def test_a_refusal_after_ray_started_leaves_no_ray_running():
    """A search refused after it started Ray (more CPUs a trial than the machine has) left that Ray
    up, and a later search(address=...) in the process ran on it instead of the cluster it named."""
    code = ("import ray, tuning\n"
            "try:\n"
            "    tuning.search(None, 'counting_ones', strategy='random', num_samples=1, max_epochs=1,\n"
            "                  cpus_per_trial=999, results_dir='r')\n"
            "except tuning.TuningError as exc:\n"
            "    print('refused:', exc)\n"
            "print('ray running:', ray.is_initialized())\n")
    with tempfile.TemporaryDirectory() as here:
        out = subprocess.run([sys.executable, "-c", code], cwd=here, capture_output=True, text=True, timeout=240,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "refused: cpus_per_trial 999 is more than" in out.stdout, out.stderr[-2000:]
    assert "ray running: False" in out.stdout


def test_adding_trials_from_python_takes_a_whole_number(tmp_path):
    """A resume with add_samples=1.5 added two trials and recorded 8.5 planned; 0 was told to pass
    add_samples, which it had."""
    for more, says in ((1.5, "add_samples must be a whole number, got 1.5"), (0, "add_samples must be at least 1")):
        with pytest.raises(tuning.TuningError, match=says):
            tuning.resume(tmp_path / "nothing_here", add_samples=more)


def test_a_trainer_that_raises_in_every_trial(ray_here, tmp_path, capsys):
    capsys.readouterr()
    assert run.main(_argv(tmp_path, "user_trainers:raises")) == 1
    out, err = capsys.readouterr()
    trials = pd.read_csv(tmp_path / "r" / "trials.csv")
    assert (trials["status"] == "ERROR").all() and trials["error"].str.contains("shapes").all()
    kept = tmp_path / "r" / trials["error_file"][0]  # errors/<trial_id>.txt in the results dir
    traceback = kept.read_text()
    assert "user_trainers.py" in traceback and "ValueError: shapes (32, 10)" in traceback
    assert "No trial reported a usable score" in out and f"its traceback: {kept}" in out
    assert json.loads((tmp_path / "r" / "run.json").read_text())["status"] == "finished"
    # The closing line names the files there: it listed a best_config.json no such run writes.
    assert not (tmp_path / "r" / "best_config.json").exists()
    assert f"Results: {tmp_path / 'r'}  (report.html, report.md, trials.csv, epochs.csv, run.json)" in out
    assert "result.best is None" not in out + err  # Python's word for it: the summary says it here


def test_a_python_search_whose_every_trial_failed_says_why_there_is_no_best(ray_here, tmp_path, caplog):
    """From Python it returned 'finished' with best None and no word: the next line of a script,
    result.best.config, failed with an AttributeError far from the cause."""
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:raises", metric="score",
                         mode="max", num_samples=2, max_epochs=2, gpus_per_trial=0)
    with caplog.at_level("WARNING", logger="tuning.outcome"):
        result = tuning.search(None, space, strategy="random", results_dir=tmp_path / "r", max_failures=0)
    assert result.best is None and result.status == "finished"
    said = [r.getMessage() for r in caplog.records if r.name == "tuning.outcome"]
    assert len(said) == 1 and said[0].startswith("No trial reported a usable score. 2 trial(s) failed; trial ")
    assert "ValueError: shapes (32, 10)" in said[0] and said[0].endswith("result.best is None; every trial is in "
                                                                         "result.trials.")


def test_a_trainer_whose_metric_is_nan_forever(ray_here, tmp_path, capsys):
    capsys.readouterr()
    assert run.main(_argv(tmp_path, "user_trainers:nan_forever")) == 1
    out = capsys.readouterr().out
    trials = pd.read_csv(tmp_path / "r" / "trials.csv")
    assert trials["diverged"].all() and (trials["epochs"] == 1).all()  # stopped at the first NaN
    assert (trials["score"] == -1e6).all()  # the worst case under mode max, not +1e6
    assert "No trial reported a usable score (2 diverged: their score turned NaN or infinite): narrow the ranges" in out
    ended = [line for line in out.splitlines() if line.startswith("Ended after")]
    assert ended and "best" not in ended[-1], ended  # the stand-in -1e6 is no one's best
    assert not (tmp_path / "r" / "best_config.json").exists()


@pytest.mark.parametrize("trainer, needles", [
    ("text_metric", ["the trainer's 'score' is 'high' (str), not a number"]),
    ("loss_only", ["the trainer reported no 'score'; the numbers it did report: accuracy, loss"]),
])
def test_a_metric_that_cannot_be_used_stops_the_run_after_its_first_result(ray_here, tmp_path, capsys, trainer,
                                                                          needles):
    refused(capsys, run.main, _argv(tmp_path, f"user_trainers:{trainer}"), *needles, "files kept in")
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert record["status"].startswith("stopped") and needles[0] in record["error"]
    rows = (tmp_path / "r" / "results.jsonl").read_text().splitlines()
    assert 1 <= len(rows) <= 2  # the first result, and at most one from the trial running beside it
    assert (tmp_path / "r" / "trials.csv").exists()


def test_a_state_that_cannot_be_saved(ray_here, tmp_path, capsys):
    capsys.readouterr()
    assert run.main(_argv(tmp_path, "user_trainers:unsaveable_state")) == 1
    trials = pd.read_csv(tmp_path / "r" / "trials.csv")
    assert (trials["status"] == "ERROR").all()
    assert trials["error"].str.contains("state cannot be saved as a checkpoint").all()
    assert "generator" in (tmp_path / "r" / trials["error_file"][0]).read_text()


def test_a_metric_named_like_a_parameter_or_a_column_is_kept_beside_it(ray_here, tmp_path):
    """A trainer reporting its current lr once overwrote the searched lr in trials.csv, and the run
    then crashed writing trials.parquet (two lr columns), leaving no best_config.json."""
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:reports_its_lr",
                         metric="loss", mode="min", num_samples=3, max_epochs=2, gpus_per_trial=0)
    result = tuning.search(None, space, strategy="random", seed=0, results_dir=tmp_path / "r")
    assert result.status == "finished" and (tmp_path / "r" / "best_config.json").exists()
    trials = pd.read_parquet(tmp_path / "r" / "trials.parquet")
    assert list(trials.columns).count("lr") == 1 and list(trials.columns).count("status") == 1
    assert (trials["lr_reported"] == trials["lr"] * 0.25).all()  # the searched lr, and what it decayed to
    assert set(trials["status"]) == {"TERMINATED"} and (trials["status_reported"] == 1.0).all()
    epochs = pd.read_csv(tmp_path / "r" / "epochs.csv")
    assert list(epochs.columns).count("lr") == 1 and "lr_reported" in epochs
    assert result.best.config == {"lr": trials.loc[trials["loss"].idxmin(), "lr"]}


@pytest.mark.parametrize("kw, needle", [
    (dict(metric="lr"), "'lr' is both a searched parameter and a metric the space optimises"),
    (dict(constraints={"lr": ("<=", 0.05)}), "a bound on a parameter is its declaration's range: narrow 'lr'"),
    (dict(metric="error"), "metric 'error' has the name of a column the trials table has for itself"),
])
def test_a_space_metric_named_like_a_parameter_or_a_column_is_refused(kw, needle):
    with pytest.raises(tuning.TuningError, match=re.escape(needle)):
        tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:reports_its_lr", **kw)


def test_an_address_elsewhere_than_the_ray_this_process_runs_is_refused(ray_here, tmp_path):
    # Once ignored: the search ran on the process's own Ray and recorded its address as the one asked for.
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:scored", metric="score",
                         mode="max", num_samples=1, max_epochs=1, gpus_per_trial=0)
    with pytest.raises(tuning.TuningError, match=r"address 10\.9\.9\.9:6379: this process already runs Ray at "):
        tuning.search(None, space, strategy="random", address="10.9.9.9:6379", results_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_branch_without_the_metric_stops_the_run_naming_its_trial_and_the_trials_before(ray_here, tmp_path, capsys):
    """The line said "the run stopped after its first result" where four trials had finished, and the
    trial that lacked the metric stood TERMINATED with the space's worst value as its result."""
    params = {"optimizer": tuning.Choice(["adamw", "sgd"]), "lr": tuning.Uniform(0.0, 1.0),
              "momentum": tuning.Uniform(0.8, 0.99, when={"optimizer": "sgd"})}
    space = tuning.Space(params=params, trainer="user_trainers:sgd_forgets_the_metric", metric="loss", mode="min",
                         max_epochs=1, gpus_per_trial=0)
    adamw = [{"optimizer": "adamw", "lr": 0.1 * i} for i in range(1, 4)]
    with pytest.raises(tuning.TuningError) as err:  # the first three trials are adamw's, one at a time
        tuning.search(None, space, strategy="random", num_samples=5, results_dir=tmp_path / "r", seed=0,
                      points_to_evaluate=[*adamw, {"optimizer": "sgd", "lr": 0.5, "momentum": 0.9}],
                      max_concurrent_trials=1)
    line = str(err.value)
    assert "the trainer reported no 'loss'; the numbers it did report: val_loss" in line
    assert ("optimizer='sgd', lr=0.5, momentum=0.9), the first result without a usable loss, after 3 trials had "
            "reported one") in line  # it said "without it", where the line before may name no metric
    trials = pd.read_csv(tmp_path / "r" / "trials.csv")
    bad = trials[trials["optimizer"] == "sgd"].iloc[0]
    assert bad["status"] == "ERROR" and "reported no 'loss'" in bad["error"] and pd.isna(bad["loss"])
    assert (trials.loc[trials["optimizer"] == "adamw", "status"] == "TERMINATED").all()


@pytest.mark.parametrize("how", ["tune", "train"])
def test_a_trainer_that_reports_to_ray_itself_stops_the_run_saying_to_call_on_epoch(ray_here, tmp_path, how):
    """A trainer ported from Ray Tune that kept tune.report ran without a word: no checkpoint (paused
    trials trained again from scratch), no NaN check, and a best trial that never trained the full
    budget; ray.train.report failed every trial with Ray's advice to call tune.report."""
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:reports_to_ray",
                         fixed={"how": how}, metric="loss", mode="min", max_epochs=2, gpus_per_trial=0)
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(None, space, strategy="random", num_samples=2, results_dir=tmp_path / "r", seed=0)
    line = str(err.value)
    assert "the trainer reported to Ray itself" in line and "call on_epoch(metrics, state) instead" in line
    assert ", its first result (files kept in" in line and len(line.splitlines()) == 1
    trials = pd.read_csv(tmp_path / "r" / "trials.csv")
    assert (trials["status"] == "ERROR").any() and trials["error"].str.contains("reported to Ray itself").any()


def test_a_trial_that_ends_itself_or_diverges_is_not_counted_as_stopped_by_the_scheduler(ray_here, tmp_path):
    """Under ASHA every finished trial short of the budget was 'stopped early by the scheduler': a
    diverged one, and one whose trainer stopped itself at an epoch ASHA does not judge (grace 2);
    from-optuna.md maps Optuna's PRUNED to this column."""
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:ends_itself",
                         metric="loss", mode="min", max_epochs=3, grace_period=2, gpus_per_trial=0)
    result = tuning.search(None, space, strategy="asha", num_samples=3, results_dir=tmp_path / "r", seed=0,
                           points_to_evaluate=[{"lr": 0.9}, {"lr": 0.05}, {"lr": 0.3}])
    trials = result.trials.set_index("lr")
    assert list(trials.loc[[0.9, 0.05, 0.3], "epochs"]) == [1, 1, 3]
    assert bool(trials.loc[0.05, "diverged"]) and not trials["stopped_early"].any()
    assert list(trials.loc[[0.9, 0.05, 0.3], "ended_itself"]) == [True, False, False]
    assert result.record.stopped_early == 0 and "0 stopped early by the scheduler" in result.summary()
    # The report tells it apart, and draws none of the three as a stop: a full budget, an end, a divergence.
    report = (tmp_path / "r" / "report.md").read_text()
    assert "1 reached the full budget, 1 ended by its trainer before the full budget, 1 diverged" in report


def test_a_smoke_run_judges_at_epoch_one_where_the_spaces_first_rung_is_past_its_epochs(ray_here, tmp_path, caplog):
    """examples/gradient_boosting.py --smoke (grace_period 2, smoke's 2 epochs) warned the user to
    lower a grace_period that is right at full size, and ran ASHA as random search."""
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:scored", metric="score",
                         mode="max", max_epochs=20, grace_period=2, gpus_per_trial=0)
    worse = [{"lr": v} for v in (0.3, 0.32, 0.34, 0.9, 0.95, 1.0, 0.99, 0.98)]  # each later one farther from 0.3
    with caplog.at_level("WARNING"):
        result = tuning.search(None, space, strategy="asha", smoke=True, results_dir=tmp_path / "r", seed=0,
                               points_to_evaluate=worse, max_concurrent_trials=1)
    assert "grace_period" not in caplog.text
    trials = result.trials
    assert result.record.max_epochs == 2 and trials["stopped_early"].any()
    assert (trials.loc[trials["stopped_early"], "epochs"] == 1).all()


def test_a_tilde_in_a_results_dir_is_the_home_folder(tmp_path, monkeypatch):
    """'~/r' (quoted, or --results-dir=~/r, which no shell expands) made a folder named ~ where the
    command ran."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    used = tmp_path / "home" / "r"
    used.mkdir(parents=True)
    (used / "trials.csv").write_text("an earlier run's\n")
    with pytest.raises(tuning.TuningError, match=f"results dir {used} already exists and is not empty"):
        tuning.search(None, score_space(), strategy="random", results_dir="~/r")
    with pytest.raises(tuning.TuningError, match=f"{tmp_path / 'home' / 'gone'}"):
        tuning.resume("~/gone")
    assert not (tmp_path / "~").exists()


def test_a_resume_checks_the_trainer_it_is_given_and_a_stopped_segment_does_not_stop_the_next(ray_here, tmp_path):
    """tuning.resume(trainer=fn) ran fn unchecked; a segment its metric stopped left a row that stopped
    every later resume, with the right trainer too, naming the wrong one."""
    def no_score(*, lr, epochs, state=None, on_epoch):  # local functions travel by value, as a script's do
        on_epoch({"loss": lr}, {"epoch": 1})

    def scores(*, lr, epochs, state=None, on_epoch):
        on_epoch({"score": lr}, {"epoch": 1})

    def returns(*, lr):
        return {"score": lr}

    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, metric="score", mode="max", strategy="asha",
                         num_samples=2, max_epochs=1, gpus_per_trial=0)
    with pytest.raises(tuning.TuningError, match="the trainer reported no 'score'"):
        tuning.search(no_score, space, results_dir=tmp_path / "r")
    planned = json.loads((tmp_path / "r" / "run.json").read_text())["num_samples"]
    with pytest.raises(tuning.TuningError, match="returns its metrics once instead of calling on_epoch"):
        tuning.resume(tmp_path / "r", trainer=returns, add_samples=1)  # asha judges epochs: refused, as by search()
    assert json.loads((tmp_path / "r" / "run.json").read_text())["num_samples"] == planned  # nothing counted
    done = tuning.resume(tmp_path / "r", trainer=scores, add_samples=1)
    assert done.status == "finished" and done.best is not None
    assert (done.trials["status"] == "ERROR").sum() >= 1 and (done.trials["score"].dropna() < 1e6).all()


def test_a_resume_without_tunes_saved_state_is_refused_and_nothing_is_lost(ray_here, tmp_path):
    """Tune, finding no state (or an unreadable one), logged an error and started every trial again
    under new ids: the tables lost the earlier trials, and the run ended 'finished' with exit 0."""
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:slow", metric="loss",
                         strategy="random", num_samples=1, max_epochs=40, gpus_per_trial=0)
    first = tuning.search(None, space, time_budget="3s", results_dir=tmp_path / "r")  # 4 s of epochs
    assert first.status == "time budget spent" and len(first.epochs)
    states = sorted((tmp_path / "r" / "tune").glob("experiment_state-*.json"))
    kept = {p: p.read_bytes() for p in states}
    before = (tmp_path / "r" / "trials.csv").read_bytes()
    for damage in ("unreadable", "missing"):
        for p in states:
            p.write_text("{") if damage == "unreadable" else p.unlink()
        with pytest.raises(tuning.TuningError, match=r"its trials have results, but Tune's saved state .* is missing "
                                                     r"or unreadable"):
            tuning.resume(tmp_path / "r", time_budget="1h")
        assert (tmp_path / "r" / "trials.csv").read_bytes() == before
    for p, data in kept.items():
        p.write_bytes(data)
    assert tuning.resume(tmp_path / "r", time_budget="1h").status == "finished"


def test_runs_whose_results_dirs_share_a_name_keep_apart_on_a_storage_path(ray_here, tmp_path):
    """Both kept Tune's experiment in STORE/<results dir's name>: a resume of the first restored the
    second's, and its tables took the second's trials."""
    store = str(tmp_path / "store")
    first, second = (tuning.search(None, "mf_hartmann", strategy="random", num_samples=2, max_epochs=2, seed=seed,
                                   storage_path=store, results_dir=tmp_path / where / "same")
                     for seed, where in ((0, "a"), (1, "b")))
    names = [json.loads((r.results_dir / "run.json").read_text())["storage_name"] for r in (first, second)]
    assert names[0] != names[1] and all(n.startswith("same-") for n in names)
    resumed = tuning.resume(first.results_dir, add_samples=1)
    assert set(first.trials["trial_id"]) < set(resumed.trials["trial_id"]) and len(resumed.trials) == 3
    assert not set(second.trials["trial_id"]) & set(resumed.trials["trial_id"])


def test_a_resume_on_a_storage_path_checks_tunes_state_there(tmp_path):
    """A run on --storage-path STORE keeps Tune's state in STORE/<run.json's storage_name> (before
    it was recorded: STORE/<results dir's name>): a resume checks it there (it was left unchecked),
    and leaves a URI's to Ray."""
    from tuning import inputs, record

    run, store = tmp_path / "run", tmp_path / "store"
    run.mkdir()
    (run / "results.jsonl").write_text('{"trial_id": "a", "training_iteration": 1}\n')
    rec = record.RunRecord(space="tiny", strategy="random", seed=0, num_samples=1, max_epochs=2, trainer="m:f",
                           storage_path=str(store))
    named = dataclasses.replace(rec, storage_name="run-0a1b2c3d")
    with pytest.raises(tuning.TuningError, match=rf"Tune's saved state \({store / 'run-0a1b2c3d'}/experiment_state"):
        inputs.check_tune_state(named, run)
    with pytest.raises(tuning.TuningError, match=rf"Tune's saved state \({store / 'run'}/experiment_state-\*\.json\)"):
        inputs.check_tune_state(rec, run)
    (store / "run").mkdir(parents=True)
    (store / "run" / "experiment_state-2026-12-07_15-00-00.json").write_text("{}")
    inputs.check_tune_state(rec, run)  # found where Tune keeps it: no refusal
    (run / "tune").mkdir()  # a state in the results dir is not the one Tune reads back
    (run / "tune" / "experiment_state-2026-12-07_15-00-00.json").write_text("{}")
    (store / "run" / "experiment_state-2026-12-07_15-00-00.json").unlink()
    with pytest.raises(tuning.TuningError, match="missing or unreadable"):
        inputs.check_tune_state(rec, run)
    inputs.check_tune_state(dataclasses.replace(rec, storage_path="s3://bucket/x"), run)  # Ray's to open


class _Shifted:
    """Optuna's and Ray's class-based objective: its data on the instance, called with the parameters."""

    def __init__(self, shift):
        self.shift = shift

    def __call__(self, *, lr):
        return {"score": -(lr - self.shift) ** 2}


def _needs_data(*, lr, data_dir):
    return {"score": lr if data_dir == "/data" else -1.0}


def test_callable_objects_partials_and_lambdas_are_trainers(ray_here, tmp_path):
    """A callable object and a functools.partial (Ray's tune.with_parameters idiom) raised AttributeError
    (no __qualname__); a lambda in a file was told to take epochs, state and on_epoch."""
    import functools

    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, metric="score", mode="max", strategy="random",
                         num_samples=1, max_epochs=1, gpus_per_trial=0)
    trainers = {"object": _Shifted(0.5), "partial": functools.partial(_needs_data, data_dir="/data"),
                "lambda": lambda *, lr: {"score": lr}}
    for kind, trainer in trainers.items():
        result = tuning.search(trainer, space, seed=1, results_dir=tmp_path / kind)
        assert result.status == "finished" and (result.trials["status"] == "TERMINATED").all(), kind
        assert result.best.metrics["score"] == pytest.approx(trainer(lr=result.best.config["lr"])["score"]), kind
    assert tuning.spaces.trainer_name(trainers["object"]) == "test_api:_Shifted"
    assert tuning.spaces.trainer_name(trainers["partial"]) == "test_api:_needs_data"


def test_a_function_execd_without_a_module_name_is_recorded_as_a_scripts():
    """exec() without __name__ leaves a function's module None: it was recorded as builtins:objective,
    which "imports", so a resume was sent to the command line and failed to find it there."""
    from tuning import contract

    namespace = {}
    exec("def objective(*, lr):\n    return {'score': lr}\n", namespace)
    name = tuning.spaces.trainer_name(namespace["objective"])
    assert name == "__main__:objective" and not contract.importable(name)
    assert contract.module_of(namespace["objective"]) is None  # it travels to Ray's workers by value


def test_a_metric_named_as_tunes_own_fields_is_kept_aside_and_changes_nothing(ray_here, tmp_path):
    """done=True ended every trial after its first epoch, and a 0-based training_iteration one epoch early."""
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:reports_tunes_own_keys",
                         metric="loss", strategy="random", num_samples=2, max_epochs=3, gpus_per_trial=0)
    result = tuning.search(None, space, results_dir=tmp_path / "r")
    assert (result.trials["epochs"] == 3).all() and not result.best.note
    assert list(result.epochs.sort_values("training_iteration").groupby("trial_id")["training_iteration_reported"]
                .apply(list).iloc[0]) == [0, 1, 2]
    rows = [json.loads(line) for line in (tmp_path / "r" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["done_reported"] is True for r in rows)  # kept, and Tune went on
    with pytest.raises(tuning.SpaceError, match="metric 'done' has the name of a field Ray Tune or tuning fills in"):
        space.replace(metric="done")


def test_one_warm_start_folder_as_a_string_and_a_missing_resume_folder_in_pythons_words(tmp_path):
    """warm_start="DIR" was read letter by letter ("/ is not a tuning.run results dir"); a resume of a
    missing folder was named --resume."""
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(None, score_space(), strategy="random", warm_start=str(tmp_path / "earlier"),
                      results_dir=tmp_path / "r")
    assert str(tmp_path / "earlier") in str(err.value) and not (tmp_path / "r").exists()
    with pytest.raises(tuning.TuningError) as err:
        tuning.resume(tmp_path / "gone")
    assert str(err.value).startswith("results_dir: ") and "--" not in str(err.value)


def test_a_first_rung_at_the_full_budget_is_said(tmp_path, caplog):
    """grace_period 5 over 3 epochs ran ASHA as random search without a word."""
    used = tmp_path / "r"
    used.mkdir()
    (used / "x").write_text("")  # refused after the plan is made, before anything starts
    with caplog.at_level("WARNING", logger="tuning.api"), pytest.raises(tuning.TuningError):
        tuning.search(None, score_space().replace(grace_period=5, max_epochs=3), strategy="asha", results_dir=used)
    assert "grace_period 5 is not below max_epochs 3: asha stops no trial early" in caplog.text


def test_a_count_read_back_as_a_float_is_printed_whole():
    from tuning import searchresult

    # num_params became a float where some trial lacked it, and the summary said 144602.0000.
    assert searchresult._fmt(144602.0) == "144602" and searchresult._fmt(0.25) == "0.2500"


def test_on_epoch_given_a_number_is_told_to_pass_a_dict_in_one_sentence(ray_here, tmp_path):
    """The line ran on with ": report 'loss' as a number ..., or set the space's metric", beside the fix."""
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:reports_a_number",
                         metric="loss", strategy="random", num_samples=1, max_epochs=2, gpus_per_trial=0)
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(None, space, results_dir=tmp_path / "r")
    assert str(err.value).startswith("on_epoch got float for metrics: pass a dict such as {'loss': 0.5}; the run")


def test_a_space_passed_where_the_trainer_goes_is_told_the_order(tmp_path):
    """search(space) said a space was missing, and search(space, train) that the space was a function."""
    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0)}, trainer="user_trainers:scored", metric="score",
                         mode="max")
    for args in ((space,), (space, "user_trainers:scored")):
        with pytest.raises(tuning.TuningError, match=re.escape("first argument is the trainer and its second the "
                                                               "space: search(train, space), or search(space=space)")):
            tuning.search(*args, results_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_search_run_from_standard_input_names_its_folder_after_the_trainer(monkeypatch):
    """python - <<EOF: __main__'s file is '<stdin>', and the folder was results/<stdin>-<time>, a
    name a shell takes for redirections."""
    from tuning import api

    def objective(*, x):
        return {"loss": x}

    objective.__module__, objective.__qualname__ = "__main__", "objective"  # as a script defines it
    monkeypatch.setattr(sys.modules["__main__"], "__file__", "<stdin>", raising=False)
    assert api._label("", objective) == "objective"
    monkeypatch.setattr(sys.modules["__main__"], "__file__", "/home/me/tune_it.py", raising=False)
    assert api._label("", objective) == "tune_it"  # a script's own name, as before
