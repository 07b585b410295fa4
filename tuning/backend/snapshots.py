"""Tune's experiment snapshot, made cheaper, and rarer only where it would take more than a
twentieth of the driver's time; Tune's usage tag for callbacks, without the imports that delayed
the first trial; and the analysis tune.run returns, without reading result files tuning turned off.

tuning.run asks for a snapshot after every step (``TUNE_GLOBAL_CHECKPOINT_S=0``) so that a crash
loses at most one step (docs/crash-safety.md). Tune 2.60 then rewrites the whole experiment state
on every step, including steps on which no trial changed, and writes it with ``json.dump``: Python's
streaming encoder. From a profile of 100 trials of 0.5 s (docs/performance.md): 509 snapshots, at
least 109 of them on steps where no trial changed, and 5.6 s of the driver's CPU in ``json.dump``.

While a search runs, two of ``TuneController``'s methods are replaced, and Tune's statistics of
results (UNANALYSED, below) are kept only for the numbers someone reads:

- ``checkpoint`` skips a step on which Tune marked no trial to be written again, nothing forces a
  snapshot (the run's last one, after an interrupt too, or ``num_to_keep`` trial checkpoints since
  the last) and the last snapshot's copy to storage was launched. Tune's snapshot holds each
  trial's state as of its last mark, so such a snapshot would write the same trials again. The
  searcher changes with a trial that is marked (a result, a new suggestion, a stop of a running
  trial); one change is not: Tune does not mark a paused or pending trial it stops
  (``_schedule_trial_stop`` returns first), so the searcher's ``on_trial_complete`` for it reaches
  the file with the next marked step or the run's last snapshot. Nor did the trial itself: its
  state stayed PAUSED in every snapshot after (a Hyperband rung's losers), and a resume or
  ``--add-samples`` trained it on; each snapshot now marks every ended trial (its text is cached
  by Tune until its status changes, so this costs a lookup a trial). Tune copies the file from its
  staging folder to storage in the background and launches no copy while one runs; a snapshot
  whose copy was not launched is retried on the next step, as Tune does.
  It also holds back the next unforced snapshot until the driver has done SHARE times as much
  other work as the last one took. Every snapshot writes every trial (15 KB each), so with a snapshot
  per step a run's cost grew with the square of its trials: 2,000 trials of nothing cost 12x raw
  Tune's per trial, the last tenth 3.7x the first (docs/performance.md, "Thousands of trials").
- ``save_to_dir`` writes the same text (state_chunks) piece by piece with ``json.dumps`` (the C
  encoder), then the searcher's and callbacks' state as Tune does, each file into a folder beside
  Tune's staging folder and then renamed into it. Tune copies the staging folder to storage in the
  background while the driver goes on, and writes the next snapshot into it in place: a copy could
  take the state file half written (a crash before the next copy left storage a snapshot a resume
  cannot read), or list a searcher's temporary file (written, then renamed into place) that was
  gone when it came to copy it, and log a traceback. A copy now finds each file whole, the old one
  or the new. The controller's state leaves out its stopper: Tune pickled the stoppers a run began
  with into every snapshot, and a resume put that copy in place of the ones tune.run was given, so
  the run's own stoppers (and interrupted.Endings, which asks them whether the run was stopped
  whole) were never consulted again.

And ``tune.run``'s ``tag_callbacks`` (Ray's usage statistics: how many of each built-in callback a
run was given) is replaced by ``tag_callbacks``: the same tag from the same class names, without
importing the four integrations whose names it compares (wandb, mlflow, comet, aim; mlflow alone
took 0.9 s of the driver between ``tune.run`` and the first trial, docs/performance.md).

And the ExperimentAnalysis that ``tune.run`` returns reads no trial's result files: tuning turns
them off (tuning.backend.tune_switches; its rows are in results.jsonl) and reads only the analysis's
trials, so every read failed, and Tune logged a warning of one line per trial (12 lines at the end
of a 12-trial ``tuning.search``, 10,000 at 10,000 trials). Each trial gets the empty table Tune
gives one whose files it cannot read.

All are put back when the search ends. The policy is here; what touches Tune's private state (the
controller's snapshot clock, what save_to_dir writes, putting the replacements in place) is in
tuning/backend/rayinternals.py, written against Ray 2.60, whose ``save_to_dir`` the replaced one
follows in its order. tests/test_snapshots.py checks the text is
what 2.60's ``json.dump`` writes and that Tune reads the file back; the SIGKILL-and-resume tests
(tests/test_reliability.py, slow) resume from it."""

from __future__ import annotations

import json
import time
import weakref
from dataclasses import dataclass

from pandas import DataFrame
from ray.tune import Callback
from ray.tune.logger import LoggerCallback
from ray.tune.utils.callback import DEFAULT_CALLBACK_CLASSES
from ray.tune.utils.serialization import TuneFunctionEncoder

from tuning.backend import rayinternals


@dataclass
class _Kept:
    """What this module keeps per controller (not on it: Tune writes a controller's own attributes
    into the snapshot)."""

    upload_owed: bool = False  # the last snapshot's copy to storage was not launched
    next_at: float = 0.0  # time.monotonic() before which only a forced snapshot is taken


# A snapshot holds the next unforced one back until the driver has spent SHARE times as long on
# other work: snapshots take at most 1/(SHARE + 1) of its time, Tune's own bound for its adaptive
# period (5 %). Tens of trials take a few milliseconds to write, and their steps come seconds apart,
# so a snapshot still follows each step that changed a trial, or the next; at thousands of trials a
# snapshot takes a second, and a crash then loses at most the results of the last SHARE seconds per
# second of snapshot, which results.jsonl still holds (docs/crash-safety.md). A threshold below
# which every step was written (50 ms) let 600 trials of nothing cost twice as much per trial in
# their second half as in their first (tests/test_scale.py).
SHARE = 19


_kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _checkpoint(self, force: bool = False, wait: bool = False):
    kept = _kept.setdefault(self, _Kept())
    clock = rayinternals.snapshot_clock(self)
    forced = force or clock.forced
    if not (forced or clock.marked or kept.upload_owed):
        return
    if not forced and time.monotonic() < kept.next_at:  # the marked trials wait for the next snapshot
        return
    began = time.monotonic()
    rayinternals.take_snapshot(self, force=force, wait=wait)
    after = rayinternals.snapshot_clock(self)
    if after.saved_at != clock.saved_at:  # not held back by Tune's period (comparisons keep it)
        kept.upload_owed = after.launched_at == clock.launched_at
        kept.next_at = after.saved_at + SHARE * (after.saved_at - began)


def _save_to_dir(self):
    rayinternals.write_snapshot(self, state_chunks)


def state_chunks(trial_data: list, runner_data: dict, stats: dict):
    """Pieces that join to the text ``json.dumps({"trial_data": ..., "runner_data": ...,
    "stats": ...})`` gives, made one at a time as the file is written: the trials' JSON strings
    (Tune's cached state and run metadata, 15 KB a trial) are almost all of it, 150 MB at 10,000
    trials, and neither the text nor a cache of its escaped strings is held whole beside Tune's own
    (the cache that was here doubled the driver's memory for them, docs/performance.md)."""
    yield '{"trial_data": ['
    for i, pair in enumerate(trial_data):
        yield ", [" if i else "["
        for j, s in enumerate(pair):
            if j:
                yield ", "
            yield json.dumps(s)
        yield "]"
    yield '], "runner_data": '
    yield json.dumps(runner_data, cls=TuneFunctionEncoder)
    yield ', "stats": '
    yield json.dumps(stats, cls=TuneFunctionEncoder)
    yield "}"


# The integrations' callbacks Ray's usage tag counts by name (Ray 2.60, rayinternals).
INTEGRATION_CALLBACKS = ("WandbLoggerCallback", "MLflowLoggerCallback", "CometLoggerCallback", "AimLoggerCallback")


def callback_counts(callbacks) -> dict[str, int]:
    """What Ray's own count of a run's callbacks returns, in its order, from the names alone."""
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
        rayinternals.tag_callback_counts(counts)


# Numbers in every result that no one reads Tune's running statistics of: the trainable's own
# bookkeeping (tuning/backend/trainables.py) and Tune's. Tune keeps, per trial and per numeric key
# of its results, max, min, mean, last and the last-5 and last-10 means with their windows, in
# memory and in every snapshot: 36 KB a trial for the ~18 keys of a result here, 360 MB of the
# driver at 10,000 trials (docs/performance.md). The space's metrics, training_iteration and
# time_total_s keep theirs (the progress table, ExperimentAnalysis, the ETA read them).
UNANALYSED = frozenset({"rss_mb", "peak_rss_mb", "restored_from", "ended_at", "memory_growing", "diverged",
                        "returned", "timestamp", "time_this_iter_s", "pid", "time_since_restore",
                        "iterations_since_restore", "done", "should_checkpoint"})


def _update_metric(self, metric, value, step=1):
    if metric not in UNANALYSED:
        rayinternals.analyse_metric(self, metric, value, step)


def _no_dataframes(self) -> dict:
    return {trial.trial_id: DataFrame() for trial in self.trials}


def cheaper():
    """A block within which every TuneController snapshots, tune.run tags callbacks, trials keep
    statistics of their results and tune.run's analysis reads the trials' result files as described
    above (nested blocks and concurrent searches in one process share one replacement)."""
    return rayinternals.snapshot_patches(checkpoint=_checkpoint, save_to_dir=_save_to_dir,
                                         update_metric=_update_metric, tag_callbacks=tag_callbacks,
                                         trial_dataframes=_no_dataframes)
