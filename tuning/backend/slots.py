"""A run's limit on trials at once (tuning.run --max-concurrent-trials): what Ray Tune's
``max_concurrent_trials`` and ``ConcurrencyLimiter`` give, under every strategy. Imported lazily
by tuning.backend (it imports Ray).

Tune's own limit counts a trial from its suggestion to its end, paused or not. Under synchronous
Hyperband brackets (hyperband, bohb, adaptive) a trial waits PAUSED at its rung until the rest of
its bracket gets there, so a limit below a bracket's size left every slot to a waiting trial and
the bracket never filled. Here a slot is a trial RUNNING or PENDING (made, about to start): a
paused one frees its slot, the search makes its next trial only while a slot is free, and a paused
trial is resumed only into a free one. Tune starts every PENDING trial by itself as resources
allow, so the limit holds by never making more of them than there are free slots; and where Tune
made them (a resumed run's every unfinished trial is PENDING again), the ones past the limit are
held PAUSED and handed back one by one as slots free.

A model-based search (bohb, adaptive, tpe) then proposes each trial knowing the results of all but
the few running: with fewer at once it learns more per trial, and takes longer.
"""

from __future__ import annotations

from collections import deque

from ray.tune.experiment import Trial

from tuning.backend.budget import hold_pending

BUSY = (Trial.RUNNING, Trial.PENDING)


class SlotGate:
    """A scheduler mixin: at most `limit` trials running or about to start (None: no limit). The
    search asks `free()` before it makes a trial (tuning/backend/searches.py)."""

    limit: int | None = None
    _controller = None  # Tune's controller, as the scheduler last saw it: where the trials' states are

    def on_trial_add(self, tune_controller, trial: Trial):
        self._controller = tune_controller
        super().on_trial_add(tune_controller, trial)

    def busy(self) -> int:
        if self._controller is None:
            return 0
        return sum(t.status in BUSY for t in self._controller.get_live_trials())

    def free(self) -> bool:
        return self.limit is None or self.busy() < self.limit

    def choose_trial_to_run(self, tune_controller, *args, **kwargs):
        self._controller = tune_controller
        if self.limit is not None:
            held = self._hold_surplus(tune_controller)
            spent = getattr(self, "budget", None) is not None and self.budget.spent()
            if held and self.free() and not spent:  # before any other: they were there first
                return held.popleft()
        trial = super().choose_trial_to_run(tune_controller, *args, **kwargs)
        # A PENDING trial already holds its slot; a PAUSED one would take one.
        if trial is not None and trial.status == Trial.PAUSED and not self.free():
            return None
        return trial

    def _hold_surplus(self, tune_controller) -> deque:
        """PENDING trials past the limit, PAUSED before Tune starts them (it starts every PENDING one
        it can), in the order they were made; the held ones still waiting. A scheduler that resumes
        only the PAUSED trials it chose itself (Hyperband's) never picks these: they come back here."""
        held = self.__dict__.setdefault("_held", deque())
        while held and held[0].status != Trial.PAUSED:
            held.popleft()
        live = tune_controller.get_live_trials()
        room = self.limit - sum(t.status == Trial.RUNNING for t in live)
        if sum(t.status == Trial.PENDING for t in live) > room:
            pending = [t for t in tune_controller.get_trials() if t.status == Trial.PENDING]
            for trial in pending[max(room, 0):]:
                hold_pending(tune_controller, trial)
                held.append(trial)
        return held


def free(scheduler) -> bool:
    """Whether a search may make a trial now under `scheduler` (one without a gate has no limit)."""
    return scheduler is None or not isinstance(scheduler, SlotGate) or scheduler.free()
