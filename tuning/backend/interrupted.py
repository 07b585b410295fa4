"""What each trial's status is after Ctrl-C or SIGTERM cut a run short.

Tune saves the experiment and then, cleaning up, calls TERMINATED every trial it was running or
had asked an actor for: a trial halfway through its epochs, and a never-started one with 0. In
trials.csv those read as finished, and under ASHA or Hyperband as stopped early by the scheduler
(a Ctrl-C of 40 waiting trials said "38 stopped early"), though a resume trains every one of
them. Only a trial Tune ended through its own stop (done, stopped by a scheduler or a stopper) or
that ended before this segment is TERMINATED; the others are PAUSED where they trained an epoch
(a resume goes on from its checkpoint) and PENDING where they did not, as the saved experiment
has them. A spent time budget holds its trials PAUSED before it stops (budget.py), so this
changes nothing there. Imported lazily by tuning.backend (it imports Ray).
"""

from __future__ import annotations

import dataclasses

from ray.tune import Callback

from tuning import results


class Endings(Callback):
    """The trials that ended for good: those already TERMINATED when this segment started (a
    resume), and those Tune stopped itself since. Its cleanup's stops call no callback."""

    def __init__(self):
        self.ended: set[str] | None = None

    def on_step_begin(self, iteration: int, trials: list, **info):
        if self.ended is None:  # the first step: a resume's trials are restored before it
            self.ended = {t.trial_id for t in trials if t.status == "TERMINATED"}

    def on_trial_complete(self, iteration: int, trials: list, trial, **info):
        if self.ended is not None:
            self.ended.add(trial.trial_id)

    def status(self, record: results.TrialRecord) -> str:
        """A cut-short run's trial's status, as the saved experiment has it."""
        if self.ended is None or record.status != "TERMINATED" or record.trial_id in self.ended:
            return record.status  # (no step ran: Tune asked no actor, so it stopped none)
        return "PAUSED" if any(results.is_number(r.get("training_iteration")) for r in record.rows) else "PENDING"

    def corrected(self, records: list[results.TrialRecord]) -> list[results.TrialRecord]:
        return [dataclasses.replace(r, status=self.status(r)) for r in records]
