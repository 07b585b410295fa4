"""Search-strategy logic without training: seeds, BOHB's proposals, the BOHB-safe reporter."""

from pathlib import Path

import numpy as np
import pytest

from tuning import backend, results, spaces


def _strategy(name: str, strategy: str, max_epochs: int, seed: int):
    """(config, search_alg, scheduler) as tuning.run builds them."""
    from tuning.backend import strategies

    spec = backend.RunSpec(space=spaces.load(name), strategy=strategy, num_samples=6, max_epochs=max_epochs,
                           seed=seed, cpus_per_trial=1, gpus_per_trial=0, source=None, results_dir=Path("."))
    return strategies.build(spec)


def _random_configs(seed, n=6):
    from ray.tune.experiment import Experiment

    config, search, _ = _strategy("cifar_asha", "random", 3, seed)
    search.add_configurations([Experiment("x", lambda c: None, config=config, num_samples=n)])
    out = []
    while (trial := search.next_trial()) is not None:
        out.append(trial.config)
    return out


def _bohb_configs(seed, n=30):
    """Drive TuneBOHB with a toy objective through Hyperband budgets, so that its KDE model,
    not only its random draws, proposes configurations."""
    _, search, _ = _strategy("cifar_bohb", "bohb", 9, seed)
    search = search.searcher
    out = []
    for i in range(n):
        cfg = search.suggest(f"t{i}")
        out.append(cfg)
        loss = abs(np.log10(cfg["lr"]) + 2.5) + cfg["batch_size"] / 1000
        for budget in (1, 3):  # what the Hyperband scheduler hands the model at each rung
            search.observe(f"t{i}", budget, {"loss": loss / budget})
        search.on_trial_complete(f"t{i}")
    assert search.bohber.kde_models, "BOHB never fitted its model: proposals were all random"
    return out


def test_random_search_same_seed_same_configs():
    assert _random_configs(0) == _random_configs(0)
    assert _random_configs(0) != _random_configs(1)


def test_bohb_same_seed_same_configs_including_model_based_ones():
    a, b, c = _bohb_configs(0), _bohb_configs(0), _bohb_configs(1)
    assert a == b
    assert a != c


def test_bohb_proposals_are_plain_python_values():
    for cfg in _bohb_configs(0, n=12):
        assert type(cfg["batch_size"]) is int and type(cfg["lr"]) is float


def test_recomputed_epochs_counts_restarts_from_scratch():
    resumed = [{"epoch": 1}, {"epoch": 2, "restored_from": 1}, {"epoch": 3, "restored_from": 1}]
    restarted = [{"epoch": 1}, {"epoch": 2}, {"epoch": 1}, {"epoch": 2}, {"epoch": 3}]
    assert results._recomputed(resumed) == 0
    assert results._recomputed(restarted) == 2


def test_reporter_survives_unscheduled_trials_and_keeps_error_rows(tmp_path, capsys, ray_2cpus):
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial
    from ray.tune.utils.log import set_verbosity

    from tuning.backend import tune_parts

    set_verbosity(1)  # as tune.run sets it for a run with progress: an earlier quiet run left it at 0
    storage = StorageContext(storage_path=str(tmp_path), experiment_dir_name="exp")
    pending = Trial("train_cifar", config={"lr": 1e-3, "batch_size": 64}, storage=storage, stub=True)
    failed = Trial("train_cifar", config={"lr": 1e-2, "batch_size": 128}, storage=storage, stub=True)
    failed.init_local_path()
    failed.run_metadata.error_filename = "error.txt"
    failed.set_status(Trial.ERROR)
    assert pending.storage.trial_dir_name is None  # the state that crashed Ray's own CLIReporter
    with pytest.raises(RuntimeError, match="trial_dir_name"):
        _ = pending.error_file

    tune_parts.reporter(spaces.load("cifar_bohb")).report([pending, failed], False)
    out = capsys.readouterr().out
    assert str(pending) in out and str(failed) in out  # both progress rows
    assert "Number of errored trials: 1" in out and "error.txt" in out  # the real error row stays


def test_a_sync_racing_tunes_own_temp_file_is_dropped_and_other_sync_errors_are_not():
    import logging

    from tuning.cli import quiet_libraries

    raced = ("Last sync command failed with the following error:\nTraceback (most recent call last):\n"
             "FileNotFoundError: /r/tune/driver_artifacts/.19ac-tmp-basic-variant-state-2026.json'. Detail: "
             "[errno 2] No such file or directory")
    others = [raced.replace("No such file or directory", "Access Denied"),  # a real failure stays
              "Last sync command failed: /r/tune/experiment_state.json: No such file or directory"]
    # Through the logger the syncer uses: its records propagate to the "ray" logger's handlers
    # (Ray's own, which does not propagate further), and the filter must sit on those.
    shown = []
    keep = logging.Handler()
    keep.emit = lambda record: shown.append(record.getMessage())
    ray_logger = logging.getLogger("ray")
    ray_logger.addHandler(keep)
    try:
        quiet_libraries()
        for msg in [raced, *others]:
            logging.getLogger("ray.train._internal.syncer").warning(msg)
    finally:
        ray_logger.removeHandler(keep)
    assert shown == others


@pytest.mark.parametrize("strategy", [*spaces.STRATEGIES, "bench"])  # bench: tuning.bench's pause after every result
def test_every_scheduler_holds_a_spent_time_budget(strategy):
    """StopWhenSpent stops a timed run only once the scheduler's gate has held the waiting trials:
    a scheduler without the gate would never let it stop."""
    from tuning.backend import strategies
    from tuning.backend.budget import TimeBudget, TimeGate

    spec = backend.RunSpec(space=spaces.load("cifar_asha"), strategy="random" if strategy == "bench" else strategy,
                           num_samples=6, max_epochs=3, seed=0, cpus_per_trial=1, gpus_per_trial=0, source=None,
                           results_dir=Path("."), pause_every_result=strategy == "bench")
    budget = TimeBudget(10.0)
    scheduler = strategies.build(spec, budget)[2]
    assert isinstance(scheduler, TimeGate) and scheduler.budget is budget
