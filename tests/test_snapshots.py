"""The cheaper experiment snapshot (tuning/backend/snapshots.py), on a real local Ray and a plain
tune.run: a snapshot on every step where a trial changed, none on the idle steps between, and a
file Tune reads back. And tune.run's usage tag for callbacks, without importing integrations."""

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ray import tune
from ray.tune.execution.tune_controller import TuneController

from tuning.backend import snapshots


def _sleepy(config):
    for i in range(3):
        time.sleep(0.5)  # about five of Tune's 0.1 s event waits pass between two results
        tune.report({"i": i, "x": config["x"]})


class _Steps(tune.Callback):
    def __init__(self):
        self.last_step = 0

    def on_step_end(self, iteration, trials, **info):
        self.last_step = iteration


@pytest.fixture
def every_step(monkeypatch):
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "0")  # as tuning.run sets it
    monkeypatch.setenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")


def test_every_step_that_marked_a_trial_reaches_a_snapshot_and_idle_ones_are_skipped(ray_here, tmp_path, monkeypatch,
                                                                                     every_step):
    marked, writes = set(), []
    mark, write = TuneController._mark_trial_to_checkpoint, snapshots._save_to_dir

    def marking(self, trial):
        marked.add(self._iteration)  # the step's number, as Tune hands it to callbacks
        mark(self, trial)

    inodes, seen, staging = [], set(), []

    def counted(self):
        writes.append(self._iteration)
        write(self)
        staging[:] = [Path(self._storage.experiment_driver_staging_path)]
        inodes.append((staging[0] / self.experiment_state_file_name).stat().st_ino)

    def watch():  # what Tune's background copy to storage would list in the staging folder
        while not done.is_set():
            if staging and staging[0].is_dir():
                seen.update(os.listdir(staging[0]))
            time.sleep(0.0005)

    done = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    monkeypatch.setattr(TuneController, "_mark_trial_to_checkpoint", marking)
    monkeypatch.setattr(snapshots, "_save_to_dir", counted)
    steps = _Steps()
    original = TuneController.checkpoint
    logged = []
    heard = logging.Handler()
    heard.emit = lambda record: logged.append(record.getMessage())
    logging.getLogger("ray").addHandler(heard)  # Ray's logger: its records do not propagate further
    try:
        with snapshots.cheaper():
            # One trial at a time (2 CPUs each): between two results only idle steps.
            tune.run(_sleepy, name="snap", config={"x": tune.uniform(0, 1)}, num_samples=2,
                     resources_per_trial={"cpu": 2}, storage_path=str(tmp_path), callbacks=[steps], verbose=0,
                     reuse_actors=True)
    finally:
        logging.getLogger("ray").removeHandler(heard)
        done.set()
        watcher.join()
    assert TuneController.checkpoint is original  # put back after the search
    # Each snapshot's files are renamed into the folder Tune copies, never written there in place: a copy
    # running meanwhile takes each whole, and never lists a temporary file that is gone when it copies.
    assert len(inodes) > 1 and all(a != b for a, b in zip(inodes, inodes[1:])), inodes
    assert seen and not [name for name in seen if "tmp" in name], sorted(seen)
    # Without the stoppers tune.run was given: a resume put the pickled copy in place of the live ones.
    state = json.loads(max((tmp_path / "snap").glob("experiment_state-*.json")).read_text())
    assert "_stopper" not in state["runner_data"] and "_search_alg" not in state["runner_data"]
    # Tune's result files are off (every_step): its analysis no longer tries them and warns per trial.
    assert not [m for m in logged if "metrics for" in m], logged

    # Each marked step's trials reach a snapshot, then or at a later step: the next one is held back
    # until the driver has done snapshots.SHARE times the last one's work (milliseconds here).
    missed = {m for m in marked if not any(w >= m for w in writes)}
    assert not missed, f"steps that marked a trial but never reached a snapshot: {sorted(missed)}"
    skipped = set(range(steps.last_step)) - set(writes)
    assert len(skipped) >= 10, (sorted(writes), steps.last_step)  # Tune alone writes on every step

    analysis = tune.ExperimentAnalysis(str(tmp_path / "snap"))
    assert len(analysis.trials) == 2
    assert {t.status for t in analysis.trials} == {"TERMINATED"}
    assert [t.last_result["training_iteration"] for t in analysis.trials] == [3, 3]


def test_a_search_snapshots_through_the_cheaper_path(ray_here, tmp_path):
    from tuning import Space, Uniform, backend

    seen = []

    class Look(tune.Callback):
        def on_step_end(self, iteration, trials, **info):
            seen.append(TuneController.checkpoint is snapshots._checkpoint)

    space = Space(params={"lr": Uniform(0.0, 1.0)}, trainer="user_trainers:scored", metric="score", mode="max",
                  num_samples=2, max_epochs=2, gpus_per_trial=0)
    backend.run(backend.RunSpec(space=space, strategy="random", num_samples=2, max_epochs=2, seed=0,
                                cpus_per_trial=1, gpus_per_trial=0, source=None, results_dir=tmp_path,
                                progress=False, callbacks=[Look()]))
    assert seen and all(seen)
    assert TuneController.checkpoint is not snapshots._checkpoint


def test_nested_and_ended_blocks_leave_tune_as_it_was():
    import ray.air._internal.usage as air_usage

    original = TuneController.checkpoint, TuneController.save_to_dir, air_usage.tag_callbacks
    with snapshots.cheaper():
        with snapshots.cheaper():
            assert TuneController.checkpoint is not original[0]
            assert air_usage.tag_callbacks is snapshots.tag_callbacks  # what tune.run calls
        assert TuneController.checkpoint is not original[0]  # the outer search still runs
    assert (TuneController.checkpoint, TuneController.save_to_dir, air_usage.tag_callbacks) == original


USAGE = """
import sys
from ray.tune.logger import CSVLoggerCallback, LoggerCallback
from ray.tune import Callback
from tuning.backend import snapshots
from tuning.backend.tune_parts import Recorder

class MLflowLoggerCallback(LoggerCallback):  # named as Ray's integration: counted by its name
    pass

callbacks = [Recorder(), CSVLoggerCallback(), CSVLoggerCallback(), MLflowLoggerCallback(), type("Mine", (LoggerCallback,), {})(), "not one"]
ours = snapshots.callback_counts(callbacks)
assert "mlflow" not in sys.modules, "counting imported mlflow"
from ray.air._internal.usage import _count_callbacks
assert list(ours.items()) == list(_count_callbacks(callbacks).items()), (ours, _count_callbacks(callbacks))
print(ours)
"""


def test_the_usage_tag_counts_callbacks_as_ray_does_without_importing_integrations():
    # A fresh process: this one may have imported mlflow already.
    out = subprocess.run([sys.executable, "-c", USAGE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'CustomCallback': 1, 'CSVLoggerCallback': 2, 'MLflowLoggerCallback': 1, 'CustomLoggerCallback': 1" in out.stdout


def test_the_snapshot_text_is_what_tunes_json_dump_writes_made_piece_by_piece():
    import io
    import json

    from ray.tune.utils.serialization import TuneFunctionEncoder

    trial = ('{\n  "config": {"lr": 0.01, "name": "a \\"quoted\\" \\u00e9 name"}\n}', '{"last_result": {}}')
    other = ('{"trial_id": "b"}', '{"last_result": {"loss": 0.5}}')
    runner, stats = {"_iteration": 7, "_session_str": "s", "nested": [1, 2.5, None]}, {"start_time": 1.5}
    for trial_data in ([trial, other], [trial], [], [trial, other]):
        want = io.StringIO()  # as Ray 2.60's TuneController.save_to_dir writes it
        json.dump({"trial_data": trial_data, "runner_data": runner, "stats": stats}, want, cls=TuneFunctionEncoder)
        pieces = snapshots.state_chunks(trial_data, runner, stats)
        assert iter(pieces) is pieces  # made as the file is written: 150 MB at 10,000 trials is never held whole
        assert "".join(pieces) == want.getvalue()
