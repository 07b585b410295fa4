"""A space that names no strategy (spaces.AUTO) runs the one the comparisons favour for its trainer
(tuning.inputs.auto_strategy, docs/strategies.md): adaptive where the trainer reports every epoch,
tpe where each trial is one report, asha where the space walks a grid over some parameters, bohb
for several objectives."""

import json

import tuning
from tuning import inputs, spaces
from tuning.spaces import Choice, Space, Uniform

PARAMS = {"lr": Uniform(0.0, 1.0), "bs": Choice([16, 32])}


def returns_once(*, lr, bs, epochs):
    """A trainer that returns its metrics: one report per trial."""
    return {"loss": abs(lr - 0.3) + bs / 1000}


def test_a_space_without_a_strategy_gets_one_for_its_trainer():
    per_epoch = Space(params=PARAMS, trainer="user_trainers:scored")
    assert per_epoch.strategy == spaces.AUTO
    assert inputs.auto_strategy(per_epoch, 9)[0] == "adaptive"
    assert inputs.auto_strategy(per_epoch, 1) == ("tpe", "one epoch: each trial is one report")
    assert inputs.auto_strategy(Space(params=PARAMS, trainer=returns_once), 9)[0] == "tpe"
    assert inputs.auto_strategy(per_epoch.replace(grid=["bs"]), 9)[0] == "asha"
    two = per_epoch.replace(objectives={"loss": "min", "latency_ms": "min"})
    assert inputs.auto_strategy(two, 9)[0] == "bohb"  # several objectives (docs/comparisons.md)
    assert inputs.auto_strategy(two, 1)[0] == "tpe"  # one report: MOTPE
    assert inputs.auto_strategy(per_epoch.replace(objectives={"loss": "min"}), 9)[0] == "adaptive"
    assert spaces.load("cifar_asha").strategy == "asha"  # a space that names one keeps it


def test_auto_runs_adaptive_and_run_json_records_which(ray_here, tmp_path):
    space = spaces.load("counting_ones").replace(strategy=spaces.AUTO)
    result = tuning.search(None, space, num_samples=9, max_epochs=9, results_dir=tmp_path / "r")
    assert result.status == "finished"
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert record["strategy"] == "adaptive" and record["declaration"]["strategy"] == spaces.AUTO


def test_auto_runs_a_trainer_that_returns_under_tpe(ray_here, tmp_path):
    space = Space(params=PARAMS, trainer=returns_once, num_samples=4, max_epochs=3, gpus_per_trial=0)
    result = tuning.search(None, space, results_dir=tmp_path / "r")
    assert result.status == "finished" and result.succeeded == 4
    assert json.loads((tmp_path / "r" / "run.json").read_text())["strategy"] == "tpe"
