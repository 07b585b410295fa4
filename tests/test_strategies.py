"""Every strategy end to end over one small space, in the default suite; then grid, random and
BOHB in smoke size through tuning.run's command line (ASHA: test_smoke.py), under make test-all."""

import itertools
import json

import pandas as pd
import pytest

import tuning
from conftest import run_cli
from tuning import spaces

# Multi-fidelity Hartmann-6 (tuning/compare/benchmarks.py): no data, no model, so a trial costs what Tune's
# own bookkeeping costs. Four trials, as many as the grid's points (2 x 2, the other four parameters
# at the middle); 3 epochs: Hyperband's and BOHB's rungs at 1 and 3.
SMALL = tuning.Space(params={f"x{i}": tuning.Uniform(0.0, 1.0, grid=2 if i < 2 else 1) for i in range(6)},
                     trainer="mf_hartmann", num_samples=4, max_epochs=3, grace_period=1, reduction_factor=3,
                     cpus_per_trial=1, gpus_per_trial=0)
FILES = ["trials.csv", "epochs.csv", "run.json", "best_config.json", "report.md", "report.html"]


@pytest.mark.parametrize("strategy", spaces.STRATEGIES)
def test_every_strategy_searches_the_small_space_end_to_end(ray_2cpus, tmp_path, strategy):
    """One local Ray for all (ray_2cpus): each strategy runs its trials, writes every file, and
    names as best the full-budget trial with the lowest loss, a configuration inside the space."""
    result = tuning.search(None, SMALL, strategy=strategy, seed=0, results_dir=tmp_path / "r")
    grid = list(itertools.product(*(p.grid_values() for p in SMALL.params.values())))
    trials = pd.read_csv(tmp_path / "r" / "trials.csv")
    assert result.status == "finished" and len(trials) == SMALL.num_samples == len(grid)
    assert result.succeeded == len(trials) and (trials["strategy"] == strategy).all()
    assert trials["epochs"].between(1, 3).all() and (trials["epochs"] == 3).any()
    assert set(pd.read_csv(tmp_path / "r" / "epochs.csv")["trial_id"]) == set(trials["trial_id"])
    for name in FILES:
        assert (tmp_path / "r" / name).stat().st_size > 0, name
    assert json.loads((tmp_path / "r" / "run.json").read_text())["strategy"] == strategy

    config = result.best_config
    assert set(config) == set(SMALL.params) and all(0 <= v <= 1 for v in config.values())
    if strategy == "grid":  # every point once, the best among them
        assert sorted(map(tuple, trials[list(SMALL.params)].values)) == sorted(grid)
        assert tuple(config[p] for p in SMALL.params) in grid
    full = trials[trials["epochs"] == 3]
    winner = full.loc[full["loss"].idxmin()]
    assert result.best.trial_id == winner["trial_id"] and result.best.epochs == 3
    assert config == pytest.approx({p: winner[p] for p in SMALL.params})
    assert json.loads((tmp_path / "r" / "best_config.json").read_text())["config"] == pytest.approx(config)


def _run(tmp_path_factory, name, *args):
    tmp = tmp_path_factory.mktemp(name)
    proc = run_cli(*args, "--smoke", "--data-dir", str(tmp / "data"), "--results-dir", str(tmp / "results"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, tmp / "results"


def _reporter_table_shown(out: str):
    assert "== Status ==" in out
    header = [line for line in out.splitlines() if line.startswith("| Trial name")][-1]
    for col in ("loss", "accuracy", "training_iteration"):
        assert col in header


@pytest.fixture(scope="module")
def bohb(tmp_path_factory):
    return _run(tmp_path_factory, "bohb", "--space", "cifar_bohb", "--tune-logs")


@pytest.mark.slow  # minutes: make test-all
def test_bohb_pauses_and_resumes_trials_from_their_checkpoints(bohb):
    proc, results = bohb
    _reporter_table_shown(proc.stdout)
    trials = pd.read_csv(results / "trials.csv", keep_default_na=False)
    epochs = pd.read_csv(results / "epochs.csv")
    assert (trials["strategy"] == "bohb").all()
    assert (trials["resumed_at"] != "").any()  # at least one paused-then-resumed trial
    assert (epochs["restored_from"] > 0).any()
    for _, curve in epochs.groupby("trial_id"):  # no restart: strictly increasing, no epoch twice
        assert curve["training_iteration"].is_monotonic_increasing and curve["training_iteration"].is_unique
        assert curve["epoch"].tolist() == curve["training_iteration"].tolist()
    assert trials["recomputed_epochs"].sum() == 0
    run = json.loads((results / "run.json").read_text())
    assert run["recomputed_epochs"] == 0 and run["resumed_trials"] >= 1 and run["strategy"] == "bohb"
    assert "0 epochs recomputed" in proc.stdout


@pytest.mark.slow  # minutes: make test-all
def test_bohb_configs_are_plain_everywhere(bohb):
    proc, results = bohb
    assert "np.int64" not in proc.stdout and "np.str_" not in proc.stdout
    best = json.loads((results / "best_config.json").read_text())
    assert type(best["config"]["batch_size"]) is int
    assert pd.read_csv(results / "trials.csv")["batch_size"].isin([64, 128, 256, 512]).all()


@pytest.mark.slow  # minutes: make test-all
def test_tune_logs_flag_writes_each_trials_tensorboard_and_progress_files(bohb):
    # This run was given --tune-logs: Tune's own per-trial logs, across BOHB's pauses and resumes.
    _, results = bohb
    trials = pd.read_csv(results / "trials.csv")
    for trial_id, epochs in zip(trials["trial_id"], trials["epochs"]):
        folder = results / "tune" / trial_id
        assert list(folder.glob("events.out.tfevents.*")), sorted(p.name for p in folder.iterdir())
        assert pd.read_csv(folder / "progress.csv")["training_iteration"].max() == epochs
        assert json.loads((folder / "result.json").read_text().splitlines()[-1])["training_iteration"] == epochs


@pytest.mark.slow
def test_bohb_same_seed_same_configs_across_real_runs(bohb, tmp_path_factory):
    _, again = _run(tmp_path_factory, "bohb_again", "--space", "cifar_bohb")
    a = pd.read_csv(bohb[1] / "trials.csv")[["lr", "batch_size"]]
    b = pd.read_csv(again / "trials.csv")[["lr", "batch_size"]]
    assert sorted(map(tuple, a.values)) == sorted(map(tuple, b.values))


@pytest.mark.slow  # minutes; the default suite runs grid and random in test_compare's smoke
def test_grid_covers_exactly_the_grid_times_repeats(tmp_path_factory):
    # --strategy overrides the space's (ASHA) strategy; --num-samples repeats the grid.
    proc, results = _run(tmp_path_factory, "grid", "--space", "cifar_asha", "--strategy", "grid",
                         "--num-samples", "2", "--max-epochs", "1")
    _reporter_table_shown(proc.stdout)
    assert "= 16 points x 2 repeats = 32 trials" in proc.stdout
    trials = pd.read_csv(results / "trials.csv")
    space = spaces.load("cifar_asha")
    expected = sorted((lr, bs) for lr in space.params["lr"].grid_values()
                      for bs in space.params["batch_size"].grid_values()) * 2
    got = sorted(zip(trials["lr"], trials["batch_size"]))
    assert len(got) == 32
    assert got == sorted(expected)
    assert (trials["strategy"] == "grid").all() and not trials["stopped_early"].any()
    assert json.loads((results / "run.json").read_text())["strategy"] == "grid"


@pytest.mark.slow  # minutes; the default suite runs grid and random in test_compare's smoke
def test_random_trains_every_trial_for_the_full_budget(tmp_path_factory):
    proc, results = _run(tmp_path_factory, "random", "--space", "cifar_random")
    _reporter_table_shown(proc.stdout)
    trials = pd.read_csv(results / "trials.csv")
    assert len(trials) == 8 and (trials["epochs"] == 2).all() and not trials["stopped_early"].any()
    assert (trials["strategy"] == "random").all()
    assert trials["lr"].nunique() == 8
