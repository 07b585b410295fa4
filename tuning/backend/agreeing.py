"""Asynchronous Hyperband brackets that weigh each bracket by how well its first rung ranks like the
top so far: Hyper-Tune's bracket selection (Li et al., "Hyper-Tune: Towards Efficient
Hyper-parameter Tuning at Scale", VLDB 2022) for Tune's AsyncHyperBandScheduler, as `adaptive`
(tuning/backend/adaptive.py) does it for synchronous brackets. `tpe` runs under it
(docs/strategies.md#tpe). Imported lazily (it imports Ray)."""

from __future__ import annotations

import math

import numpy as np

from tuning import fidelity
from tuning.backend import rayinternals


class AgreeingBrackets:
    """A mixin for Tune's AsyncHyperBandScheduler (strategies.TpeBrackets): each new trial's
    bracket is drawn with Tune's probabilities weighted by fidelity.RungAgreement.weight of the
    bracket's first rung (ρ with the top clipped to [FLOOR, 1], 1 while unmeasured). Where epoch 1
    ranks configurations at random, most trials then start at epoch 3, and fewer good ones are
    stopped on noise before the searcher hears of them. Where every rung agrees, the draw is
    Tune's, from the same random numbers."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.agreement = fidelity.RungAgreement()

    def on_trial_add(self, tune_controller, trial):
        super().on_trial_add(tune_controller, trial)  # Tune's draw, from numpy's global generator
        brackets, chosen = rayinternals.asha_brackets(self), rayinternals.asha_brackets(self, of_trials=True)
        first = [min(m for m, _ in rayinternals.rungs(b)) for b in brackets]
        weights = [self.agreement.weight(f) for f in first]
        sizes = np.array([len(rayinternals.rungs(b)) for b in brackets])
        tune_p = np.exp(sizes - sizes.max()) / np.exp(sizes - sizes.max()).sum()
        i, best = brackets.index(chosen[trial.trial_id]), max(weights)
        # Rejection: keep Tune's draw with probability weight / the largest weight, else draw
        # again: brackets in proportion to Tune's probability times their weight.
        while weights[i] < best and np.random.random() >= weights[i] / best:
            i = int(np.random.choice(len(brackets), p=tune_p))
        chosen[trial.trial_id] = brackets[i]

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        self._observe(trial.trial_id, result)
        return super().on_trial_result(tune_controller, trial, result)

    def rebuild(self, rows: dict[str, list[dict]]) -> int:
        for trial_id, trial_rows in rows.items():  # a resume: the rungs' agreement as measured before
            for row in trial_rows:
                self._observe(trial_id, row)
        return super().rebuild(rows)

    def _observe(self, trial_id: str, result: dict) -> None:
        time_attr, metric, _ = rayinternals.objective(self)
        step, value = result.get(time_attr), result.get(metric)
        milestones = {m for b in rayinternals.asha_brackets(self) for m, _ in rayinternals.rungs(b)}
        if step in milestones and isinstance(value, (int, float)) and math.isfinite(value):
            self.agreement.observe(trial_id, step, value)
