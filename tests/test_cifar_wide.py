"""cifar_wide: the CIFAR trainer honours every parameter the space searches (checked in what it
trains and saves, not only in the config), and a smoke comparison over the space runs through
real Ray under every strategy."""

import inspect
import json
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT
import tuning
from tuning import spaces
from tuning.trial import data, trainer, trialstate

STRATEGIES = ("grid", "random", "asha", "hyperband", "bohb", "tpe")
TINY = dict(batch_size=64, epochs=1, width=4, seed=3)  # a second per run on 2 CPUs


@pytest.fixture(scope="module")
def tiny():
    """256 training and 64 validation images of noise: enough for a few real steps."""
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(320, 3, 32, 32, generator=g), torch.randint(0, 10, (320,), generator=g)
    return data.Split(x[:256], y[:256]), data.Split(x[256:], y[256:])


def _train(tiny, **kw):
    """(last metrics, last state) of one tiny run."""
    train, val = tiny
    states = []
    metrics = trainer.train_cifar(**{"lr": 1e-2, **TINY, **kw}, train=train, val=val,
                                  on_epoch=lambda m, s: states.append(s))
    return metrics, states[-1]


def test_the_trainer_takes_every_parameter_cifar_wide_searches():
    space = spaces.load("cifar_wide")
    taken = inspect.signature(trainer.train_cifar).parameters
    assert set(space.params) | set(space.fixed) <= set(taken)
    assert set(STRATEGIES) <= set(spaces.STRATEGIES)


def test_a_space_without_a_trainer_searches_only_the_cifar_trainers_keywords(tmp_path):
    """A space that names no trainer runs the CIFAR trainer: a parameter it does not take is refused
    when the space is declared, not in every trial after the data was made."""
    passed_by_tuning = {"epochs", "train", "val", "device", "state", "on_epoch", "seed", "rank", "world_size"}
    assert spaces.CIFAR_PARAMS == set(inspect.signature(trainer.train_cifar).parameters) - passed_by_tuning
    with pytest.raises(tuning.TuningError, match="'x' is not a parameter of the built-in CIFAR trainer"):
        tuning.search(None, spaces.Space(params={"lr": spaces.LogUniform(1e-4, 1e-2), "x": spaces.Uniform(0, 1)}),
                      results_dir=tmp_path / "r")
    with pytest.raises(tuning.TuningError, match="'dropout' is not a parameter"):
        tuning.search(None, spaces.Space(params={"lr": spaces.LogUniform(1e-4, 1e-2)}, fixed={"dropout": 0.1}),
                      results_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("kw, kind", [
    ({"optimizer": "sgd", "momentum": 0.83, "nesterov": False}, torch.optim.SGD),
    ({"optimizer": "sgd", "momentum": 0.95, "nesterov": True}, torch.optim.SGD),
    ({"optimizer": "adamw"}, torch.optim.AdamW),
])
def test_the_optimizer_trained_and_checkpointed_is_the_one_asked_for(tiny, tmp_path, monkeypatch, kw, kind):
    made = []
    real = trainer.make_optimizer
    monkeypatch.setattr(trainer, "make_optimizer", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    _, state = _train(tiny, weight_decay=3e-3, **kw)
    assert [type(o) for o in made] == [kind]
    trialstate.write_checkpoint(state, tmp_path)
    saved = trialstate.read_checkpoint(tmp_path)["optimizer"]
    group, moments = saved["param_groups"][0], next(iter(saved["state"].values()))
    assert group["weight_decay"] == 3e-3 and group["lr"] == 1e-2
    if kind is torch.optim.SGD:
        assert (group["momentum"], group["nesterov"]) == (kw["momentum"], kw["nesterov"])
        assert "momentum_buffer" in moments and "betas" not in group
    else:
        assert group["betas"] == (0.9, 0.999) and "momentum" not in group
        assert {"exp_avg", "exp_avg_sq"} <= set(moments)


def test_momentum_and_nesterov_change_sgds_steps(tiny):
    runs = [_train(tiny, optimizer="sgd", momentum=m, nesterov=n)[0]["train_loss"]
            for m, n in ((0.9, True), (0.9, False), (0.8, True))]
    assert len(set(runs)) == 3


def test_label_smoothing_changes_training_but_validation_stays_plain_cross_entropy(tiny):
    train, val = tiny
    plain, _ = _train(tiny)
    smoothed, state = _train(tiny, label_smoothing=0.15)
    assert smoothed["train_loss"] != plain["train_loss"]
    model = trainer.make_model(TINY["width"]).eval()
    model.load_state_dict(state["model"])
    with torch.no_grad():
        logits = model(val.x)
    # Near-uniform predictions on noise: the two losses differ by ~1e-3, far above float error.
    assert smoothed["loss"] == pytest.approx(F.cross_entropy(logits, val.y).item(), abs=1e-5)
    assert smoothed["loss"] != pytest.approx(F.cross_entropy(logits, val.y, label_smoothing=0.15).item(), abs=1e-4)


def test_augment_off_trains_on_the_images_as_they_are(tiny, monkeypatch):
    on, _ = _train(tiny)
    off, _ = _train(tiny, augment=False)
    assert off["train_loss"] != on["train_loss"]

    def refuse(*a, **k):
        raise AssertionError("augmented with augment=False")

    monkeypatch.setattr(trainer, "augment", refuse)
    _train(tiny, augment=False)
    with pytest.raises(AssertionError):
        _train(tiny, augment=True)


# ---------------------------------------------------------------- through real Ray

def _compare(experiment: str, out, *args, timeout: int) -> float:
    """`python -m tuning.compare EXPERIMENT --smoke` (2 CPUs, 2,000 synthetic training images); seconds."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tuning.compare", experiment, "--smoke", "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return time.monotonic() - started


def _checked_optimizers(run_dir) -> set[str]:
    """The optimizers of a run's trials, each checked against the trial's latest checkpoint: SGD's
    momentum and Nesterov are the trial's own, AdamW's trials have neither in their config."""
    seen = set()
    latest = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        if not row.get("diverged"):  # a diverged epoch writes no checkpoint
            latest[row["trial_id"]] = row
    for trial, row in latest.items():
        config = row["config"]
        state = trialstate.read_checkpoint(run_dir / "tune" / trial / row["checkpoint_dir_name"])
        group = state["optimizer"]["param_groups"][0]
        assert (group["lr"], group["weight_decay"]) == (config["lr"], config["weight_decay"]), trial
        if config["optimizer"] == "sgd":
            assert (group["momentum"], group["nesterov"]) == (config["momentum"], config["nesterov"]), trial
        else:
            assert "momentum" not in config and "nesterov" not in config, trial
            assert "betas" in group and "momentum" not in group, trial
        seen.add(config["optimizer"])
    assert seen, f"no trial of {run_dir.name} left a checkpoint"
    return seen


@pytest.mark.slow  # a CIFAR comparison through Ray; the optimizer tests above train for real in the default suite
@pytest.mark.timeout(900)
def test_a_bohb_smoke_run_trains_each_trial_with_its_own_optimizer(tmp_path):
    # experiments/cifar_wide's smoke, BOHB alone, on one full training's worth of epochs (three
    # trials of one epoch) instead of two: every strategy at the full smoke size takes minutes (below).
    (tmp_path / "cifar_wide_bohb.py").write_text(
        "import dataclasses\nfrom experiments.cifar_wide import EXPERIMENT as WIDE\n"
        "EXPERIMENT = dataclasses.replace(WIDE, strategies=('bohb',))\n")
    _compare(str(tmp_path / "cifar_wide_bohb"), tmp_path / "out", "--budget", "1", timeout=840)
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert set(runs["strategy"]) == {"bohb"} and runs["loss"].notna().all()
    _checked_optimizers(tmp_path / "out" / "runs" / "bohb-s0")


@pytest.mark.slow  # 14 min on the 2-core machine while other runs loaded it: make test-all
@pytest.mark.timeout(2400)
def test_a_smoke_comparison_completes_under_every_strategy(tmp_path):
    _compare("experiments/cifar_wide", tmp_path, timeout=2340)
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert set(runs["strategy"]) == set(STRATEGIES)
    assert (runs.groupby("strategy")["training_iteration"].count() > 0).all()
    assert (tmp_path / "report.md").exists()
    seen = set().union(*(_checked_optimizers(tmp_path / "runs" / f"{s}-s0") for s in STRATEGIES))
    assert seen == {"adamw", "sgd"}
