"""A run's time budget (tuning.run --time-budget): no trial starts once it is spent, running trials
pause at their next result with their checkpoints, and the run then stops as Ctrl-C stops it, so
`--resume` or `--add-samples` can take it further. Imported lazily by tuning.backend (it imports Ray).

The clock counts only time the run was running. Ray's TimeoutStopper counts from the first start,
so the downtime between an interruption and a resume was charged to the budget (Ray #21038); here
each segment adds its own running time to what run.json says earlier segments used.
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Callable

from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.schedulers.trial_scheduler import TrialScheduler

from tuning.backend import rayinternals

log = logging.getLogger(__name__)

SAVE_EVERY_S = 5.0  # how often the time used so far is written down (a SIGKILL loses at most this)


class TimeBudget:
    """Seconds of running time a run may use, of which earlier segments used `used_before`."""

    def __init__(self, total_s: float, used_before: float = 0.0, save: Callable[[float], None] | None = None):
        self.total_s, self.used_before, self._save = total_s, used_before, save
        self._started = time.monotonic()
        self._saved_at = 0.0
        self._stopped_at: float | None = None
        self.held = False  # the scheduler's gate has marked the waiting trials PAUSED since it was spent

    def used(self) -> float:
        return self.used_before + (self._stopped_at or time.monotonic()) - self._started

    def stop_clock(self) -> None:
        """The run is done with the budget: Tune's shutdown after it (saving the experiment,
        stopping actors; tens of seconds on a loaded machine) is not running time."""
        self._stopped_at = self._stopped_at or time.monotonic()

    def spent(self) -> bool:
        return self.used() >= self.total_s

    def save(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._save is not None and (force or now - self._saved_at >= SAVE_EVERY_S):
            self._saved_at = now
            self._save(round(self.used(), 2))


def hold_pending(tune_controller, trial: Trial) -> None:
    """A PENDING trial PAUSED before Tune starts it (it starts every PENDING trial it can by itself,
    a PAUSED one only when the scheduler chooses it): what both gates hold trials back with."""
    tune_controller.pause_trial(trial, should_checkpoint=False)  # withdraws an actor asked for
    if trial.status == Trial.PENDING:  # none was
        rayinternals.mark_paused(tune_controller, trial)


class TimeGate:
    """A scheduler mixin: once the budget is spent, no trial is started or resumed, and a running
    trial is paused at its next result (Tune saves its checkpoint on pause)."""

    budget: TimeBudget | None = None

    def choose_trial_to_run(self, tune_controller, *args, **kwargs):
        if self.budget is not None and self.budget.spent():
            # Not only what this returns: Tune starts PENDING trials by itself (every one a search
            # made ahead, up to 200, or a resume restored), each for an epoch before it was paused.
            for trial in tune_controller.get_trials():
                if trial.status == Trial.PENDING:
                    hold_pending(tune_controller, trial)
            self.budget.held = True
            return None
        return super().choose_trial_to_run(tune_controller, *args, **kwargs)

    def on_trial_result(self, tune_controller, trial: Trial, result: dict) -> str:
        if self.budget is not None and self.budget.spent():
            return TrialScheduler.PAUSE
        return super().on_trial_result(tune_controller, trial, result)


class StopWhenSpent(Callback):
    """Ends tune.run once the budget is spent and no trial runs any more, through Tune's own
    Ctrl-C path: the experiment is saved with its paused and pending trials, resumable."""

    def __init__(self, budget: TimeBudget):
        self.budget, self.stopped = budget, False

    def on_step_end(self, iteration: int, trials: list, **info):
        self.budget.save()
        # Not before the gate has held the waiting trials: stopped first, Tune ends a trial whose actor
        # it had asked for as TERMINATED, never having run.
        if self.stopped or not self.budget.spent() or not self.budget.held:
            return
        if any(t.status == Trial.RUNNING for t in trials):
            return
        self.stopped = True
        self.budget.stop_clock()
        self.budget.save(force=True)
        log.info("time budget of %.0f s spent: stopping", self.budget.total_s)
        signal.raise_signal(signal.SIGINT)  # Tune's handler: save the experiment and return
