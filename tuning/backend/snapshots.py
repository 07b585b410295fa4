"""Tune's experiment snapshot, made cheaper without making it rarer; and Tune's usage tag for
callbacks, without the imports that delayed the first trial.

tuning.run asks for a snapshot after every step (``TUNE_GLOBAL_CHECKPOINT_S=0``) so that a crash
loses at most one step (docs/crash-safety.md). Tune 2.60 then rewrites the whole experiment state
on every step, including steps on which no trial changed, and writes it with ``json.dump``: Python's
streaming encoder, which escapes again every trial's JSON string Tune already cached. From a
profile of 100 trials of 0.5 s (docs/performance.md): 509 snapshots, at least 109 of them on steps
where no trial changed, and 5.6 s of the driver's CPU in ``json.dump`` alone.

While a search runs, two of ``TuneController``'s methods are replaced:

- ``checkpoint`` skips a step on which Tune marked no trial to be written again, nothing forces a
  snapshot (the run's last one, after an interrupt too, or ``num_to_keep`` trial checkpoints since
  the last) and the last snapshot's copy to storage was launched. Tune's snapshot holds each
  trial's state as of its last mark, so such a snapshot would write the same trials again. The
  searcher changes with a trial that is marked (a result, a new suggestion, a stop of a running
  trial); one change is not: Tune does not mark a paused or pending trial it stops
  (``_schedule_trial_stop`` returns first), so the searcher's ``on_trial_complete`` for it reaches
  the file with the next marked step or the run's last snapshot. Tune copies the file from its
  staging folder to storage in the background and launches no copy while one runs; a snapshot
  whose copy was not launched is retried on the next step, as Tune does.
- ``save_to_dir`` writes the same text (state_chunks), escaping each trial's cached JSON strings
  once rather than on every snapshot and the rest with ``json.dumps`` (the C encoder), then the
  searcher's and callbacks' state as Tune does.

And ``tune.run``'s ``tag_callbacks`` (Ray's usage statistics: how many of each built-in callback a
run was given) is replaced by ``tag_callbacks``: the same tag from the same class names, without
importing the four integrations whose names it compares (wandb, mlflow, comet, aim; mlflow alone
took 0.9 s of the driver between ``tune.run`` and the first trial, docs/performance.md).

All are put back when the search ends. Ray is pinned to 2.60 (pyproject.toml); the replaced
``save_to_dir`` does what 2.60's does, in its order. tests/test_snapshots.py checks the text is
what 2.60's ``json.dump`` writes and that Tune reads the file back; the SIGKILL-and-resume tests
(tests/test_reliability.py, slow) resume from it."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import ray.air._internal.usage as air_usage
from ray._common.usage.usage_lib import TagKey, record_extra_usage_tag
from ray.tune import Callback
from ray.tune.execution.tune_controller import TuneController
from ray.tune.logger import LoggerCallback
from ray.tune.utils.callback import DEFAULT_CALLBACK_CLASSES
from ray.tune.utils.serialization import TuneFunctionEncoder

_lock = threading.Lock()
_depth = 0
_originals: dict[str, object] = {}


@dataclass
class _Kept:
    """What this module keeps per controller (not on it: Tune writes a controller's own attributes
    into the snapshot)."""

    encoded: dict[str, str] = field(default_factory=dict)  # trial strings already escaped
    upload_owed: bool = False  # the last snapshot's copy to storage was not launched


_kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _checkpoint(self, force: bool = False, wait: bool = False):
    kept = _kept.setdefault(self, _Kept())
    manager = self._checkpoint_manager
    if not (force or manager._should_force_sync_up or self._trials_to_cache or kept.upload_owed):
        return
    saved, launched = manager._last_save_time, manager._last_sync_time
    _originals["checkpoint"](self, force=force, wait=wait)
    if manager._last_save_time != saved:  # not held back by Tune's period (comparisons keep it)
        kept.upload_owed = manager._last_sync_time == launched


def _save_to_dir(self):
    staging = self._storage.experiment_driver_staging_path
    os.makedirs(staging, exist_ok=True)
    chunks = state_chunks(list(self._get_trial_checkpoints().values()), self.__getstate__(),
                          {"start_time": self._start_time}, _kept.setdefault(self, _Kept()).encoded)
    with open(Path(staging, self.experiment_state_file_name), "w") as f:
        f.writelines(chunks)
    self._search_alg.save_to_dir(staging, session_str=self._session_str)
    self._callbacks.save_to_dir(staging, session_str=self._session_str)


def state_chunks(trial_data: list, runner_data: dict, stats: dict, cache: dict) -> list[str]:
    """Pieces that join to the text ``json.dumps({"trial_data": ..., "runner_data": ...,
    "stats": ...})`` gives, with each trial's two JSON strings (Tune's cached state and run
    metadata) escaped once and reused while Tune keeps them: they are almost all of the file
    (about 1 MB at 100 trials), and most trials have not changed since the last snapshot. Written
    piece by piece, the megabyte is not copied into one string. `cache` maps a string to its JSON
    form; it is left holding this snapshot's strings only."""
    fresh = {}
    chunks = ['{"trial_data": [']
    for i, pair in enumerate(trial_data):
        chunks.append(", [" if i else "[")
        for j, s in enumerate(pair):
            e = cache.get(s)
            if e is None:
                e = json.dumps(s)
            fresh[s] = e
            chunks += [", ", e] if j else [e]
        chunks.append("]")
    cache.clear()
    cache.update(fresh)
    chunks += ['], "runner_data": ', json.dumps(runner_data, cls=TuneFunctionEncoder),
               ', "stats": ', json.dumps(stats, cls=TuneFunctionEncoder), "}"]
    return chunks


# The integrations' callbacks ray.air._internal.usage._count_callbacks counts by name (Ray 2.60).
INTEGRATION_CALLBACKS = ("WandbLoggerCallback", "MLflowLoggerCallback", "CometLoggerCallback", "AimLoggerCallback")


def callback_counts(callbacks) -> dict[str, int]:
    """What Ray's _count_callbacks returns, in its order, from the names alone."""
    built_in = INTEGRATION_CALLBACKS + tuple(c.__name__ for c in DEFAULT_CALLBACK_CLASSES)
    counts: dict[str, int] = {}
    for callback in callbacks or []:
        if not isinstance(callback, Callback):
            continue
        name = type(callback).__name__
        key = name if name in built_in else "CustomLoggerCallback" if isinstance(callback, LoggerCallback) \
            else "CustomCallback"
        counts[key] = counts.get(key, 0) + 1
    return counts


def tag_callbacks(callbacks) -> None:
    counts = callback_counts(callbacks)
    if counts:
        record_extra_usage_tag(TagKey.AIR_CALLBACKS, json.dumps(counts))


@contextlib.contextmanager
def cheaper():
    """Within the block, every TuneController snapshots and tune.run tags callbacks as described
    above (nested blocks and concurrent searches in one process share one replacement)."""
    global _depth
    with _lock:
        if _depth == 0:
            _originals.update(checkpoint=TuneController.checkpoint, save_to_dir=TuneController.save_to_dir,
                              tag_callbacks=air_usage.tag_callbacks)
            TuneController.checkpoint = _checkpoint
            TuneController.save_to_dir = _save_to_dir
            air_usage.tag_callbacks = tag_callbacks
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                TuneController.checkpoint = _originals["checkpoint"]
                TuneController.save_to_dir = _originals["save_to_dir"]
                air_usage.tag_callbacks = _originals["tag_callbacks"]
