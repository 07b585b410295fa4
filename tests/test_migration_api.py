"""What a user coming from Ray Tune or Optuna reaches for (issue 40): the names the docs use, the
refusals that point to our way, JSON values in files, conditional parameters, choices of any JSON
value, the best trial's checkpoint, tracebacks kept in the results folder, MLflow's times and Tune's
trial names. Real Ray, real runs, no mocks."""

import importlib
import json
import re
from pathlib import Path

import pytest

import tuning
from tuning import spacejson, spaces

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# ---------------------------------------------------------------- 1: every name the docs use exists

def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_every_name_the_readme_and_docs_use_from_tuning_exists():
    used = set()
    for path in [*DOCS, *sorted((ROOT / "examples").glob("*.py"))]:
        text = path.read_text()
        for names in re.findall(r"from tuning import ([A-Za-z_, ]+)", text):
            used |= {(path.name, n.strip()) for n in names.split(",") if n.strip()}
        code = text if path.suffix == ".py" else "\n".join(_python_blocks(text))
        used |= {(path.name, n) for n in re.findall(r"\btuning\.([A-Za-z_]\w*)", code)}
    assert used, "the docs name nothing from tuning: the pattern is wrong"
    missing = []
    for where, name in sorted(used):
        if not hasattr(tuning, name):
            try:
                importlib.import_module(f"tuning.{name}")  # a module: tuning.run, tuning.report
            except ImportError:
                missing.append(f"{where}: tuning.{name}")
    assert not missing


def test_every_parameter_type_the_readme_lists_is_exported_from_tuning():
    readme = (ROOT / "README.md").read_text()
    for name in spaces.PARAM_TYPES:
        assert f"`{name}`" in readme
        assert getattr(tuning, name) is spaces.PARAM_TYPES[name] and name in tuning.__all__
    from tuning import IntLogUniform  # noqa: F401  what issue 40's user wrote first


# ---------------------------------------------------------------- 2: log=True points to LogUniform

@pytest.mark.parametrize("make, twin", [
    (lambda: tuning.Uniform(1e-4, 1e-1, log=True), "LogUniform(0.0001, 0.1)"),
    (lambda: tuning.IntUniform(8, 256, log=True), "IntLogUniform(8, 256)"),
    (lambda: tuning.LogUniform(0.1, 1.0, log=False), "Uniform(0.1, 1.0)"),
    (lambda: tuning.IntLogUniform(8, 256, log=False), "IntUniform(8, 256)"),
])
def test_log_keyword_is_refused_naming_the_type_to_use(make, twin):
    with pytest.raises(tuning.SpaceError) as err:
        make()
    assert twin in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, tuning.TuningError)


def test_log_keyword_saying_what_the_type_is_anyway_is_accepted():
    assert tuning.Uniform(0, 1, log=False) == tuning.Uniform(0, 1)
    assert tuning.LogUniform(1e-3, 1, log=True) == tuning.LogUniform(1e-3, 1)
    assert "log" not in spacejson.declarations({"lr": tuning.LogUniform(1e-3, 1, log=True)})["lr"]  # run.json as before


@pytest.mark.parametrize("make, says", [  # each a TypeError (unexpected keyword) before
    (lambda: tuning.Uniform(0, 1, step=0.25), "Uniform(0, 1, step=0.25): values on a grid are a Choice here: "
                                              "Choice([0, 0.25, 0.5, 0.75, 1])"),
    (lambda: tuning.IntUniform(0, 10, step=2), "Choice([0, 2, 4, 6, 8, 10])"),
    (lambda: tuning.Uniform(0, 1, q=0.5), "Uniform(0, 1, q=0.5): values on a grid are a Choice here: Choice([0, 0.5, 1])"),
    (lambda: tuning.IntUniform(3, 3), "a value that does not vary is fixed={'name': 3}"),
    (lambda: tuning.Space(params=[tuning.Uniform(0, 1)]), "params= takes a dict from each parameter's name"),
])
def test_steps_a_constant_range_and_a_list_of_params_are_refused_naming_the_fix(make, says):
    with pytest.raises(tuning.SpaceError) as err:
        make()
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("kw, says", [
    ("n_trials", "search() takes no n_trials=, a name from Optuna or Ray Tune: give num_samples="),
    ("timeout", "give time_budget="), ("direction", "give objectives="), ("scheduler", "give strategy="),
    ("resources_per_trial", "give cpus_per_trial="),
    ("trials", "search() takes no trials=; its keywords are address, constraints, cpus_per_trial,"),
])
def test_an_optuna_or_ray_keyword_is_told_ours(kw, says):
    """Each was Python's TypeError 'unexpected keyword argument', naming nothing to give instead."""
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(None, "counting_ones", **{kw: 5})
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("flag, says", [("--n-trials", "give --num-samples"), ("--timeout", "give --time-budget"),
                                        ("--direction", "give --objective NAME:min"), ("--sampler", "give --strategy")])
def test_an_optuna_or_ray_flag_is_told_ours(capsys, flag, says):
    from cli_helpers import refused
    from tuning import run

    refused(capsys, run.main, ["--space", "counting_ones", flag, "5"],
            f"unrecognized arguments: {flag} 5: a name from Optuna or Ray Tune; {says}")


# ---------------------------------------------------------------- 3: numpy values in files as JSON

def keeps_weights(*, lr, offsets, scale, count, epochs, state=None, on_epoch):
    """Its state is the weights of every epoch so far; its fixed settings are numpy values."""
    weights = state["weights"] if state else []
    for e in range(len(weights), epochs):
        weights = [*weights, lr * (e + 1)]
        loss = abs(lr - 0.3) * float(scale * offsets.sum()) / count + 1 / (e + 1)
        on_epoch({"loss": loss}, {"weights": weights, "epoch": e + 1})


@pytest.fixture(scope="module")
def weights_run(ray_here, tmp_path_factory):
    """(result, Tune's progress table as printed): a grid of 3 trials of 2 epochs."""
    import contextlib
    import io

    import numpy as np

    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0, grid=3)}, trainer=keeps_weights, metric="loss",
                         fixed={"offsets": np.array([0.5, 1.5]), "scale": np.float32(2.0), "count": np.int64(3)},
                         max_epochs=2, gpus_per_trial=0)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = tuning.search(None, space, strategy="grid", results_dir=tmp_path_factory.mktemp("weights") / "r")
    return result, out.getvalue()


def test_numpy_values_in_fixed_are_written_as_json_lists_and_numbers(weights_run):
    result, _ = weights_run
    assert result.status == "finished" and result.succeeded == 3  # the trainer got the arrays themselves
    expected = {"offsets": [0.5, 1.5], "scale": 2.0, "count": 3}
    run_json = json.loads((result.results_dir / "run.json").read_text())
    assert run_json["fixed"] == expected and run_json["declaration"]["fixed"] == expected
    assert json.loads((result.results_dir / "best_config.json").read_text())["fixed"] == expected

# ---------------------------------------------------------------- 4: a conditional parameter needs a default

def no_default_momentum(*, optimizer, lr, momentum, epochs, state=None, on_epoch):
    """momentum exists under sgd only, but the trainer has no default for it: every adamw trial
    would fail with TypeError."""


SGD_ONLY = {"optimizer": tuning.Choice(["adamw", "sgd"]), "lr": tuning.LogUniform(1e-3, 1e-1),
            "momentum": tuning.Uniform(0.8, 0.99, when={"optimizer": "sgd"})}


def test_a_trainer_without_a_default_for_a_conditional_parameter_is_refused_before_any_trial(tmp_path):
    space = tuning.Space(params=SGD_ONLY, trainer=no_default_momentum, max_epochs=2, gpus_per_trial=0)
    with pytest.raises(tuning.TuningError) as err:
        tuning.search(None, space, strategy="random", results_dir=tmp_path / "r")
    line = str(err.value)
    assert "momentum" in line and "default" in line and "optimizer is 'sgd'" in line and "\n" not in line
    assert not (tmp_path / "r").exists()  # refused before anything was written, or Ray started


def test_the_cli_refuses_it_with_exit_2_and_one_line(tmp_path, capsys):
    from cli_helpers import refused
    from tuning import run

    space = tmp_path / "space.py"
    space.write_text(
        "from tuning import Choice, LogUniform, Space, Uniform\n\n"
        "def train(*, optimizer, lr, momentum, epochs, state=None, on_epoch):\n    pass\n\n"
        "SPACE = Space(params={'optimizer': Choice(['adamw', 'sgd']), 'lr': LogUniform(1e-3, 1e-1),\n"
        "                      'momentum': Uniform(0.8, 0.99, when={'optimizer': ['sgd']})}, trainer=train)\n")
    refused(capsys, run.main, ["--space", str(space), "--results-dir", str(tmp_path / "r")], "momentum", "default")
    assert not (tmp_path / "r").exists()


def test_a_default_for_it_passes_the_check():
    from tuning import contract

    def train(*, optimizer, lr, momentum=None, epochs, state=None, on_epoch):
        pass

    contract.check_signature(train, "train", list(SGD_ONLY), [], conditional={"momentum": {"optimizer": ("sgd",)}})


# ---------------------------------------------------------------- 5: a Choice of any JSON value

ARCHS = [{"layers": 1, "width": 8}, {"layers": 2, "width": 16}]  # settings chosen together, as Ray users do
SHAPES = [[1, 2], [3, 4], None]  # declared as (1, 2), [3, 4], None: a tuple arrives as the list it is in files


def chooses(*, arch, shape, lr, epochs, state=None, on_epoch, dropout=None):
    """A trainer of a choice of dicts, and of lists or None; dropout exists under the two-layer arch
    only. A value it was not declared fails its trial."""
    if arch not in ARCHS or shape not in SHAPES or (dropout is None) == (arch["layers"] == 2):
        raise TypeError(f"arch {arch!r}, shape {shape!r}, dropout {dropout!r}")
    for e in range(state["epoch"] if state else 0, epochs):
        loss = lr + 0.1 * arch["layers"] + (0.05 if shape is None else 0.01 * sum(shape)) + (dropout or 0) + 1 / (e + 1)
        on_epoch({"loss": loss}, {"epoch": e + 1})


def choice_space(**kw) -> tuning.Space:
    params = {"arch": tuning.Choice(ARCHS), "shape": tuning.Choice([(1, 2), [3, 4], None]),
              "lr": tuning.Uniform(0.0, 1.0, grid=1),
              "dropout": tuning.Uniform(0.0, 0.5, grid=1, when={"arch": ARCHS[1]})}
    settings = dict(params=params, trainer=chooses, metric="loss", mode="min", num_samples=6, max_epochs=3,
                    reduction_factor=3, gpus_per_trial=0)
    return tuning.Space(**{**settings, **kw})


def _check_choice_run(result, folder: Path):
    import pandas as pd

    assert result.status == "finished"
    assert (result.trials["status"] == "TERMINATED").all(), result.trials[["status", "error"]]  # no value was wrong
    # pandas reads a CSV's "null" (a chosen None) as NaN unless told to keep the text
    for table in (pd.read_csv(folder / "trials.csv", keep_default_na=False), pd.read_parquet(folder / "trials.parquet"),
                  pd.read_csv(folder / "epochs.csv", keep_default_na=False)):
        assert all(json.loads(cell) in ARCHS for cell in table["arch"])  # JSON text, read back with json.loads
        assert all(json.loads(cell) in SHAPES for cell in table["shape"])  # a chosen None is "null"
    best = json.loads((folder / "best_config.json").read_text())
    assert best["config"]["arch"] in ARCHS and best["config"] == result.best.config
    run_json = json.loads((folder / "run.json").read_text())
    assert run_json["declaration"]["params"]["shape"]["values"] == SHAPES
    assert result.report is not None and "arch" in (folder / "report.md").read_text()


# grid: choice_grid_run below; tpe: its warm-started run below.
@pytest.mark.parametrize("strategy", ["bohb", *(pytest.param(s, marks=pytest.mark.slow)
                                               for s in ("tpe", "random", "asha", "hyperband", "adaptive"))])
def test_a_choice_of_dicts_lists_and_none_runs_under_every_strategy(ray_here, tmp_path, strategy):
    """Ray users pass tune.choice a list of dicts (a set of model settings); ConfigSpace (bohb,
    adaptive) and Optuna (tpe) take scalar categories only, so they see positions and the trainer
    gets the values."""
    result = tuning.search(None, choice_space(), strategy=strategy, seed=0, results_dir=tmp_path / "r")
    _check_choice_run(result, tmp_path / "r")


@pytest.fixture(scope="module")
def choice_grid_run(ray_here, tmp_path_factory):
    folder = tmp_path_factory.mktemp("choice") / "grid"
    return tuning.search(None, choice_space(), strategy="grid", seed=0, results_dir=folder)


def test_a_choice_of_dicts_lists_and_none_runs_under_grid(choice_grid_run):
    _check_choice_run(choice_grid_run, choice_grid_run.results_dir)
    assert len(choice_grid_run.trials) == 6  # 2 archs x 3 shapes, dropout under one arch only


@pytest.mark.parametrize("strategy", ["random", "tpe", pytest.param("bohb", marks=pytest.mark.slow)])
def test_a_warm_start_carries_choice_values(choice_grid_run, tmp_path, strategy):
    """The earlier run's best configuration runs first (random: through Tune's points_to_evaluate,
    which would take its dicts for nested settings; tpe: as Optuna's enqueued positions), or feeds
    BOHB's model (as positions)."""
    top = {} if strategy == "bohb" else {"warm_start_top": 1}  # bohb's model takes every earlier result
    result = tuning.search(None, choice_space(), strategy=strategy, seed=1, num_samples=3, max_epochs=3,
                           warm_start=[choice_grid_run.results_dir], results_dir=tmp_path / "w", **top)
    _check_choice_run(result, tmp_path / "w")
    if strategy != "bohb":
        w = tmp_path / "w"
        assert json.loads((w / "run.json").read_text())["warm_start"]["configs"] == [choice_grid_run.best.config]
        ran = [row["config"] for row in map(json.loads, (w / "results.jsonl").read_text().splitlines())]
        assert choice_grid_run.best.config in ran


def schedules(*, schedule, epochs, state=None, on_epoch):
    for e in range(state["epoch"] if state else 0, epochs):
        on_epoch({"loss": {None: 1.0, "cosine": 0.5, 3: 0.7, True: 0.9}[schedule] / (e + 1)}, {"epoch": e + 1})


def test_a_choice_of_strings_numbers_and_bools_keeps_its_tables(ray_here, tmp_path):
    """A Choice mixing kinds, as Optuna users write suggest_categorical: one parquet column cannot
    hold a string and a number, so the tables hold every value as JSON text, and a replay of the
    run reads each back as the value it was."""
    import pandas as pd

    from tuning.compare import recorded

    values = [None, "cosine", 3, True]
    space = tuning.Space(params={"schedule": tuning.Choice(values)}, trainer=schedules, metric="loss", mode="min",
                         max_epochs=2, gpus_per_trial=0)
    result = tuning.search(None, space, strategy="grid", seed=0, results_dir=tmp_path / "r")
    assert result.status == "finished" and len(result.trials) == 4
    assert result.best.config == {"schedule": "cosine"}
    for table in (pd.read_parquet(tmp_path / "r" / "trials.parquet"), pd.read_parquet(tmp_path / "r" / "epochs.parquet"),
                  pd.read_csv(tmp_path / "r" / "trials.csv", keep_default_na=False)):
        assert sorted(map(json.loads, table["schedule"]), key=str) == sorted(values * (len(table) // 4), key=str)
    replayed = recorded.read(str(tmp_path / "r"))
    assert sorted((c["schedule"] for c in replayed.configs), key=str) == sorted(values, key=str)


def test_choice_values_are_json_values_kept_as_files_hold_them():
    choice = tuning.Choice([{"layers": 2}, (3, 3), None])
    assert choice.values == ({"layers": 2}, [3, 3], None)  # a tuple as the list run.json holds
    assert spaces.contains(choice, (3, 3)) and spaces.contains(choice, [3, 3]) and not spaces.contains(choice, [3])
    assert spacejson.from_declarations(spacejson.declarations({"c": choice}))["c"] == choice  # run.json and back
    assert choice.by_position and not tuning.Choice([1, "a", 2.5, False]).by_position
    assert spaces.from_positions({"c": choice}, spaces.to_positions({"c": choice}, {"c": [3, 3]})) == {"c": [3, 3]}
    with pytest.raises(tuning.SpaceError, match="distinct"):
        tuning.Choice([{"a": 1}, {"a": 1}])
    for bad in ({"a", "b"}, {1: "a"}):
        with pytest.raises(tuning.SpaceError, match="not a JSON value"):
            tuning.Choice([bad, "other"])


# ---------------------------------------------------------------- 6 and 9: the best checkpoint, trial names

def test_best_checkpoint_is_the_best_trials_last_state(weights_run):
    result, _ = weights_run
    lr = result.best.config["lr"]
    assert lr == 0.5  # nearest 0.3 of 0, 0.5, 1
    checkpoint = result.best.checkpoint
    assert checkpoint.is_relative_to(result.results_dir / "tune" / result.best.trial_id)
    assert tuning.load_checkpoint(checkpoint) == {"weights": [lr, 2 * lr], "epoch": 2}  # its last epoch's
    best = json.loads((result.results_dir / "best_config.json").read_text())
    assert result.results_dir / best["checkpoint"] == checkpoint  # relative to the results dir


def test_trials_are_named_after_the_trainer_in_tunes_table(weights_run):
    result, table = weights_run
    assert f"keeps_weights_{result.best.trial_id}" in table and "train_function" not in table


def test_a_trial_that_kept_no_checkpoint_has_none_and_a_benchmark_names_its_trials(ray_here, tmp_path, capsys):
    result = tuning.search(None, "mf_hartmann", strategy="random", num_samples=2, max_epochs=2,
                           results_dir=tmp_path / "r")
    assert result.best is not None and result.best.checkpoint is None
    assert json.loads((tmp_path / "r" / "best_config.json").read_text())["checkpoint"] is None
    table = capsys.readouterr().out
    assert f"mf_hartmann_{result.best.trial_id}" in table and "SyntheticBenchmark" not in table


def test_load_checkpoint_of_a_folder_without_state_says_so(tmp_path):
    # Bad input, so a TuningError (it was a bare FileNotFoundError, which it still is too); None is
    # what result.best.checkpoint holds where the trial kept no state.
    # A folder that is not there (best_config.json's relative "checkpoint", read from elsewhere) was
    # said to hold no state.pt, as if it existed.
    for given, says in ((tmp_path, "holds no state.pt or state.pkl: give a trial's checkpoint folder"),
                        (None, "got None: result.best.checkpoint is None where the trial kept no state"),
                        ("tune/t1/checkpoint_000003", "no checkpoint folder at .*tune/t1/checkpoint_000003: give "
                                                      "result.best.checkpoint, or best_config.json's checkpoint joined")):
        with pytest.raises(tuning.TuningError, match=says) as caught:
            tuning.load_checkpoint(given)
        assert isinstance(caught.value, FileNotFoundError)


# ---------------------------------------------------------------- 7: tracebacks kept in the results folder

def fails(*, lr, epochs, state=None, on_epoch):
    raise ValueError(f"shapes (32, 10) and (32, 3) do not match for lr={lr}")


def test_an_errored_trials_traceback_is_copied_into_the_results_folder(ray_here, tmp_path):
    import pandas as pd

    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0, grid=2)}, trainer=fails, max_epochs=1,
                         gpus_per_trial=0)
    result = tuning.search(None, space, strategy="grid", max_failures=0, results_dir=tmp_path / "r")
    trials = pd.read_csv(tmp_path / "r" / "trials.csv", dtype={"trial_id": str})
    assert (trials["status"] == "ERROR").all() and len(trials) == 2
    for _, row in trials.iterrows():
        assert row["error_file"] == f"errors/{row['trial_id']}.txt"  # relative to the results dir
        traceback = (tmp_path / "r" / row["error_file"]).read_text()
        assert "Failure # 1" in traceback and "ValueError: shapes (32, 10)" in traceback
        assert row["error"].startswith("ValueError: shapes (32, 10)")
    assert str(tmp_path / "r" / "errors") in result.summary()  # the summary names where it is


# ---------------------------------------------------------------- 8: MLflow's times in milliseconds

def sleeps(*, lr, epochs, state=None, on_epoch):
    import time

    for e in range(state["epoch"] if state else 0, epochs):
        time.sleep(0.2 + 0.1 * lr)
        on_epoch({"loss": lr}, {"epoch": e + 1})


def test_mlflow_child_runs_carry_each_trials_start_and_end_in_milliseconds(ray_here, tmp_path):
    pytest.importorskip("mlflow", reason="make test installs the mlflow extra")
    from mlflow.tracking import MlflowClient

    space = tuning.Space(params={"lr": tuning.Uniform(0.0, 1.0, grid=2)}, trainer=sleeps, metric="loss",
                         max_epochs=2, gpus_per_trial=0)
    folder = tmp_path / "r"
    tuning.search(None, space, strategy="grid", results_dir=folder, mlflow=True, mlflow_experiment="times")
    rows = {}
    for row in map(json.loads, (folder / "results.jsonl").read_text().splitlines()):
        rows.setdefault(row["trial_id"], []).append(row)
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    exp = client.get_experiment_by_name("times")
    children = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 2
    for run in children:
        mine = rows[run.data.tags["trial_id"]]
        first, last = mine[0], mine[-1]
        assert run.info.start_time == round(1000 * (first["ended_at"] - first["time_this_iter_s"]))
        assert run.info.end_time == round(1000 * last["ended_at"])
        # The span holds both epochs' sleeps. Not Tune's time_this_iter_s: Tune times an iteration
        # from a point of its own, and on a loaded machine the two drift apart (916 ms of span
        # against 1046 ms of Tune's time seen in CI), while the sleeps are a floor that cannot move
        lr = float(run.data.params["lr"])
        assert run.info.end_time - run.info.start_time >= 1000 * 2 * (0.2 + 0.1 * lr) - 1
        assert run.info.start_time % 1000 or run.info.end_time % 1000  # milliseconds, not whole seconds
