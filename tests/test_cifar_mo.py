"""The CIFAR trainer's second objective (issue 41): its measured inference latency per image and its
parameter count, reported with every epoch; the depth knob cifar_mo searches, which leaves the
default net as it was; and cifar_mo's smoke run end to end through real Ray, whose front is the
non-dominated trials of what ran."""

import inspect
import json
import math
import time

import pandas as pd
import pytest
import torch
from torch import nn

from conftest import run_cli
from test_cifar_wide import tiny  # noqa: F401  (a fixture: 256 training and 64 validation images of noise)
from tuning import objectives, spaces
from tuning.trial import trainer

TINY = dict(lr=1e-2, batch_size=64, width=4, seed=3)  # about a second a run on 2 CPUs


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- the model

def test_depth_one_is_the_net_every_other_space_trains():
    default, explicit = trainer.make_model(16), trainer.make_model(16, depth=1)
    assert {k: v.shape for k, v in default.state_dict().items()} == {k: v.shape for k, v in explicit.state_dict().items()}
    for fn in (trainer.make_model, trainer.train_cifar):
        assert inspect.signature(fn).parameters["depth"].default == 1


def test_each_step_of_depth_adds_one_conv_and_batchnorm_per_block():
    # The three blocks run at 2w, 4w and 4w channels: a 3x3 conv without bias plus BatchNorm's two
    # vectors each.
    w = 8
    extra = sum(9 * c * c + 2 * c for c in (2 * w, 4 * w, 4 * w))
    counts = [_count(trainer.make_model(w, depth=d)) for d in (1, 2, 3)]
    assert counts[1] - counts[0] == extra == counts[2] - counts[1]
    with pytest.raises(ValueError, match="at least one convolution"):
        trainer.make_model(w, depth=0)


# ---------------------------------------------------------------- latency_ms

class Recorder(nn.Module):
    """Sleeps per image: long in the warm-up passes, 1 ms an image after; records how it was called."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, x):
        self.calls.append((self.training, torch.is_grad_enabled(), tuple(x.shape)))
        time.sleep((0.05 if len(self.calls) <= trainer.LATENCY_WARMUP else 0.001) * len(x))
        return x


def test_latency_is_per_image_in_eval_mode_without_gradients_after_the_warm_up():
    model = Recorder().train()
    x = torch.zeros(4, 3, 32, 32)
    ms = trainer.latency_ms(model, x, "cpu", precision="fp32")
    assert len(model.calls) == trainer.LATENCY_WARMUP + trainer.LATENCY_REPEATS
    assert all(call == (False, False, (4, 3, 32, 32)) for call in model.calls)
    # A timed pass sleeps 1 ms an image; a warm-up pass sleeps 50: the median of the timed ones
    # cannot be below the first, and is far below the second unless a warm-up were counted.
    assert 1.0 <= ms < 50.0


def test_every_epoch_reports_the_parameter_count_and_one_latency_measured_on_the_trained_model(tiny):
    train, val = tiny
    reports = []
    last = trainer.train_cifar(**TINY, depth=2, epochs=2, train=train, val=val,
                               on_epoch=lambda m, s: reports.append((m, s)))
    assert [m["num_params"] for m, _ in reports] == [_count(trainer.make_model(4, depth=2))] * 2
    latencies = {m["latency_ms"] for m, _ in reports}
    assert len(latencies) == 1 and next(iter(latencies)) > 0  # measured once, before the first epoch
    assert last["latency_ms"] in latencies
    # The checkpoint says its depth, so the test-set evaluation rebuilds the net that trained.
    state = reports[-1][1]
    assert state["depth"] == 2
    model = trainer.make_model(4, depth=2).to(memory_format=torch.channels_last)
    model.load_state_dict(state["model"])
    assert trainer.evaluate_test(state, val, width=4)["loss"] == pytest.approx(
        trainer.evaluate(model, val, "cpu")["loss"], rel=1e-6)


def test_a_diverged_epoch_still_reports_the_size_and_latency(tiny):
    # cifar_mo's objectives include latency_ms: a result without it would stop the whole run as a
    # trainer that never reports its objective (tuning.backend.trainables).
    train, val = tiny
    reports = []
    trainer.train_cifar(**{**TINY, "lr": 1e12}, optimizer="sgd", epochs=2, train=train, val=val,
                        on_epoch=lambda m, s: reports.append(m))
    assert reports[-1]["diverged"] and math.isnan(reports[-1]["loss"])
    assert reports[-1]["latency_ms"] > 0 and reports[-1]["num_params"] == _count(trainer.make_model(4))


# ---------------------------------------------------------------- the space

def test_cifar_mo_searches_capacity_against_measured_latency():
    space = spaces.load("cifar_mo")
    assert objectives.of(space) == {"accuracy": "max", "latency_ms": "min"}
    assert {"width", "depth"} <= set(space.params) and space.strategy in objectives.STRATEGIES
    taken = inspect.signature(trainer.train_cifar).parameters
    assert set(space.params) | set(space.fixed) <= set(taken)
    # Every metric the trainer reports on any device can be bounded: a parameter budget, say.
    bounded = space.replace(constraints={"num_params": ("<=", 3e5)})
    assert objectives.describe(bounded).endswith("subject to num_params <= 300000")


# ---------------------------------------------------------------- through real Ray

def _dominated(p: list, others: list) -> bool:
    return any(all(a <= b for a, b in zip(q, p)) and any(a < b for a, b in zip(q, p)) for q in others)


def test_the_smoke_run_keeps_the_front_of_accuracy_against_latency(tmp_path):
    """`tuning.run --space cifar_mo --smoke`, cut to 4 trials of one epoch (the smoke's 9 of 3
    epochs took minutes on the shared 2-core machine): synthetic CIFAR-format data, real Ray."""
    results = tmp_path / "results"
    proc = run_cli("--space", "cifar_mo", "--smoke", "--num-samples", "4", "--max-epochs", "1",
                   "--data-dir", str(tmp_path / "data"), "--results-dir", str(results))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Pareto front (accuracy max, latency_ms min)" in proc.stdout and "Traceback" not in proc.stderr
    trials = pd.read_csv(results / "trials.csv", dtype={"trial_id": str})
    assert len(trials) == 4 and (trials["status"] == "TERMINATED").all() and (trials["latency_ms"] > 0).all()
    for _, row in trials.iterrows():  # each trial's own net, not the default one
        assert row["num_params"] == _count(trainer.make_model(int(row["width"]), depth=int(row["depth"])))
    front = pd.read_csv(results / "pareto.csv", dtype={"trial_id": str})
    points = {r["trial_id"]: [-r["accuracy"], r["latency_ms"]] for _, r in trials.iterrows()}
    expected = {t for t, p in points.items() if not _dominated(p, [q for s, q in points.items() if s != t])}
    assert set(front["trial_id"]) == expected
    best = json.loads((results / "best_config.json").read_text())
    assert [p["trial_id"] for p in best["pareto"]] == list(front["trial_id"])
    assert best["trial_id"] == front.loc[front["accuracy"].idxmax(), "trial_id"]
