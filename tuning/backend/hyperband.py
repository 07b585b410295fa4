"""Synchronous Hyperband brackets as the Hyperband and BOHB papers define them, and a BOHB searcher
whose model sees every rung result once. Imported lazily by tuning.backend (it imports Ray).

Ray 2.60's HyperBandForBOHB has three defects; the first two turn BOHB into something between random
search and Hyperband (Ray issue #12536, closed unfixed; #5775, #9245 report the same symptom):

1. A bracket is "filled" when its *live* trials number its size, and a finished trial leaves the
   live set. Tune creates one trial at a time for a searcher, so a bracket whose trials finish
   (or run at the full budget) never fills, and it swallows every later trial: on counting ones
   the first band's s = 0 bracket took 86 trials instead of 5 and no second band ever started.
   `QuotaBracket` counts every trial it was given: it takes exactly n0 and closes.
2. Tune calls the searcher's `on_trial_result` only when the decision is not STOP, so no
   full-budget result (stopped by MaximumIterationStopper) and no rung loser that Hyperband stops
   outright ever reached BOHB's model. `PaperHyperBand` reports every result at a rung budget to
   an `observe(trial_id, budget, result)` hook itself, including the ones Tune stops, and
   `PaperBOHB.observe` hands each (trial, budget) pair to HpBandSter's model exactly once.
3. A rung is decided only by a trial that sees all the others PAUSED: two that reach it together
   both wait, and Ray's fallback (decide once nothing runs) never comes while other brackets run.
   `PaperHyperBand.choose_trial_to_run` decides such a rung at the next free slot.

And one of Tune's: it keeps up to 200 trials of a random variant generator pending (for a
cluster's autoscaler), against one for a searcher such as BOHB's. With Hyperband each is assigned
to a bracket when made, a band or more ahead, and Tune starts pending trials in no fixed order (a
cached actor goes to any of them): a later band's trials ran while an earlier bracket's waited,
and where a budget ended the run, which trials had run varied (counting ones: 704 to 733).
`has_unstarted` lets RandomSearch make its next trial only once the last has started, as BOHB's.

BOHB's model (PaperBOHB, fed through PaperHyperBand's observe hook) is in tuning/backend/bohb.py.

Brackets are opened largest first within a band (s = s_max ... 0), then a new band starts, with
Ray's (the Hyperband paper's) sizes n0 = ceil((s_max + 1) / (s + 1) * eta^s) and first budgets
r0 = max_t * eta^-s: 81/34/15/8/5 trials starting at 1/3/9/27/81 for max_t 81, eta 3.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Callable

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler
from ray.tune.schedulers.trial_scheduler import TrialScheduler

from tuning import progress
from tuning.backend import mo, rayinternals
from tuning.backend.budget import TimeGate

log = logging.getLogger(__name__)

Observer = Callable[[str, float, dict], None]  # (trial_id, budget, flat result)


class QuotaBracket(rayinternals.Bracket):
    """A bracket that takes exactly its quota of trials (n0) and then closes, whether or not the
    trials it was given are still running."""

    def __init__(self, *args, s: int, band: int, rule: mo.Rule | None = None, **kwargs):
        super().__init__(*args, s=s, **kwargs)
        self.s, self.band, self.rule = s, band, rule
        self.rungs, self.rung = progress.bracket_rungs(kwargs["init_t_attr"], s, kwargs["max_t_attr"], kwargs["eta"]), 0

    def filled(self) -> bool:
        return len(self.all_trials) >= self.quota

    def successive_halving(self, metric: str, metric_op: float):
        # Ray's bookkeeping (the next rung, how many go on), then, with several objectives or a
        # constraint, the same number chosen by non-dominated sorting (tuning/backend/mo.py).
        good, bad = super().successive_halving(metric, metric_op)
        if self.rung + 1 < len(getattr(self, "rungs", ())):  # the paper's next rung, the last max_t (bracket_rungs)
            self.rung += 1
            self.budget = self.rungs[self.rung]
        if self.rule is None:
            return good, bad
        return mo.split(self.rule, [*good, *bad], self.live_trials, len(good))

    def describe(self) -> dict:
        """Plain data for tables and tests: which trials this bracket was given."""
        return {"band": self.band, "s": self.s, "n0": self.quota, "r0": self.first_budget,
                "trials": [t.trial_id for t in self.all_trials]}


class PaperHyperBand(rayinternals.HyperBand):
    """Ray's synchronous Hyperband (HyperBandForBOHB: largest bracket first, trials paused at each
    rung until the rung is complete) with brackets that close and every rung result observed.

    Tune does not save scheduler state (Ray issue #30838): on resume every restored trial is added
    again, finished ones too, and a bracket waiting on a trial that will never report hangs the
    run. Finished trials are left out; unfinished ones join fresh brackets, counted in their quota,
    and continue from their checkpoints.

    `rule`: several objectives or a constraint (tuning/backend/mo.py): each rung keeps its best by
    non-dominated sorting, feasible first, and a trial past the bound of a metric declared to only
    grow stops there, its result observed at the rung it was heading to."""

    def __init__(self, *args, observe: Observer | None = None, rule: mo.Rule | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._observe, self.rule = observe, rule
        self._observed: set[tuple[str, float]] = set()
        self._unstarted: deque[Trial] = deque()  # trials given to it, in order, until each starts

    def create_bracket(self, s: int) -> QuotaBracket:
        return QuotaBracket(**self.bracket_settings(s), s=s, band=self.band, rule=self.rule)

    def on_trial_add(self, tune_controller, trial: Trial):
        if trial.status in (Trial.TERMINATED, Trial.ERROR):
            return
        super().on_trial_add(tune_controller, trial)
        self._unstarted.append(trial)

    def has_unstarted(self) -> bool:
        """Whether a trial it was given is still PENDING, never started (module docstring)."""
        while self._unstarted and self._unstarted[0].status != Trial.PENDING:
            self._unstarted.popleft()
        return bool(self._unstarted)

    def on_trial_result(self, tune_controller, trial: Trial, result: dict) -> str:
        bracket, _ = self.trial_brackets[trial]
        if self.rule is not None and self.rule.grown_past(result):
            # Its metric can only grow: it would be as infeasible at the rung. BOHB's model learns so;
            # Tune's stop then takes it out of the bracket (on_trial_complete).
            log.info("%s stopped: %s is past its bound and only grows", trial.trial_id, self.rule.grown_past(result))
            self._rung_result(trial, bracket, result, at_rung=False)
            return TrialScheduler.STOP
        bracket.update_trial_stats(trial, result)
        if bracket.continue_trial(trial):
            return TrialScheduler.CONTINUE
        self._rung_result(trial, bracket, result)
        others_waiting = all(t.status == Trial.PAUSED for t in bracket.live_trials if t is not trial)
        if not bracket.filled() or not others_waiting:
            self._searcher_pause(tune_controller, trial)
            return TrialScheduler.PAUSE
        action = self.decide(tune_controller, bracket)
        if action == TrialScheduler.PAUSE:
            self._searcher_pause(tune_controller, trial)
        return action

    def on_trial_complete(self, tune_controller, trial: Trial, result: dict):
        # A result Tune stopped before this scheduler saw it (the full budget, reached under
        # MaximumIterationStopper) is still a rung result: observe it before the trial leaves.
        if trial in self.trial_brackets and result:
            self._rung_result(trial, self.trial_brackets[trial][0], result)
        super().on_trial_complete(tune_controller, trial, result)

    def _rung_result(self, trial: Trial, bracket: QuotaBracket, result: dict, at_rung: bool = True) -> None:
        budget, time_attr = bracket.budget, rayinternals.objective(self)[0]
        # Only at the rung itself: after a resume a trial can join a bracket whose rung it has passed.
        if (at_rung and result.get(time_attr) != budget) or (trial.trial_id, budget) in self._observed:
            return
        self._observed.add((trial.trial_id, budget))
        if self._observe is not None:
            self._observe(trial.trial_id, budget, result)

    def choose_trial_to_run(self, tune_controller, allow_recurse: bool = True):
        # Defect 3 (module docstring): each of a rung's last two trials saw the other still RUNNING,
        # its pause (a checkpoint save) in flight, and both wait. Decide such a rung here.
        for band in self.bands:
            for bracket in band:
                if bracket is not None and self._rung_stuck(bracket):
                    log.debug("deciding the rung at %s every trial waits on", bracket.budget)
                    self.decide(tune_controller, bracket)
        return super().choose_trial_to_run(tune_controller, allow_recurse)

    @staticmethod
    def _rung_stuck(bracket: QuotaBracket) -> bool:
        live = bracket.live_trials
        return (bracket.filled() and bool(live) and bracket.cur_iter_done() and not bracket.trials_to_unpause
                and all(t.status == Trial.PAUSED for t in live))

    def _searcher_pause(self, tune_controller, trial: Trial) -> None:
        # TuneBOHB counts running trials for its concurrency limit; a random searcher has no such count.
        searcher = getattr(tune_controller.search_alg, "searcher", None)
        if hasattr(searcher, "on_pause"):
            searcher.on_pause(trial.trial_id)

    def unpause_trial(self, tune_controller, trial: Trial):
        searcher = getattr(tune_controller.search_alg, "searcher", None)
        if hasattr(searcher, "on_unpause"):
            searcher.on_unpause(trial.trial_id)

    def brackets(self) -> list[dict]:
        return [b.describe() for band in self.bands for b in band if b is not None]

    def all_finished(self) -> bool:
        return all(t.status in (Trial.TERMINATED, Trial.ERROR) for t in self.trial_brackets)


class PauseEveryResult(TimeGate, FIFOScheduler):
    """Pauses a trial after every result; FIFO resumes it at once (tuning.bench measures with it
    what one pause and resume costs, with nothing else in the way). Gated as every scheduler is:
    StopWhenSpent waits for the gate to hold the waiting trials before it stops a timed run."""

    def __init__(self):
        super().__init__()
        self._trials: set[Trial] = set()

    def on_trial_result(self, tune_controller, trial: Trial, result: dict) -> str:
        self._trials.add(trial)
        return TrialScheduler.PAUSE

    def all_finished(self) -> bool:
        return all(t.status in (Trial.TERMINATED, Trial.ERROR) for t in self._trials)
