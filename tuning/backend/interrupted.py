"""What each trial's status is after Ctrl-C or SIGTERM cut a run short.

Tune saves the experiment and then, cleaning up, calls TERMINATED every trial it was running or
had asked an actor for: a trial halfway through its epochs, and a never-started one with 0. In
trials.csv those read as finished, and under ASHA or Hyperband as stopped early by the scheduler
(a Ctrl-C of 40 waiting trials said "38 stopped early"), though a resume trains every one of
them. Only a trial Tune ended through its own stop (done, stopped by a scheduler or a stopper) or
that ended before this segment is TERMINATED; the others are PAUSED where they trained an epoch
(a resume goes on from its checkpoint) and PENDING where they did not, as the saved experiment
has them. A spent time budget holds its trials PAUSED before it stops (budget.py), so this
changes nothing there but the never-started ones' status: PENDING, not the PAUSED that keeps Tune
from starting them. Imported lazily by tuning.backend (it imports Ray).
"""

from __future__ import annotations

import dataclasses

from ray.tune import Callback

from tuning import results


class Endings(Callback):
    """The trials that ended for good: those already TERMINATED when this segment started (a
    resume), and those Tune stopped itself since. Its cleanup's stops call no callback, nor does
    its stop of every trial when `stopper` says the whole run is done (a comparison's budget)."""

    def __init__(self, stopper):
        self.stopper, self.ended, self.swept = stopper, None, False

    def on_step_begin(self, iteration: int, trials: list, **info):
        if self.ended is None:  # the first step: a resume's trials are restored before it
            self.ended = {t.trial_id for t in trials if t.status == "TERMINATED"}

    def on_trial_complete(self, iteration: int, trials: list, trial, **info):
        if self.ended is not None:
            self.ended.add(trial.trial_id)

    def on_step_end(self, iteration: int, trials: list, **info):
        # Tune has just stopped every trial if this holds; checked per step, read once (O(1) a step).
        if not self.swept and self.ended is not None and self.stopper.stop_all():
            self.ended |= {t.trial_id for t in trials if t.status == "TERMINATED"}
            self.swept = True

    def status(self, record: results.TrialRecord) -> str:
        """A cut-short run's trial's status, as the saved experiment has it."""
        trained = any(results.is_number(r.get("training_iteration")) for r in record.rows)
        if record.status == "PAUSED" and not trained:  # held by a spent time budget's gate
            return "PENDING"
        if self.ended is None or record.status != "TERMINATED" or record.trial_id in self.ended:
            return record.status  # (no step ran: Tune asked no actor, so it stopped none)
        return "PAUSED" if trained else "PENDING"

    def corrected(self, records: list[results.TrialRecord]) -> list[results.TrialRecord]:
        return [dataclasses.replace(r, status=self.status(r)) for r in records]
