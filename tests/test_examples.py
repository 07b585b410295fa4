"""The examples run as a newcomer runs them (smoke-sized), from Python and from tuning.run, and the
template in docs/your-trainer.md is the file examples/template.py. The migration guides' own blocks:
tests/test_guides.py."""

import importlib.util
import json
import re
import runpy
import subprocess
import sys

import pandas as pd
import pytest

from conftest import ROOT

EXAMPLES = ROOT / "examples"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_digits_from_python_as_a_script(tmp_path):
    """python examples/digits_torch.py --smoke: tuning.search from a script, its trainer in __main__."""
    done = subprocess.run([sys.executable, str(EXAMPLES / "digits_torch.py"), "--smoke"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Best trial" in done.stdout and "accuracy" in done.stdout and "Traceback" not in done.stderr
    folder = next((tmp_path / "results").iterdir())
    assert folder.name.startswith("digits_torch-")  # the script's name, as tuning.run --space gives it (was train-)
    trials = pd.read_csv(folder / "trials.csv")
    assert {"accuracy", "best_accuracy", "loss", "best_loss"} <= set(trials.columns)
    assert trials["accuracy"].max() > 0.5  # digits learns something within 3 epochs at a sane lr


@pytest.mark.slow  # make test-all: a user's space file through tuning.run; the default suite runs digits
def test_gradient_boosting_from_tuning_run(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tuning.run", "--space", "examples/gradient_boosting.py", "--smoke",
                           "--results-dir", str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = pd.read_csv(tmp_path / "r" / "trials.csv")
    assert {"log_loss", "best_log_loss", "auc", "best_auc", "trees"} <= set(trials.columns)
    assert (trials["status"] == "TERMINATED").all() and (trials["trees"] == 10 * trials["epochs"]).all()
    # Smoke's 2 epochs of 10 trees, ASHA judging at the first (the space's first rung, 2, is past them)
    assert (trials["trees"] == 20).any() and trials["stopped_early"].any()
    assert "log_loss" in done.stdout and "Traceback" not in done.stderr
    # Its trainer came from the space file, by value: --add-samples finds it there again.
    more = subprocess.run([sys.executable, "-m", "tuning.run", "--resume", str(tmp_path / "r"), "--add-samples", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert more.returncode == 0, more.stderr[-3000:]
    assert len(pd.read_csv(tmp_path / "r" / "trials.csv")) == len(trials) + 2


def test_a_resumed_boosting_trial_goes_on_boosting(tmp_path):
    """The contract on its own, no Ray: a state handed back continues from its epoch, through a
    checkpoint written and read as a trial's is (a fitted model, not only tensors)."""
    from tuning.trial import trialstate as checkpoints

    gb = _module("gradient_boosting")
    params = dict(learning_rate=0.1, max_leaf_nodes=15, l2_regularization=0.0, min_samples_leaf=20)
    seen, states = [], []
    gb.train(**params, epochs=2, on_epoch=lambda m, s: (seen.append(m), states.append(s)))
    checkpoints.write_checkpoint(states[-1], tmp_path)
    restored = checkpoints.read_checkpoint(tmp_path)
    gb.train(**params, epochs=4, state=restored, on_epoch=lambda m, s: (seen.append(m), states.append(s)))
    assert [m["trees"] for m in seen] == [10, 20, 30, 40] and states[-1]["epoch"] == 4
    straight = []
    gb.train(**params, epochs=4, on_epoch=lambda m, s: straight.append(m))
    assert seen[-1]["log_loss"] == pytest.approx(straight[-1]["log_loss"])  # as if never paused


@pytest.mark.slow  # the same path as the digits example; the docs test below keeps the template honest
def test_the_template_runs_from_python(tmp_path):
    import tuning

    template = _module("template")
    result = tuning.search(template.train, template.SPACE, smoke=True, results_dir=tmp_path / "r")
    assert result.status == "finished" and result.best is not None and "mse" in result.best.metrics


def test_the_readme_trainer_keeps_the_contract():
    """The README's trainer, shortened from the template, as tuning checks it and calls it: its space
    builds, its signature passes, and a state handed back goes on as if never paused (no Ray)."""
    from tuning import contract

    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "def train(" in b)
    assert "tuning.search(train, SPACE)" in block and 'if __name__ == "__main__":' in block
    scope = {"__name__": "readme"}  # as `--space file.py` loads it: the space, and no search
    exec(compile(block, "README.md", "exec"), scope)
    train, space = scope["train"], scope["SPACE"]
    contract.check_signature(train, "train", list(space.params), list(space.fixed))
    paused, states, straight = [], [], []
    keep = lambda m, s: (paused.append(m), states.append(s))  # noqa: E731
    train(lr=0.1, weight_decay=1e-3, epochs=2, on_epoch=keep)
    train(lr=0.1, weight_decay=1e-3, epochs=4, state=states[-1], on_epoch=keep)
    train(lr=0.1, weight_decay=1e-3, epochs=4, on_epoch=lambda m, s: straight.append(m))
    assert len(paused) == 4 and states[-1]["epoch"] == 4 and space.metric in paused[-1]
    assert paused[-1]["mse"] == pytest.approx(straight[-1]["mse"])


def test_the_docs_template_is_examples_template():
    doc = (ROOT / "docs" / "your-trainer.md").read_text()
    block = re.search(r"<!-- examples/template.py -->\n```python\n(.*?)```", doc, re.S)
    assert block, "docs/your-trainer.md lost its template block"
    assert block.group(1) == (EXAMPLES / "template.py").read_text()


# The two ported examples of the migration guides (docs/from-ray-tune.md, docs/from-optuna.md), each
# run as `python examples/X.py --smoke` runs it, in this process and one Ray for both.

@pytest.fixture(scope="module")
def ray_once():
    from tuning import backend

    backend.start_ray(num_cpus=2)
    yield
    backend.stop_ray()


def _run_as_script(name: str, tmp_path, monkeypatch, capsys) -> str:
    path = EXAMPLES / f"{name}.py"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(path), "--smoke"])
    runpy.run_path(str(path), run_name="__main__")
    return capsys.readouterr().out


def test_from_ray_tune_tests_the_best_trials_checkpoint(tmp_path, monkeypatch, capsys, ray_once):
    """Ray's cifar10_pytorch.py, ported: ASHA, a checkpoint each epoch, then the best trial's
    weights loaded from result.best.checkpoint and tested on images no trial saw."""
    out = _run_as_script("from_ray_tune", tmp_path, monkeypatch, capsys)
    folder = next((tmp_path / "results").iterdir())
    best = json.loads((folder / "best_config.json").read_text())
    assert best["checkpoint"] and (folder / best["checkpoint"]).is_dir()
    assert f"Best trial config: {best['config']}" in out
    assert float(re.search(r"Best trial test set accuracy: ([\d.]+)", out)[1]) > 0.5  # chance is 0.1


def test_from_optuna_prunes_and_leaves_absent_layers_out(tmp_path, monkeypatch, capsys, ray_once):
    """optuna-examples' pytorch_simple.py, ported: the median rule, and the deeper layers' sizes
    only where n_layers makes them exist (when=)."""
    out = _run_as_script("from_optuna", tmp_path, monkeypatch, capsys)
    trials = pd.read_csv(next((tmp_path / "results").iterdir()) / "trials.csv")
    assert len(trials) == 8 and (trials["status"] == "TERMINATED").all()
    assert trials.loc[trials["n_layers"] == 1, ["n_units_l1", "dropout_l1"]].isna().all().all()
    assert trials.loc[trials["n_layers"] < 3, "n_units_l2"].isna().all()
    assert trials.loc[trials["n_layers"] == 3, ["n_units_l1", "n_units_l2"]].notna().all().all()
    assert "Number of pruned trials:" in out and "Best trial:" in out and "optimizer:" in out
