"""The cheaper experiment snapshot (tuning/backend/snapshots.py), on a real local Ray and a plain
tune.run: a snapshot on every step where a trial changed, none on the idle steps between, and a
file Tune reads back."""

import time

import pytest
from ray import tune
from ray.tune.execution.tune_controller import TuneController

from tuning.backend import snapshots


def _sleepy(config):
    for i in range(3):
        time.sleep(0.3)  # several of Tune's 0.1 s event waits pass between two results
        tune.report({"i": i, "x": config["x"]})


class _Steps(tune.Callback):
    def __init__(self):
        self.result_steps, self.last_step = set(), 0

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.result_steps.add(iteration)

    def on_step_end(self, iteration, trials, **info):
        self.last_step = iteration


@pytest.fixture
def every_step(monkeypatch):
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "0")  # as tuning.run sets it
    monkeypatch.setenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")


def test_a_snapshot_follows_every_step_with_a_result_and_skips_idle_ones(ray_here, tmp_path, monkeypatch,
                                                                          every_step):
    writes = []
    write = snapshots._save_to_dir

    def counted(self):
        writes.append(self._iteration)  # the step's number, as Tune hands it to callbacks
        write(self)

    monkeypatch.setattr(snapshots, "_save_to_dir", counted)
    steps = _Steps()
    original = TuneController.checkpoint
    with snapshots.cheaper():
        tune.run(_sleepy, name="snap", config={"x": tune.uniform(0, 1)}, num_samples=4,
                 resources_per_trial={"cpu": 1}, storage_path=str(tmp_path), callbacks=[steps], verbose=0,
                 reuse_actors=True)
    assert TuneController.checkpoint is original  # put back after the search

    assert steps.result_steps, "no result reached the callback"
    missed = steps.result_steps - set(writes)
    assert not missed, f"steps with a result but no snapshot: {sorted(missed)}"
    # Tune alone writes one on every step; 12 results over ~2 s of 0.1 s steps leave most steps idle.
    assert len(writes) < steps.last_step / 2, (len(writes), steps.last_step)

    analysis = tune.ExperimentAnalysis(str(tmp_path / "snap"))
    assert len(analysis.trials) == 4
    assert {t.status for t in analysis.trials} == {"TERMINATED"}
    assert [t.last_result["training_iteration"] for t in analysis.trials] == [3, 3, 3, 3]


def test_nested_and_ended_blocks_leave_tune_as_it_was():
    original = TuneController.checkpoint, TuneController.save_to_dir
    with snapshots.cheaper():
        with snapshots.cheaper():
            assert TuneController.checkpoint is not original[0]
        assert TuneController.checkpoint is not original[0]  # the outer search still runs
    assert (TuneController.checkpoint, TuneController.save_to_dir) == original


def test_the_snapshot_text_is_what_json_dumps_writes_with_strings_escaped_once():
    import json

    from ray.tune.utils.serialization import TuneFunctionEncoder

    trial = ('{\n  "config": {"lr": 0.01, "name": "a \\"quoted\\" \\u00e9 name"}\n}', '{"last_result": {}}')
    other = ('{"trial_id": "b"}', '{"last_result": {"loss": 0.5}}')
    runner, stats = {"_iteration": 7, "_session_str": "s", "nested": [1, 2.5, None]}, {"start_time": 1.5}
    cache = {}
    for trial_data in ([trial, other], [trial], [trial, other]):
        want = json.dumps({"trial_data": [list(p) for p in trial_data], "runner_data": runner, "stats": stats},
                          cls=TuneFunctionEncoder)
        assert "".join(snapshots.state_chunks(trial_data, runner, stats, cache)) == want
        assert set(cache) == {s for p in trial_data for s in p}  # only this snapshot's strings are kept
    cache[trial[0]] = '"stale"'
    assert '"stale"' in snapshots.state_chunks([trial], runner, stats, cache)  # a cached string is not escaped again
