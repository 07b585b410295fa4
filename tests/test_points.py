"""Configurations of the user's own to run first (points_to_evaluate=, --points-to-evaluate):
Ray Tune's points_to_evaluate, Optuna's enqueue_trial. Each is one of the first trials under
every strategy but grid, with a choice of dicts, lists and None and a conditional parameter; and
a configuration that does not fit the space is refused before anything starts."""

import json

import pytest

import tuning
from tuning import run

from cli_helpers import refused
from test_migration_api import ARCHS, _check_choice_run, choice_space

MINE = [{"arch": ARCHS[1], "shape": None, "lr": 0.9, "dropout": 0.4},
        {"arch": ARCHS[0], "shape": [3, 4], "lr": 0.8}]


def first_configs(folder, n: int) -> list[dict]:
    """The configurations of the first n trials made, in a fixed order: by the count in Tune's trial
    ids (random search: "<run>_00000"), else (a searcher's own ids) the first to report, which
    under Hyperband's brackets start one by one in the order they were made."""
    configs = {}
    for row in map(json.loads, (folder / "results.jsonl").read_text().splitlines()):
        configs.setdefault(row["trial_id"], row["config"])
    ids = list(configs)
    if all(t.rpartition("_")[2].isdigit() for t in ids):
        ids.sort(key=lambda t: int(t.rpartition("_")[2]))
    return in_order([configs[t] for t in ids[:n]])


def in_order(configs: list[dict]) -> list[dict]:
    return sorted(configs, key=lambda c: json.dumps(c, sort_keys=True))


@pytest.mark.parametrize("strategy", ["random", "bohb", "tpe", *(pytest.param(s, marks=pytest.mark.slow)
                                                                for s in ("asha", "hyperband", "adaptive"))])
def test_your_configurations_are_the_first_trials(ray_here, tmp_path, strategy):
    result = tuning.search(None, choice_space(), strategy=strategy, seed=0, points_to_evaluate=MINE,
                           results_dir=tmp_path / "r")
    _check_choice_run(result, tmp_path / "r")
    assert first_configs(tmp_path / "r", 2) == in_order(MINE)
    assert json.loads((tmp_path / "r" / "run.json").read_text())["points_to_evaluate"] == MINE


def test_they_run_before_a_warm_starts_configurations(ray_here, tmp_path):
    earlier = tuning.search(None, choice_space(num_samples=3), strategy="random", seed=5, results_dir=tmp_path / "a")
    tuning.search(None, choice_space(num_samples=4), strategy="random", seed=6, points_to_evaluate=MINE[:1],
                  warm_start=[earlier.results_dir], warm_start_top=1, results_dir=tmp_path / "b")
    assert first_configs(tmp_path / "b", 2) == in_order([MINE[0], earlier.best.config])
    # Each is one of num_samples: a point and three warm configurations ran a fifth trial of four once.
    capped = tuning.search(None, choice_space(num_samples=2), strategy="random", seed=7, points_to_evaluate=MINE[:1],
                           warm_start=[earlier.results_dir], results_dir=tmp_path / "c")
    assert len(capped.trials) == 2
    # run.json's warm start lists the configurations that ran (it listed all three earlier ones).
    warm = json.loads((tmp_path / "c" / "run.json").read_text())["warm_start"]["configs"]
    assert len(warm) == 1 and warm[0]["lr"] in set(capped.trials["lr"])


@pytest.mark.parametrize("given, needle", [
    ([{**MINE[1], "dropout": 0.1}], "configuration 1 sets dropout, inactive where dropout needs arch in"),
    ([MINE[0], {k: v for k, v in MINE[0].items() if k != "lr"}], "configuration 2 has no value for lr"),
    ([{**MINE[1], "lr": 1.5}], "lr=1.5 is outside its declaration Uniform(0.0, 1.0)"),
    ([{**MINE[1], "shape": [5, 6]}], "shape=[5, 6] is outside its declaration Choice("),
    ([{**MINE[1], "momentum": 0.9}], "sets momentum, which the space does not search"),
    (MINE[0], "give a list of configurations, each a dict of parameter values"),
    (MINE * 4, "8 configurations but 6 trials (num_samples): each is one of the trials; raise num_samples "),
    ([{**MINE[1], "lr": "0.01"}], "lr='0.01' is not a number, which Uniform(0.0, 1.0) takes: write lr=0.01"),
])
def test_a_configuration_that_does_not_fit_the_space_is_refused(tmp_path, given, needle):
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(None, choice_space(), strategy="random", points_to_evaluate=given, results_dir=tmp_path / "r")
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "r").exists()


def test_numpy_values_and_a_home_relative_file_are_taken(tmp_path, monkeypatch):
    import numpy as np

    from tuning import points

    space = tuning.Space(params={"n": tuning.IntUniform(1, 8), "x": tuning.Uniform(0.0, 1.0)}, trainer="counting_ones")
    assert points.check(space, "random", [{"n": np.int64(4), "x": np.float32(0.5)}], 2) == [{"n": 4, "x": 0.5}]
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mine.json").write_text('[{"n": 2, "x": 0.1}]')
    assert points.read("~/mine.json") == [{"n": 2, "x": 0.1}]


def test_grid_refuses_them_and_a_space_with_grid_says_to_drop_it(tmp_path):
    with pytest.raises(tuning.TuningError, match="grid search walks its fixed points"):
        tuning.search(None, choice_space(), strategy="grid", points_to_evaluate=MINE, results_dir=tmp_path / "r")
    # It once said to use random or asha, which refused it again: grid= is what stands in the way.
    with pytest.raises(tuning.TuningError, match=r"the space's grid=\['lr'\] runs every grid point .* drop grid="):
        tuning.search(None, choice_space(grid=["lr"]), strategy="random", points_to_evaluate=MINE,
                      results_dir=tmp_path / "r")


def test_the_cli_takes_json_or_a_file_and_refuses_either_in_one_line(tmp_path, capsys):
    space = ["--space", "cifar_asha", "--results-dir", str(tmp_path / "r")]
    refused(capsys, run.main, [*space, "--points-to-evaluate", '[{"lr": 0.01}'], "not valid JSON")
    refused(capsys, run.main, [*space, "--points-to-evaluate", ""], "not valid JSON")  # once ignored
    refused(capsys, run.main, [*space, "--points-to-evaluate", str(tmp_path / "none.json")], "no such file")
    (tmp_path / "mine.json").write_text('[{"lr": 0.01, "batch_size": 100}]')
    refused(capsys, run.main, [*space, "--points-to-evaluate", str(tmp_path / "mine.json")],
            "configuration 1", "batch_size")
    assert not (tmp_path / "r").exists()
