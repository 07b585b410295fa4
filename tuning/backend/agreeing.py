"""Asynchronous Hyperband brackets that weigh each bracket by how well its first rung ranks like the
top so far: Hyper-Tune's bracket selection (Li et al., "Hyper-Tune: Towards Efficient
Hyper-parameter Tuning at Scale", VLDB 2022) for Tune's AsyncHyperBandScheduler, as `adaptive`
(tuning/backend/adaptive.py) does it for synchronous brackets. `tpe` runs under it
(docs/strategies.md#tpe). Imported lazily (it imports Ray)."""

from __future__ import annotations

import numpy as np

from tuning import fidelity, progress
from tuning.backend import rayinternals


class AgreeingBrackets:
    """A mixin for Tune's AsyncHyperBandScheduler (strategies.TpeBrackets): each new trial's
    bracket is drawn with Tune's probabilities weighted by fidelity.RungAgreement.weight of the
    bracket's first rung (ρ with the top clipped to [FLOOR, 1], 1 while unmeasured). Where epoch 1
    ranks configurations at random, most trials then start at epoch 3, and fewer good ones are
    stopped on noise before the searcher hears of them. Where every rung agrees, the draw is
    Tune's, from the same random numbers.

    `explores(trial_id)`: whether the searcher drew that trial at random (tpe.Interleaved). Such a
    trial starts at no rung measured below fidelity.TRUST, nor at the lowest rung until that rung
    is measured to agree: the random trials are what pulls the model off a wrong region, and judged
    at a first epoch where flat curves beat learning ones, they were stopped before the model saw
    them (lcbench_167149, docs/lab/strategies-log.md)."""

    def __init__(self, *args, explores=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.agreement, self.explores = fidelity.RungAgreement(), explores

    def on_trial_add(self, tune_controller, trial):
        super().on_trial_add(tune_controller, trial)  # Tune's draw, from numpy's global generator
        brackets, chosen = rayinternals.asha_brackets(self), rayinternals.asha_brackets(self, of_trials=True)
        first = [min(m for m, _ in rayinternals.rungs(b)) for b in brackets]
        weights = [self.agreement.weight(f) for f in first]
        if self.explores is not None and self.explores(trial.trial_id):
            judged = [w * self.agreement.judges(f, lowest=f == min(first)) for f, w in zip(first, weights)]
            weights = judged if max(judged) > 0 else weights
        tune_p = progress.tune_bracket_shares([len(rayinternals.rungs(b)) for b in brackets])
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

    def _milestones(self) -> frozenset:
        # The brackets are fixed once Tune made them; a scheduler pickled before this cache
        # existed (a resume) builds it on first use.
        if getattr(self, "_milestone_set", None) is None:
            brackets = rayinternals.asha_brackets(self)
            self._milestone_set = frozenset(m for b in brackets for m, _ in rayinternals.rungs(b))
        return self._milestone_set

    def _observe(self, trial_id: str, result: dict) -> None:
        time_attr, metric, _ = rayinternals.objective(self)
        self.agreement.observe_epoch(trial_id, result.get(time_attr), result.get(metric), self._milestones())
