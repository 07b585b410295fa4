"""The trainer replay:DIR (tuning/compare/recorded.py): a finished run's recorded learning curves served to the
strategies through real Ray. docs/calibration (the full cifar_grid, 16 configurations x 16 epochs)
is the recorded run; in-process runs wait 1/10,000 of each recorded epoch's time, seconds a run."""

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from cli_helpers import refused
from conftest import ROOT
from tuning import backend, record, results, spacejson, spaces
from tuning.compare import recorded as replay, runner as compare

CALIBRATION = ROOT / "docs" / "calibration"
FAST = 1e-4  # a 142 s epoch waits 14 ms
ASHA_RUNGS = (1, 2, 4, 8)  # the recorded space's grace period 1, reduction factor 2, 16 epochs


def _csv(path):
    return pd.read_csv(path, dtype={"trial_id": str})


@pytest.fixture(scope="module")
def recorded():
    return replay.read(str(CALIBRATION))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, recorded):
    """A grid run and an ASHA run of 24 trials over the replayed calibration run, through
    backend.run as tuning.run and tuning.compare run them: {strategy: (trial records, results in
    arrival order)}."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    space = replay.space(recorded).replace(fixed={"time_scale": FAST})
    out = {}
    try:
        for strategy, samples in (("grid", 1), ("asha", 24)):
            rec = backend.recorder()
            spec = backend.RunSpec(space=space, strategy=strategy, num_samples=samples, max_epochs=16, seed=0,
                                   cpus_per_trial=1, gpus_per_trial=0, source=None,
                                   results_dir=tmp_path_factory.mktemp(strategy), progress=False,
                                   snapshot_every_step=False, callbacks=[rec])
            records, interrupted = backend.run(spec)
            assert not interrupted and all(isinstance(r, results.TrialRecord) for r in records)
            out[strategy] = (records, rec.rows)
    finally:
        ray.shutdown()
    return out


def _nearest(config: dict, epochs: pd.DataFrame) -> str:
    """The recorded trial a configuration replays, worked out by hand for this space: the same batch
    size, the nearest learning rate on a log scale."""
    same = epochs[epochs["batch_size"] == config["batch_size"]].drop_duplicates("trial_id")
    return same.loc[(np.log(same["lr"]) - math.log(config["lr"])).abs().idxmin(), "trial_id"]


def test_a_replayed_grid_reproduces_every_recorded_configuration_exactly(runs):
    records, _ = runs["grid"]
    mine = results.epochs_table(records, ["lr", "batch_size"]).drop(columns="trial_id")
    theirs = _csv(CALIBRATION / "epochs.csv")
    key = ["lr", "batch_size", "training_iteration"]
    both = theirs.merge(mine, on=key, suffixes=("", "_replayed"), validate="one_to_one")
    assert len(both) == len(theirs) == 256  # every recorded epoch of every configuration, once
    for m in ("loss", "accuracy", "train_loss", "time_this_iter_s"):
        assert (both[m] == both[f"{m}_replayed"]).all(), m  # to the last bit
    finals = results.trials_table(records, ["lr", "batch_size"], strategy="grid", max_epochs=16, cpus=1)
    recorded_finals = _csv(CALIBRATION / "trials.csv")
    cols = ["lr", "batch_size", "loss", "accuracy", "epochs"]
    pd.testing.assert_frame_equal(finals[cols].sort_values(["lr", "batch_size"]).reset_index(drop=True),
                                  recorded_finals[cols].sort_values(["lr", "batch_size"]).reset_index(drop=True))


def test_a_replayed_asha_run_stops_the_trials_whose_recorded_curves_are_worst_at_each_rung(runs):
    _, rows = runs["asha"]
    epochs = _csv(CALIBRATION / "epochs.csv").set_index(["trial_id", "training_iteration"])
    flat = epochs.reset_index()
    # Every result is what the nearest recorded configuration reported at that epoch.
    for r in rows:
        nearest = _nearest(r["config"], flat)
        assert r["replayed"]["trial_id"] == nearest
        assert r["loss"] == epochs.loc[(nearest, r["training_iteration"]), "loss"]
    # ASHA's rule, applied to those recorded losses in the order they arrived: at each rung a trial
    # goes on only if its loss is not worse than the median of the losses recorded there before it.
    reached = {}
    for r in rows:
        reached[r["trial_id"]] = max(reached.get(r["trial_id"], 0), r["training_iteration"])
    rungs, stops = {t: [] for t in ASHA_RUNGS}, {t: 0 for t in ASHA_RUNGS}
    for r in rows:
        t = r["training_iteration"]
        if t not in rungs:
            continue
        worse = bool(rungs[t]) and -r["loss"] < np.nanpercentile(rungs[t], 50)
        rungs[t].append(-r["loss"])
        assert (reached[r["trial_id"]] == t) == worse, (r["trial_id"], t, r["loss"])
        stops[t] += worse
    assert stops[1] >= 6 and sum(stops.values()) >= 10, stops  # half of 24 go at the first rungs
    assert max(reached.values()) == 16


def test_a_replay_is_charged_the_recorded_device_hours_of_the_epochs_it_replayed(runs, recorded):
    epochs = _csv(CALIBRATION / "epochs.csv").set_index(["trial_id", "training_iteration"])
    for strategy, (records, rows) in runs.items():
        table = results.trials_table(records, ["lr", "batch_size"], strategy=strategy, max_epochs=16, cpus=1)
        expected = math.fsum(epochs.loc[(r["replayed"]["trial_id"], r["training_iteration"]), "time_this_iter_s"]
                             for r in rows) / 3600  # the recorded run had one CPU per trial
        assert table["cpu_hours"].sum() == pytest.approx(expected, rel=1e-12), strategy
        assert table["gpu_hours"].sum() == 0
    # The grid replays every recorded epoch once: what the recorded run cost, as its run.json says.
    grid = results.trials_table(runs["grid"][0], ["lr", "batch_size"], strategy="grid", max_epochs=16, cpus=1)
    assert grid["cpu_hours"].sum() == pytest.approx(record.read(CALIBRATION).cpu_hours, rel=1e-12)


def _experiment(path, fields: str) -> str:
    path.write_text(f"from tuning.compare import Experiment\nEXPERIMENT = Experiment({fields})\n")
    return str(path.with_suffix(""))


def test_more_epochs_than_recorded_are_refused_before_anything_is_written(capsys, tmp_path, recorded):
    too_long = _experiment(tmp_path / "too_long.py", f"space='replay:{CALIBRATION}', budget=2, max_epochs=17")
    before = sorted(p.name for p in tmp_path.iterdir())
    refused(capsys, compare.main, [too_long, "--out", str(tmp_path / "out")], "17 epochs asked for",
            "recorded at most 16")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    # tuning.run and tuning.search meet the same check when the run's trainable is made.
    space = replay.space(recorded)
    spec = backend.RunSpec(space=space, strategy="grid", num_samples=1, max_epochs=17, seed=0, cpus_per_trial=1,
                           gpus_per_trial=0, source=None, results_dir=tmp_path / "never")
    from tuning.backend import trainables

    with pytest.raises(replay.ReplayError, match="recorded at most 16"):
        trainables.trainable(spec)


def _tiny_run(folder, *, status="finished", epochs=True, declaration=None):
    """A recorded run of a user's trainer, made by hand: a Uniform, an IntUniform and a Choice of
    strings, a metric to maximise, 3 configurations x 2 epochs."""
    folder.mkdir()
    params = {"x": spaces.Uniform(0.0, 1.0), "n": spaces.IntUniform(1, 3), "kind": spaces.Choice(["a", "b"])}
    record.RunRecord(space="tiny", strategy="random", seed=0, num_samples=3, max_epochs=2, trainer="mine:train",
                     metric="score", mode="max", params=spacejson.declarations(params), status=status,
                     resources_per_trial={"cpu": 2, "gpu": 0}, declaration=declaration or {}).write(folder)
    if epochs:
        rows = [{"trial_id": tid, "x": x, "n": n, "kind": k, "training_iteration": t, "epoch": t,
                 "score": x * t + n, "time_this_iter_s": 10.0 * t, "timestamp": 1000 + 10 * t}
                for tid, x, n, k in (("t1", 0.1, 1, "a"), ("t2", 0.9, 3, "b"), ("t3", 0.5, 2, "a")) for t in (1, 2)]
        pd.DataFrame(rows).to_csv(folder / "epochs.csv", index=False)
    return folder


def test_nearest_goes_by_the_declared_scales_and_a_choice_must_match(tmp_path):
    tiny = replay.read(str(_tiny_run(tmp_path / "tiny")))
    nearest = lambda config: tiny.trial_ids[replay.order(tiny, config)[0]]  # noqa: E731
    assert nearest({"x": 0.85, "n": 1, "kind": "a"}) == "t3"  # kind a: t1 or t3; t3 is nearer in x and n
    assert nearest({"x": 0.1, "n": 3, "kind": "b"}) == "t2"  # the only b, however far
    assert nearest({"x": 0.2, "n": 1, "kind": "a"}) == "t1"
    row = replay.epoch(tiny, replay.order(tiny, {"x": 0.9, "n": 3, "kind": "b"}), 2)
    assert row["score"] == 0.9 * 2 + 3 and row["time_this_iter_s"] == 20.0
    assert row["replayed"]["trial_id"] == "t2" and row["replayed"]["gpu_hours"] == 0
    assert row["replayed"]["cpu_hours"] == pytest.approx(2 * 20 / 3600)  # the recorded run's 2 CPUs a trial


def test_a_conditional_space_replays_each_branch_from_its_own_recorded_configurations(tmp_path, capsys):
    """A parameter active in one branch only (mom, when opt is sgd): its empty cells were read as
    values, and every configuration proposed without it (opt adam) failed with KeyError: 'mom', in the
    Ray strategies' trials and, uncaught, in the peers."""
    folder = tmp_path / "cond"
    folder.mkdir()
    params = {"x": spaces.Uniform(0.0, 1.0), "opt": spaces.Choice(["adam", "sgd"]),
              "mom": spaces.Uniform(0.0, 0.9, when={"opt": "sgd"})}
    record.RunRecord(space="cond", strategy="random", seed=0, num_samples=3, max_epochs=2, trainer="mine:train",
                     metric="loss", mode="min", params=spacejson.declarations(params), status="finished",
                     resources_per_trial={"cpu": 1, "gpu": 0}).write(folder)
    trials = (("a1", 0.2, "adam", None), ("s1", 0.2, "sgd", 0.1), ("s2", 0.9, "sgd", 0.8))
    pd.DataFrame([{"trial_id": tid, "x": x, "opt": opt, "mom": mom, "training_iteration": t, "loss": x + (mom or 0) / t,
                   "time_this_iter_s": 1.0, "timestamp": 1000 + t} for tid, x, opt, mom in trials for t in (1, 2)]
                 ).to_csv(folder / "epochs.csv", index=False)
    rec = replay.read(str(folder))
    assert rec.configs[0] == {"x": 0.2, "opt": "adam"}  # no mom: inactive, not NaN
    nearest = lambda config: rec.trial_ids[replay.order(rec, config)[0]]  # noqa: E731
    assert nearest({"x": 0.9, "opt": "adam"}) == "a1"  # the only adam, however far in x
    assert nearest({"x": 0.8, "opt": "sgd", "mom": 0.7}) == "s2" and nearest({"x": 0.3, "opt": "sgd", "mom": 0}) == "s1"
    # The peers (in process, no Ray) and the report, whose best configuration has no mom.
    out = tmp_path / "out"
    assert compare.main(["--replay", str(folder), "--seeds", "1", "--budget", "3", "--strategies",
                         "optuna_tpe,optuna_tpe_hb", "--out", str(out)]) == 0, capsys.readouterr().err[-2000:]
    assert "trial a1 (x 0.2, opt adam)" in (out / "report.md").read_text()


def test_the_trainer_form_in_a_space_knows_the_recorded_metrics():
    trainer = f"replay:{CALIBRATION}"
    params = {"lr": spaces.LogUniform(1e-4, 1e-2), "batch_size": spaces.Choice([64, 128, 256, 512])}
    assert spaces.Space(params=params, trainer=trainer, metric="accuracy", mode="max").metric == "accuracy"
    with pytest.raises(spaces.SpaceError, match="never reported.*accuracy, loss, train_loss"):
        spaces.Space(params=params, trainer=trainer, metric="f1")
    with pytest.raises(spaces.SpaceError, match="no such folder"):
        spaces.Space(params=params, trainer="replay:/no/such/run")


@pytest.mark.parametrize("case,needle", [
    ("missing", "no such folder"),
    ("empty", "is not a tuning.run results dir (no run.json)"),
    ("unfinished", "has no epochs.csv (the run is 'running')"),
    ("garbage", "lacks the columns"),
    ("both", "one of the two"),
    ("neither", "one of the two"),
    # replayed by its first objective alone, infeasible trials counted as its best (exit 0)
    ("several", "has objectives and constraints ("),
])
def test_a_bad_replay_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, case, needle):
    folder = tmp_path / "run"
    if case == "empty":
        folder.mkdir()
    elif case == "unfinished":
        _tiny_run(folder, status="running", epochs=False)
    elif case == "several":
        _tiny_run(folder, declaration={"objectives": {"score": "max", "n": "min"}, "constraints": {"x": ["<=", 0.5]}})
    elif case == "garbage":
        _tiny_run(folder)
        (folder / "epochs.csv").write_text("a,b\n1,2\n")
    args = {"both": ["experiments/counting_ones", "--replay", str(CALIBRATION)], "neither": []}.get(
        case, ["--replay", str(folder)])
    before = sorted(p.name for p in tmp_path.rglob("*"))
    refused(capsys, compare.main, [*args, "--out", str(tmp_path / "out")], needle)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def _compare(*args):
    return subprocess.run([sys.executable, "-m", "tuning.compare", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow  # make test-all; the default suite replays through tuning.search (a grid and ASHA over the calibration)
@pytest.mark.timeout(900)
def test_the_replay_experiment_runs_in_smoke_size(tmp_path):
    out = tmp_path / "cifar_replay"
    proc = _compare("experiments/cifar_replay", "--smoke", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    exp = json.loads((out / "experiment.json").read_text())
    assert exp["replay"]["best"] == "559bb171" and exp["regret"] == "difference"
    runs = pd.read_csv(out / "runs.csv", dtype={"trial_id": str, "recorded_trial": str})
    declared = compare.load_experiment("experiments/cifar_replay")[1]
    assert sorted(runs["strategy"].unique()) == sorted(declared.strategies + declared.peers)  # peers replay in process
    assert runs["seed"].nunique() == 2
    # Device-hours: the recorded cost of the epochs replayed so far, in each run.
    epochs = _csv(CALIBRATION / "epochs.csv").set_index(["trial_id", "training_iteration"])
    kept = pd.concat(pd.read_csv(f, dtype={"trial_id": str, "recorded_trial": str}) for f in (out / "runs").glob("*.csv"))
    for run_id, run in kept.groupby("run_id"):
        cost = np.cumsum([epochs.loc[(t, i), "time_this_iter_s"] / 3600
                          for t, i in zip(run["recorded_trial"], run["training_iteration"])])
        np.testing.assert_allclose(run["device_hours"], cost, rtol=1e-12, err_msg=run_id)
    md = (out / "report.md").read_text()
    assert "Replayed: which recorded configuration each strategy found" in md and "lr on 4 values" in md
    finals = pd.read_csv(out / "finals.csv")
    assert {"final_recorded_trial", "ended_on_best", "device_hours_to_best"} <= set(finals.columns)


@pytest.mark.slow  # make test-all: the default suite replays through the cifar_replay experiment and the API
@pytest.mark.timeout(900)
def test_any_finished_run_can_be_replayed_with_one_command(tmp_path):
    tiny = _tiny_run(tmp_path / "tiny")
    out = tmp_path / "out"
    proc = _compare("--replay", str(tiny), "--seeds", "1", "--budget", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    exp = json.loads((out / "experiment.json").read_text())
    assert (exp["metric"], exp["mode"], exp["max_t"]) == ("score", "max", 2)
    assert exp["replay"]["best"] == "t2" and exp["optimum"] == 0.9 * 2 + 3
    finals = pd.read_csv(out / "finals.csv")
    assert len(finals) == len(spaces.STRATEGIES) + 2 and (finals["final"] >= 0).all()  # regret against the best recorded
    assert "Replayed: which recorded configuration" in (out / "report.md").read_text()


def test_tuning_search_replays_and_refuses_before_writing(tmp_path):
    """The API path: a space whose trainer is replay:DIR runs through tuning.search, and asking for
    more epochs than recorded is refused before the results dir exists."""
    import tuning
    from tuning.compare import recorded as replay

    recorded = replay.read(str(CALIBRATION))
    space = replay.space(recorded).replace(strategy="asha", num_samples=4, max_epochs=4)
    result = tuning.search(None, space, seed=0, smoke=True, max_epochs=4, results_dir=tmp_path / "r")
    assert result.status == "finished" and len(result.trials) == 8 and result.best is not None
    with pytest.raises(tuning.TuningError, match="recorded at most 16"):
        tuning.search(None, space, max_epochs=17, results_dir=tmp_path / "too-many")
    assert not (tmp_path / "too-many").exists()
