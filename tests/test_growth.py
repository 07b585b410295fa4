"""Searches that grow, on counting ones and toy trainers (seconds a run): --add-samples extends a
finished run, --warm-start starts from earlier runs, --time-budget counts only running time, and
every trial's device-hours are in the tables."""

import json
import logging
import math
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from conftest import ROOT, run_cli
from tuning import backend, results, spaces

CO = ["--space", "counting_ones", "--max-epochs", "3"]
PARAMS = list(spaces.load("counting_ones").params)


def _configs(results_dir) -> list[tuple]:
    trials = pd.read_csv(results_dir / "trials.csv").sort_values("trial_id")
    return [tuple(row) for row in trials[PARAMS].itertuples(index=False)]


def _ok(proc):
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def random_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("random") / "run"
    _ok(run_cli(*CO, "--strategy", "random", "--num-samples", "6", "--results-dir", str(out)))
    return out


def test_extending_a_finished_random_run_adds_exactly_n_new_configurations(random_run, tmp_path):
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(random_run), str(run)], check=True)
    before_rows = (run / "results.jsonl").read_bytes()
    before = pd.read_csv(run / "trials.csv").set_index("trial_id")
    proc = _ok(run_cli("--resume", str(run), "--add-samples", "3"))
    assert "Adding 3 trials to counting_ones (random)" in proc.stdout
    after = pd.read_csv(run / "trials.csv").set_index("trial_id")
    assert len(after) == 9 and set(before.index) < set(after.index)
    assert len(set(_configs(run))) == 9  # new draws, not the first three again
    assert (run / "results.jsonl").read_bytes().startswith(before_rows)  # earlier rows byte for byte
    pd.testing.assert_frame_equal(after.loc[before.index, before.columns], before)
    plan = json.loads((run / "run.json").read_text())
    assert plan["status"] == "finished" and [e["samples"] for e in plan["extensions"]] == [3]


def test_a_finished_run_without_add_samples_is_still_refused(random_run):
    proc = run_cli("--resume", str(random_run))
    assert proc.returncode == 2 and "--add-samples" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_warm_start_evaluates_the_earlier_best_first(random_run, tmp_path):
    earlier = pd.read_csv(random_run / "trials.csv").sort_values("loss")  # all ran the full 3 epochs
    proc = _ok(run_cli(*CO, "--strategy", "random", "--num-samples", "5", "--seed", "7",
                       "--warm-start", str(random_run), "--results-dir", str(tmp_path / "warm")))
    first = _configs(tmp_path / "warm")[:3]  # trial ids count up in the order trials were made
    assert first == [tuple(r) for r in earlier[PARAMS].head(3).itertuples(index=False)]
    assert json.loads((tmp_path / "warm" / "run.json").read_text())["warm_start"]["top"] == 3
    assert proc.returncode == 0


def test_a_warm_start_from_a_run_of_the_same_seed_says_its_draws_repeat(random_run, caplog):
    """The earlier run's random draws come again, in order, under its seed: a new-user trial
    found two of eight warm-started trials copies of earlier ones."""
    from tuning import inputs

    seed = json.loads((random_run / "run.json").read_text())["seed"]
    space = spaces.load("counting_ones")
    with caplog.at_level(logging.WARNING, logger="tuning.inputs"):
        inputs.warm_start(space, "random", [random_run], 3, seed + 1)
        assert not caplog.records
        inputs.warm_start(space, "random", [random_run], 3, seed)
    assert f"ran with seed {seed} too" in caplog.text and "give --seed another value" in caplog.text


def test_a_warm_started_bohb_model_holds_every_earlier_result_at_its_budget(random_run):
    from tuning.backend import strategies

    rows = [r for rs in results.read_rows(random_run / "results.jsonl").values() for r in rs]
    spec = backend.RunSpec(space=spaces.load("counting_ones"), strategy="bohb", num_samples=5, max_epochs=3, seed=0,
                           cpus_per_trial=1, gpus_per_trial=0, source=None, results_dir=random_run, warm_rows=rows)
    model = strategies.build(spec)[1].searcher.bohber
    per_budget = {b: sum(r["training_iteration"] == b for r in rows) for b in (1, 2, 3)}
    assert {b: len(v) for b, v in model.losses.items()} == per_budget == {1: 6, 2: 6, 3: 6}
    # Each loss is its row's, at its budget: the model saw the earlier run as it was.
    assert sorted(model.losses[3]) == sorted(r["loss"] for r in rows if r["training_iteration"] == 3)


@pytest.mark.slow  # make test-all; default suite: the other growth refusals
def test_warm_start_from_another_space_or_declaration_is_refused(random_run, tmp_path):
    proc = run_cli("--space", "mf_hartmann", "--warm-start", str(random_run), "--results-dir", str(tmp_path / "a"))
    assert proc.returncode == 2 and "a run of space 'counting_ones', not 'mf_hartmann'" in proc.stderr
    changed = tmp_path / "changed"
    subprocess.run(["cp", "-r", str(random_run), str(changed)], check=True)
    plan = json.loads((changed / "run.json").read_text())
    plan["params"]["x3"]["high"] = 2.0  # as if the space file had been edited since
    (changed / "run.json").write_text(json.dumps(plan))
    proc = run_cli(*CO, "--warm-start", str(changed), "--results-dir", str(tmp_path / "b"))
    assert proc.returncode == 2 and "parameter 'x3'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


@pytest.fixture(scope="module")
def ray_module():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _spec(space, strategy, results_dir, **kw):
    return backend.RunSpec(space=spaces.load(space), strategy=strategy, max_epochs=9, seed=0, cpus_per_trial=1,
                           gpus_per_trial=0, source=None, results_dir=results_dir, progress=False,
                           snapshot_every_step=False, **kw)


@pytest.mark.slow  # make test-all; default suite: extending a random run
def test_an_extended_bohb_proposes_from_the_model_fitted_on_earlier_results(ray_module, tmp_path, monkeypatch):
    from tuning.backend import bohb

    records, _ = backend.run(_spec("mf_hartmann", "bohb", tmp_path, num_samples=34))  # two bands: 18 at budget 1
    assert len(records) == 34  # paused trials keep the search open, but it makes no trial past its count
    seen = []
    get_config = bohb.VectorisedBOHB.get_config

    def spy(self, budget):
        seen.append({b: len(v) for b, v in self.losses.items() if b in self.kde_models})
        return get_config(self, budget)

    monkeypatch.setattr(bohb.VectorisedBOHB, "get_config", spy)
    got = {}
    records, _ = backend.run(_spec("mf_hartmann", "bohb", tmp_path, num_samples=34, resume=True, add_samples=4,
                                   on_search=lambda a, s: got.update(search=a)))
    assert len(records) == 38 and len(seen) == 4
    assert seen[0] and max(seen[0].values()) >= 14, seen[0]  # a fitted KDE from the first run's results
    observed = got["search"].searcher.observed
    first_run = {t for t, _ in observed[:-1]}
    assert len(first_run) >= 30  # the model kept what the first run gave it


@pytest.mark.slow  # make test-all; default suite: extending a random run
def test_an_extended_asha_judges_new_trials_against_every_earlier_result(ray_module, tmp_path):
    backend.run(_spec("counting_ones", "asha", tmp_path, num_samples=6))
    earlier = set(results.read_rows(tmp_path / "results.jsonl"))
    got = {}
    backend.run(_spec("counting_ones", "asha", tmp_path, num_samples=6, resume=True, add_samples=3,
                      on_search=lambda a, s: got.update(asha=s)))
    first_rung = dict(got["asha"]._brackets[0]._rungs)[1]  # the grace period: every trial reaches it
    assert earlier < set(first_rung) and len(first_rung) == 9


def _busy_space(path, epochs=3, seconds=1.0):
    path.write_text(
        "from tuning.spaces import Space, Uniform\n"
        f"SPACE = Space(params={{'x': Uniform(0.0, 1.0, grid=100)}}, trainer='tuning.bench.harness:busy',\n"
        f"              fixed={{'seconds': {seconds}}}, strategy='random', num_samples=60, max_epochs={epochs},\n"
        "              cpus_per_trial=1, gpus_per_trial=0)\n")
    return str(path)


def test_a_spent_time_budget_ends_without_rays_error_line(tmp_path):
    """Ray logged 'ERROR ... Trials did not complete: [...]' (every unfinished trial's name) on a run
    whose time budget was spent as planned, exit 0; the summary says what is left and how to go on."""
    proc = _ok(run_cli("--space", "counting_ones", "--strategy", "random", "--num-samples", "40", "--time-budget", "3s",
                       "--results-dir", str(tmp_path / "r")))
    assert "Time budget spent" in proc.stdout
    assert "Trials did not complete" not in proc.stdout + proc.stderr
    # A new total below what the run used already started Ray, ran a moment and said "4 s against 1 s".
    used = json.loads((tmp_path / "r" / "run.json").read_text())["time_used_s"]
    refused = run_cli("--resume", str(tmp_path / "r"), "--time-budget", "1s")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"tuning.run: error: --time-budget 1s: the run has used {used:.0f} s of running time already, and the budget "
        "is the total across resumes: give more than that"]
    assert json.loads((tmp_path / "r" / "run.json").read_text())["time_used_s"] == used


@pytest.mark.slow  # minutes: make test-all
@pytest.mark.timeout(400)
def test_time_budget_counts_running_time_only_across_an_interruption(tmp_path):
    space, out = _busy_space(tmp_path / "busy.py"), tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tuning.run", "--space", space, "--time-budget", "20s",
                             "--results-dir", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and json.loads((out / "run.json").read_text() if (out / "run.json").exists()
                                                     else "{}").get("time_used_s", 0) < 8:
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(120) == 130, proc.stdout.read()[-2000:]
    first = json.loads((out / "run.json").read_text())
    assert first["status"] == "interrupted" and 8 <= first["time_used_s"] < 20
    time.sleep(30)  # downtime: must not count
    resumed = _ok(run_cli("--resume", str(out)))
    plan = json.loads((out / "run.json").read_text())
    assert plan["status"] == "time budget spent" and "Time budget spent" in resumed.stdout
    # Stopped within an epoch of 20 s: 1 s of CPU work, plus its reporting, on a busy machine. Had the
    # 30 s of downtime counted it would be 38 s or more; had the resume spent 20 s more, 28 s or more.
    assert 20 <= plan["time_used_s"] <= 20 + 5, resumed.stdout[-3000:]
    trials = pd.read_csv(out / "trials.csv")
    assert (trials["epochs"] < 3).any()
    # What a later --resume or --add-samples starts from: Tune's saved experiment keeps the trials
    # the budget cut short paused or pending, not finished.
    snapshot = sorted((out / "tune").glob("experiment_state-*.json"))[-1]
    statuses = [json.loads(trial)["status"] for trial, _ in json.loads(snapshot.read_text())["trial_data"]]
    assert {"PAUSED", "PENDING"} & set(statuses), statuses
    # Device-hours: each trial's CPU times the time its epochs took (each at least its 1 s of CPU work,
    # more on a loaded machine); the run's total is their sum.
    rows = results.read_rows(out / "results.jsonl")
    for _, t in trials.iterrows():
        mine = rows.get(t["trial_id"], [])
        assert t["cpu_hours"] == pytest.approx(sum(r["time_this_iter_s"] for r in mine) / 3600)
        assert t["cpu_hours"] >= 0.99 * len(mine) / 3600
        assert t["gpu_hours"] == 0
    assert plan["cpu_hours"] == pytest.approx(trials["cpu_hours"].sum())
    assert math.isfinite(plan["cpu_hours"]) and "CPU-hours" in resumed.stdout


@pytest.mark.slow  # minutes: make test-all
@pytest.mark.timeout(300)
def test_extending_a_grid_continues_its_order_and_never_repeats_a_point(tmp_path):
    space, out = _busy_space(tmp_path / "busy.py", epochs=1, seconds=0.2), tmp_path / "grid"
    _ok(run_cli("--space", space, "--strategy", "grid", "--time-budget", "6s", "--results-dir", str(out)))
    before = pd.read_csv(out / "trials.csv")["trial_id"].tolist()
    _ok(run_cli("--resume", str(out), "--add-samples", "4", "--time-budget", "600s"))
    trials = pd.read_csv(out / "trials.csv")
    grid = spaces.load(space).params["x"].grid_values()
    assert len(trials) == len(before) + 4  # trials left pending by the budget ran too: they were counted
    # The grid's first points, each once: it went on where it stopped (a restart would repeat some).
    assert sorted(trials["x"]) == grid[:len(trials)]
