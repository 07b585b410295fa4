"""tuning.compare end to end: counting ones in smoke size through real Ray, then the report."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_helpers import refused
from conftest import ROOT
from tuning import cli, spaces
from tuning.compare import peers, runner as compare
from tuning.report import analysis

STRATEGIES = ("grid", "random", "asha", "hyperband", "bohb", "adaptive", "tpe")  # experiments/counting_ones
RUNS = STRATEGIES + peers.PEERS  # and the peers every comparison runs beside them, in process (tuning/compare/peers.py)
FILES = ["runs.csv", "runs.parquet", "experiment.json", "provenance.json", "report.md", "report.html",
         "report-anytime.png", "finals.csv"]


def _compare(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "tuning.compare", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare") / "counting_ones"
    # One seed: every strategy's run, file and report section, at half the time of the smoke's two.
    proc = _compare("experiments/counting_ones", "--smoke", "--seeds", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out


@pytest.mark.timeout(900)

def test_a_shipped_experiment_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    """The documented `python -m tuning.compare experiments/zdt`, run outside the checkout, said
    "no experiment at experiments/zdt.py: available are " and listed nothing."""
    from tuning.cli import TuningError
    from tuning.compare.experiment import load_experiment

    monkeypatch.chdir(tmp_path)
    name, exp = load_experiment("experiments/counting_ones")
    assert name == "counting_ones" and exp.space == "counting_ones"
    with pytest.raises(TuningError, match="no experiment at experiments/nothing.py: available are .*experiments/zdt"):
        load_experiment("experiments/nothing")
    (tmp_path / "experiments").mkdir()  # a folder of the user's own: its file is the one run
    (tmp_path / "experiments" / "counting_ones.py").write_text("raise RuntimeError('mine')\n")
    with pytest.raises(TuningError, match="does not load"):
        load_experiment("experiments/counting_ones")

def test_smoke_comparison_writes_every_file(smoke):
    proc, out = smoke
    for name in FILES:
        assert (out / name).stat().st_size > 0, name
    assert sorted(p.name for p in (out / "runs").glob("*.csv")) == sorted(
        f"{s}-s0.csv" for s in RUNS)
    # Progress says which run of how many is going; the peers come after the strategies.
    runs = len(RUNS)
    assert f"[1/{runs}] grid-s0: running" in proc.stdout and f"[{len(STRATEGIES)}/{runs}] tpe-s0: done" in proc.stdout
    assert f"[{runs}/{runs}] optuna_tpe_hb-s0: done" in proc.stdout


def test_strategy_runs_get_equal_budgets(smoke):
    runs = pd.read_csv(smoke[1] / "runs.csv")
    exp = json.loads((smoke[1] / "experiment.json").read_text())
    used = runs.groupby("run_id")["consumed_budget"].max()
    # Each run stops once its trials have trained the budget; results that arrive after that
    # are not counted, so every run ends exactly at it (grid could end earlier: not here).
    assert list(used) == pytest.approx([exp["budget"]] * len(used)), used.to_dict()
    kept = pd.concat(pd.read_csv(f) for f in (smoke[1] / "runs").glob("*.csv"))
    overshoot = kept.groupby("run_id")["consumed_budget"].max() - exp["budget"]
    assert (overshoot < 1).all(), overshoot.to_dict()  # never a whole trial's budget more
    assert runs.groupby("run_id")["strategy"].first().value_counts().to_dict() == dict.fromkeys(RUNS, 1)


def test_the_budget_counts_every_result_a_trials_last_one_too():
    """Tune's CombinedStopper stops asking at the first stopper that says stop: max_epochs said it at
    each trial's last epoch, so the budget never counted that epoch (a random search of 6 full
    evaluations of 81 iterations trained 491)."""
    from tuning import results
    from tuning.backend import stoppers

    stop = stoppers.stopper(3, 6)
    said = [stop(trial, {"training_iteration": i, stoppers.OURS: 0.0}) for trial in "ab" for i in (1, 2, 3)]
    assert said == [False, False, True, False, False, True] and stop.stop_all()
    # A result that did not come through on_epoch (the trainer's own tune.report) stops the run, saying why.
    stop, result = stoppers.stopper(3, None), {"training_iteration": 1, "loss": 0.5}
    assert stop("c", result) and stop.stop_all() and "reported to Ray itself" in result[results.METRIC_ERROR]


def test_every_run_is_tagged_and_no_epoch_trained_twice(smoke):
    runs = pd.read_csv(smoke[1] / "runs.csv")
    assert set(runs["benchmark"]) == {"counting_ones"}
    assert set(zip(runs["strategy"], runs["seed"])) == {(s, 0) for s in RUNS}
    assert not runs.duplicated(["run_id", "trial_id", "epoch"]).any()  # BOHB resumed, not restarted
    for strategy in ("hyperband", "bohb", "tpe"):  # resumed past a rung, not restarted
        paused = runs[runs["strategy"] == strategy]
        assert (paused.groupby(["run_id", "trial_id"])["training_iteration"].max() > 1).any()


def test_anytime_incumbents_match_hand_computed_ones(smoke):
    # The report's incumbent (analysis.incumbent_on_grid) on the real runs, against the rule written
    # out: at budget b, the best regret among full-fidelity results that arrived by b; none before.
    runs, _, _ = analysis.load(smoke[1])
    improved = 0
    for _, run in runs.groupby("run_id"):
        grid = np.linspace(0, run["consumed_budget"].max(), 97)
        rows = list(zip(run["consumed_budget"], run["full_fidelity"], run["value"]))
        expected = [min((v for b, full, v in rows if full and b <= point), default=np.nan) for point in grid]
        np.testing.assert_array_equal(analysis.incumbent_on_grid(run, grid), expected)
        improved += len(set(np.array(expected)[~np.isnan(expected)])) > 1
    assert improved  # incumbents that changed during a run: the comparison has something to get wrong


def test_finals_hold_each_runs_final_full_fidelity_regret(smoke):
    runs = pd.read_csv(smoke[1] / "runs.csv")
    finals = pd.read_csv(smoke[1] / "finals.csv").set_index("run_id")
    assert sorted(finals.index) == sorted(runs["run_id"].unique())
    for run_id, run in runs.groupby("run_id"):
        full = run[run["full_fidelity"]]
        expected = full["loss"].min() / 16 + 1 if len(full) else float("nan")  # counting ones' regret
        assert finals.loc[run_id, "final"] == pytest.approx(expected, nan_ok=True), run_id
        assert finals.loc[run_id, "strategy"] == run["strategy"].iloc[0]


def test_report_lists_each_strategy_with_its_seed_count(smoke):
    md = (smoke[1] / "report.md").read_text()
    runs = pd.read_csv(smoke[1] / "runs.csv")
    # n counts seeds with a full-fidelity result. Hyperband's first one normally lands at 3.7 of the
    # smoke's 6 full evaluations, but CI once saw a run end without one (rung waits under load),
    # and bohb and adaptive run the same synchronous brackets: the expectation comes from the runs.
    with_full = runs[runs["full_fidelity"]].groupby("strategy")["seed"].nunique()
    for s in STRATEGIES:
        assert f"| {s} | {with_full.get(s, 0)} |" in md
    # Grid and random train every trial to the end, and under asha's and tpe's asynchronous rungs
    # the first trial at a rung always goes on: those have one whatever the load.
    assert all(with_full.get(s, 0) == 1 for s in ("grid", "random", "asha", "tpe")), with_full.to_dict()


def test_report_regenerates_from_runs_csv(smoke):
    out = smoke[1]
    before = (out / "report.md").read_text()
    (out / "report.md").unlink()
    (out / "runs.parquet").unlink()
    proc = subprocess.run([sys.executable, "-m", "tuning.report", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (out / "report.md").read_text() == before


def test_rerun_skips_finished_runs(smoke):
    out = smoke[1]
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.csv")}
    proc = _compare("experiments/counting_ones", "--smoke", "--seeds", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("finished in an earlier invocation, kept") == len(RUNS)
    assert "running" not in proc.stdout
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.csv")} == stamps


def test_a_run_cut_short_before_is_run_again_from_nothing(ray_here, tmp_path, capsys):
    """After a Ctrl-C, the run's results.jsonl held the cut attempt's rows beside the new attempt's
    (360 rows for 180) and its tune/ folder the old trials' folders (a new user's trial)."""
    out = tmp_path / "out"
    stale = out / "runs" / "random-s0"
    (stale / "tune" / "old_trial").mkdir(parents=True)
    (stale / "results.jsonl").write_text('{"trial_id": "old", "training_iteration": 1, "loss": 0.0}\n')
    assert compare.main(["experiments/counting_ones", "--budget", "1", "--seeds", "1", "--strategies", "random",
                         "--out", str(out)]) == 0
    assert not (stale / "tune" / "old_trial").exists()
    assert "old" not in {json.loads(line)["trial_id"] for line in (stale / "results.jsonl").read_text().splitlines()}


def _experiment(path, fields: str) -> str:
    """An experiment declaration written to `path`; the name tuning.compare takes for it."""
    path.write_text(f"from tuning.compare import Experiment\nEXPERIMENT = Experiment({fields})\n")
    return str(path.with_suffix(""))


def test_a_comparison_keeps_its_experiments_on_a_storage_path(tmp_path):
    # Every run once failed writing runs/<run>/results.jsonl: with --storage-path Tune made no folder there.
    one = _experiment(tmp_path / "one.py", "space='mf_hartmann', budget=3, seeds=(0,), strategies=('random',)")
    proc = _compare(one, "--storage-path", str(tmp_path / "store"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert set(runs["strategy"]) >= {"random"} and (tmp_path / "out" / "runs" / "random-s0" / "results.jsonl").exists()
    assert list((tmp_path / "store").rglob("experiment_state*.json"))  # Tune's experiment, where it was told


@pytest.mark.slow  # minutes: make test-all
@pytest.mark.timeout(600)
def test_grid_that_runs_out_of_points_stops_early_and_the_report_says_so(tmp_path):
    # reference: a comparison's rows are held against one of its strategies (random search by default)
    grid_only = _experiment(tmp_path / "grid_only.py",
                            "space='mf_hartmann', budget=70, seeds=(0,), strategies=('grid',), reference='grid'")
    proc = _compare(grid_only, "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    runs = runs[runs["strategy"] == "grid"]  # not the peers, which spend the whole budget
    assert runs["trial_id"].nunique() == 64  # 2 points in each of 6 dimensions
    assert runs["consumed_budget"].max() == pytest.approx(64)
    assert "grid exhausted after 64 of 70 full evaluations" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.slow  # minutes: make test-all
@pytest.mark.timeout(600)
def test_sigterm_stops_a_comparison_as_ctrl_c_does_and_finished_runs_are_kept(tmp_path):
    two = _experiment(tmp_path / "two.py", "space='counting_ones', budget=10, seeds=(0,), strategies=('random', 'asha')")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "tuning.compare", two, "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not (out / "runs" / "random-s0.csv").exists():  # the first run finished, the second starts
        if time.monotonic() > deadline:
            proc.kill()
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=300)
    assert proc.returncode == 143, text[-3000:]
    assert "tuning.compare: interrupted; finished runs are kept" in text
    assert "SIGTERM received" not in text and "Traceback" not in text, text[-3000:]  # no Ray crash dump
    assert [p.name for p in (out / "runs").glob("*.csv")] == ["random-s0.csv"]  # the cut run is not kept as done


@pytest.mark.parametrize("args,needle", [
    (["experiments/nope"], "available are"),
    (["experiments/counting_ones", "--storage-path", "nosuchscheme://bucket/x"],
     "argument --storage-path: nosuchscheme://bucket/x cannot be opened (Unrecognized filesystem type"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, monkeypatch, args, needle):
    monkeypatch.chdir(ROOT)  # in-process: tests/test_bad_input.py runs the command itself
    refused(capsys, compare.main, args, needle)


@pytest.mark.parametrize("body,needle", [
    ("EXPERIMENT = Experiment(space='counting_ones', budget=5, strategies=('random', 'annealing'))",
     "strategy 'annealing' unknown"),
    ("EXPERIMENT = Experiment(space='counting_twos', budget=5)", "space/benchmark 'counting_twos'"),
])
def test_experiment_naming_an_unknown_strategy_or_benchmark(capsys, tmp_path, body, needle):
    (tmp_path / "bad.py").write_text("from tuning.compare import Experiment\n" + body + "\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    refused(capsys, compare.main, [str(tmp_path / "bad"), "--out", str(tmp_path / "out")], needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_an_out_folder_of_another_comparison_or_one_that_cannot_be_made_is_refused(capsys, tmp_path):
    """--out of a comparison over other settings kept its runs as this one's ('finished in an
    earlier invocation, kept') and reported runs trained to 9 epochs as runs of 3; an --out that
    could not be made was a traceback."""
    (tmp_path / "exp.py").write_text("from tuning.compare import Experiment\n"
                                     "EXPERIMENT = Experiment(space='counting_ones', budget=2, max_epochs=3, "
                                     "strategies=('random',), peers=())\n")
    out = tmp_path / "out"
    out.mkdir()
    exp = compare.Experiment(space="counting_ones", budget=4, max_epochs=9, seeds=(0,))
    compare.write_records(out, "x", exp, spaces.load("counting_ones"), None, smoke=False, budget=4, max_t=9,
                          seeds=[0], argv=["x"])
    before = sorted(p.name for p in out.rglob("*"))
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--out", str(out)],
            "holds the runs of another comparison", "max_t 9 there, 3 now", "budget 4 there, 2 now")
    # Less than one full evaluation: it ran, then said "no trial reported a result (0 of 1 failed): fix the
    # trainer", or reported n 0 for every strategy.
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--out", str(tmp_path / "o3"), "--budget", "0.2"],
            "--budget 0.2 is less than one full evaluation (3 epochs)")
    assert not (tmp_path / "o3").exists()
    # --budget is read as a float and experiment.json keeps 4: the line said "budget 4 there, 9.0 now".
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--out", str(out), "--budget", "9"], "budget 4 there, 9 now")
    assert sorted(p.name for p in out.rglob("*")) == before
    (tmp_path / "file").write_text("")
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--out", str(tmp_path / "file" / "out")],
            "cannot make the folder there", "give a folder you can write")


def test_an_out_folder_of_runs_over_another_space_declaration_is_refused(capsys, tmp_path):
    """A widened range, or another reduction factor, kept the earlier runs as this comparison's
    ('finished in an earlier invocation, kept'): experiment.json held the parameters' names only,
    and runs over x in [0, 2] were reported beside runs over [0, 1] (a new user's trial)."""
    def space_file(high, rf):
        (tmp_path / "quad.py").write_text(
            "from tuning import Space, Uniform\n"
            "def train(*, x, epochs, state=None, on_epoch):\n    return {'loss': (x - 0.3) ** 2}\n"
            f"SPACE = Space(params={{'x': Uniform(0.0, {high})}}, trainer=train, reduction_factor={rf}, "
            "gpus_per_trial=0)\n")
        return spaces.load(str(tmp_path / "quad.py"))

    (tmp_path / "exp.py").write_text("from tuning.compare import Experiment\n"
                                     f"EXPERIMENT = Experiment(space={str(tmp_path / 'quad.py')!r}, budget=2, "
                                     "strategies=('random',), peers=())\n")
    out = tmp_path / "out"
    exp = compare.Experiment(space=str(tmp_path / "quad.py"), budget=2, seeds=(0,))
    space = space_file(1.0, 3)
    out.mkdir()
    compare.write_records(out, "x", exp, space, None, smoke=False, budget=2, max_t=space.max_epochs, seeds=[0],
                          argv=["x"])
    space_file(2.0, 2)
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--out", str(out)], "holds the runs of another comparison",
            "parameter x Uniform(low=0.0, high=1.0, grid=3) there, Uniform(low=0.0, high=2.0, grid=3) now",
            "reduction_factor 3 there, 2 now")


def test_a_parameter_named_as_a_column_of_every_result_is_refused(capsys, tmp_path):
    """A trainer's `loss` parameter (scikit-learn's SGDClassifier has one) took runs.csv's loss column."""
    (tmp_path / "sgd.py").write_text(
        "from tuning import Space, Choice, Uniform\n"
        "def train(*, loss, lr, epochs, state=None, on_epoch):\n"
        "    return {'val_error': lr}\n"
        "SPACE = Space(params={'loss': Choice(['hinge', 'log_loss']), 'lr': Uniform(0.0, 1.0)}, trainer=train,\n"
        "              metric='val_error', strategy='random', gpus_per_trial=0)\n")
    (tmp_path / "exp.py").write_text("from tuning.compare import Experiment\n"
                                     f"EXPERIMENT = Experiment(space={str(tmp_path / 'sgd.py')!r}, budget=2,"
                                     " strategies=('random',), peers=())\n")
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--out", str(tmp_path / "out")],
            "parameter 'loss' has the name of a column runs.csv has for every result")
    assert not (tmp_path / "out").exists()


def test_an_experiment_over_several_objectives_without_a_reference_point_is_refused(capsys, tmp_path):
    """Several objectives are compared by hypervolume (tests/test_mo_compare.py), which needs the
    point it is measured against: without one, one line and nothing written."""
    (tmp_path / "two_goals.py").write_text(
        "from tuning import Space, Uniform\n"
        "SPACE = Space(params={'x': Uniform(0.0, 1.0), 'y': Uniform(0.0, 1.0)}, trainer='user_trainers:tradeoff',\n"
        "              strategy='random', objectives={'loss': 'min', 'latency_ms': 'min'}, gpus_per_trial=0)\n")
    (tmp_path / "exp.py").write_text("from tuning.compare import Experiment\n"
                                     f"EXPERIMENT = Experiment(space={str(tmp_path / 'two_goals.py')!r}, budget=5,"
                                     " strategies=('random',), peers=())\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--out", str(tmp_path / "out")],
            "need a reference point", "one value per objective (loss (min), latency_ms (min))")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


ONE_METRIC = {"space": "'counting_ones'", "budget": "2", "strategies": "('random', 'asha')", "peers": "()"}
TWO_GOALS = ("from tuning import Space, Uniform\n"
             "SPACE = Space(params={'x': Uniform(0.0, 1.0), 'y': Uniform(0.0, 1.0)}, trainer='user_trainers:tradeoff',\n"
             "              strategy='random', objectives={'loss': 'min', 'latency_ms': 'min'}, gpus_per_trial=0)\n")


@pytest.mark.parametrize("fields, needle", [  # each once a traceback, a run that went wrong midway, or ignored
    ("seeds=2", "seeds=2: give a tuple, e.g. seeds=(0, 1)"),
    ("strategies='random'", "strategies='random': give a tuple"),  # was "strategy 'r' unknown"
    ("seeds=(-1, 0)", "seeds=(-1, 0): give one or more whole numbers of 0 or more (-1 is not)"),
    ("seeds=(0, 0)", "seeds names 0 twice"),  # ran seed 0 twice and reported every row twice
    ("budget='4'", "budget='4': give the full evaluations per strategy run as a positive number"),
    ("max_epochs=0", "max_epochs=0: give a whole number of 1 or more"),  # was ignored
    ("reference='bohb'", "reference='bohb' is not one of its strategies or peers (random, asha)"),
    ("reference_point=(1, 2)", "reference_point= is for hypervolume over several objectives"),
    ("warm_from={'budget': 1}, seeds=(0,)", "a '+warm' strategy needs warm_from="),  # a KeyError after a run
])
def test_an_experiment_field_of_the_wrong_kind_is_one_line_before_anything_runs(capsys, tmp_path, fields, needle):
    given = {**ONE_METRIC, **dict(f.split("=", 1) for f in fields.replace(", seeds", "; seeds").split("; "))}
    if "warm_from" in fields:
        given["strategies"] = "('random', 'asha+warm')"
    body = ", ".join(f"{k}={v}" for k, v in given.items())
    (tmp_path / "exp.py").write_text(f"from tuning.compare import Experiment\nEXPERIMENT = Experiment({body})\n")
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--out", str(tmp_path / "out")], needle)
    assert not (tmp_path / "out").exists()


def test_experiment_fields_as_a_space_takes_them_or_read_from_the_experiments_folder(tmp_path, monkeypatch):
    from tuning.compare.experiment import load_experiment

    (tmp_path / "two_goals.py").write_text(TWO_GOALS)
    (tmp_path / "exp.py").write_text(  # the space beside the experiment; a reference point by objective
        "from tuning.compare import Experiment\n"
        "EXPERIMENT = Experiment(space='two_goals.py', budget=2, seeds=range(2),"
        " reference_point={'latency_ms': 9.0, 'loss': 2.0})\n")
    monkeypatch.chdir(ROOT)
    _, exp = load_experiment(str(tmp_path / "exp"))
    assert exp.space == str(tmp_path / "two_goals.py") and exp.seeds == (0, 1)
    assert exp.reference_point == (2.0, 9.0)  # in the objectives' order
    assert "median" not in exp.strategies and "asha" in exp.strategies  # the default's, less the one-metric rule
    (tmp_path / "exp.py").write_text("from tuning.compare import Experiment\n"
                                     "EXPERIMENT = Experiment(space='two_goals.py', budget=2, strategies=('random', "
                                     "'median'), reference_point=(2.0, 9.0))\n")
    with pytest.raises(cli.UsageError, match="strategy 'median' ranks trials by one metric"):
        load_experiment(str(tmp_path / "exp"))


def test_an_out_folder_holding_other_files_or_a_peer_that_cannot_run_is_refused(capsys, tmp_path):
    """--out into a tuning.run results folder overwrote its report.html; --strategies optuna_tpe on a
    trainer peers cannot run was a traceback (No objects to concatenate)."""
    (tmp_path / "exp.py").write_text("from tuning.compare import Experiment\nEXPERIMENT = "
                                     f"Experiment(space={str(tmp_path / 'two_goals.py')!r}, budget=2, "
                                     "strategies=('random',), reference_point=(2.0, 9.0))\n")
    (tmp_path / "two_goals.py").write_text(TWO_GOALS)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.html").write_text("the run's own")
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--out", str(run_dir)],
            "already holds other files (report.html) and no comparison: give a new or empty folder")
    assert (run_dir / "report.html").read_text() == "the run's own"
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--strategies", "optuna_motpe", "--out", str(tmp_path / "o")],
            "'optuna_motpe' is a peer, and not run for this trainer", "strategies are random")
    # A folder of the same comparison under other objectives is another comparison.
    out = tmp_path / "o"
    out.mkdir()
    space = spaces.load(str(tmp_path / "two_goals.py"))
    exp = compare.Experiment(space=str(tmp_path / "two_goals.py"), budget=2, seeds=(0,), strategies=("random",),
                             reference_point=(2.0, 9.0))
    other = space.replace(objectives={"loss": "min", "latency_ms": "max"})
    compare.write_records(out, "x", exp, other, None, smoke=False, budget=2, max_t=other.max_epochs, seeds=[0],
                          argv=["x"])
    refused(capsys, compare.main, [str(tmp_path / "exp"), "--out", str(out)], "holds the runs of another comparison",
            "objectives {'loss': 'min', 'latency_ms': 'max'} there")
    # A user's trainer is named as runs.csv names it (the report's title was "x on x", the experiment twice).
    assert json.loads((out / "experiment.json").read_text())["benchmark"] == "user_trainers:tradeoff"
    assert json.loads((out / "provenance.json").read_text())["data"]["kind"] == "trainer:user_trainers:tradeoff"


def test_a_metric_never_reported_or_trials_that_all_fail_are_refused_and_not_kept(capsys, caplog, tmp_path, ray_here):
    """Both were kept as finished runs: stand-in values of 1e6 reported as results (exit 0), or an
    empty table that no later invocation ran again."""
    for trainer, metric, needle in (("user_trainers:loss_only", "score", "the trainer reported no 'score'"),
                                    ("user_trainers:raises", "loss", "no trial reported a result (")):
        text = ("from tuning import Space, LogUniform\n"
                f"SPACE = Space(params={{'lr': LogUniform(1e-3, 1.0)}}, trainer={trainer!r}, "
                f"metric={metric!r}, max_epochs=2, gpus_per_trial=0)\n")
        (tmp_path / "s.py").write_text(text)
        (tmp_path / "exp.py").write_text("from tuning.compare import Experiment\nEXPERIMENT = Experiment("
                                         f"space={str(tmp_path / 's.py')!r}, budget=1, seeds=(0,), "
                                         "strategies=('random',), peers=())\n")
        out = tmp_path / trainer.split(":")[1]
        capsys.readouterr()
        assert compare.main([str(tmp_path / "exp"), "--out", str(out)]) == 2
        line = capsys.readouterr().err.strip().splitlines()[-1]  # above it, Tune's own lines on the failed trials
        assert line.startswith("tuning.compare: error: random-s0: " + needle), line
        assert line.endswith("run the same command again") and not (out / "runs" / "random-s0.csv").exists()
    # Where some trials failed, the run is kept with the others' results, and the command says so:
    # it had said "done" with no word of the failed ones.
    (tmp_path / "s.py").write_text(text.replace("user_trainers:raises", "user_trainers:raises_above"))
    assert compare.main([str(tmp_path / "exp"), "--budget", "2", "--out", str(tmp_path / "some")]) == 0
    warned = [r.getMessage() for r in caplog.records if "trials failed" in r.getMessage()]
    assert len(warned) == 1 and re.match(r"random-s0: [1-9] of [2-9] trials failed, the first with ", warned[0]), warned


@pytest.mark.slow  # minutes: make test-all
@pytest.mark.timeout(600)
def test_a_warm_started_strategy_runs_from_its_source_run_and_is_judged_against_the_reference(tmp_path):
    out = tmp_path / "warm"
    proc = _compare("experiments/warm_start", "--smoke", "--seeds", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    source = [json.loads(line) for line in (out / "runs" / "source-s0.jsonl").read_text().splitlines()]
    assert source and {"config", "training_iteration", "loss"} <= set(source[0])
    assert "source-s0: the earlier run" in proc.stdout
    finals = pd.read_csv(out / "finals.csv")
    assert sorted(finals["strategy"]) == sorted(["bohb", "bohb+warm", *peers.PEERS])  # the peers beside as ever
    md = (out / "report.md").read_text()
    assert "Significance against bohb" in md and "speed-up vs bohb" in md
    assert json.loads((out / "experiment.json").read_text())["reference"] == "bohb"


def test_a_cifar_comparison_reads_its_data_where_data_dir_says(capsys, tmp_path):
    """tuning.compare read CIFAR-10 from ./data only: a user whose copy lives elsewhere could not
    compare on it. --data-dir reaches the data (a file there is refused as tuning.run refuses it),
    and a comparison that trains no CIFAR refuses the flag rather than ignore it."""
    from tuning.compare import runner

    (tmp_path / "file").write_text("")
    refused(capsys, compare.main, ["experiments/cifar_strategies", "--smoke", "--out", str(tmp_path / "out"),
                                   "--data-dir", str(tmp_path / "file")], f"--data-dir {tmp_path / 'file'} is a file")
    refused(capsys, compare.main, ["experiments/counting_ones", "--out", str(tmp_path / "c"), "--data-dir", "d"],
            "--data-dir is for a CIFAR comparison's images", "drop it")
    refused(capsys, compare.main, ["experiments/cifar_strategies", "--out", str(tmp_path / "c"), "--data-dir", " "],
            "--data-dir '' names no folder")
    # '' for the other flags (a script's empty variable) was the default folder, or every strategy or task
    empty = [["--out="], ["--out", str(tmp_path / "c"), "--strategies="],
                        ["--out", str(tmp_path / "c"), "--tasks="]]
    for flags, says in zip(empty, ("--out '' names no folder", "--strategies '' names none",
                                              "--tasks '' names none")):
        refused(capsys, compare.main, ["experiments/counting_ones", *flags], says)
    assert not (tmp_path / "c").exists()
    source = runner._source(spaces.load("cifar_asha"), True, str(tmp_path / "mine"))
    assert source.kind == "synthetic" and tmp_path / "mine" in Path(source.root).parents
