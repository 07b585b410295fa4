"""The `adaptive` strategy: BOHB that measures whether its low rungs mislead, and stops trusting
them where they do. Imported lazily by tuning.backend (it imports Ray and HpBandSter).

BOHB (Falkner et al., ICML 2018) spends most of Hyperband's budget on the lowest rungs and fits
its model on the largest budget with enough points, which early in a run is the lowest. Where the
first epochs rank configurations like the last (counting ones) that is what makes it cheap; where
they rank them almost at random (LCBench's real learning curves: Spearman 0.0 to 0.35 between
epochs 1 and 27 on the development tasks, 0.5 to 0.9 for epoch 3) the brackets keep the wrong
trials and the model learns noise, and nothing corrects it.

Both parts here follow what the run has measured so far (tuning.fidelity.agreement: Spearman's ρ
between each rung and the highest rung that at least MIN_TRIALS trials reached, over the trials
that reached both):

1. Which bracket opens next. Each bracket weighs the agreement of its first rung with the top,
   ρ clipped to [FLOOR, 1]; a first rung not yet measured weighs 1. Brackets come in Hyperband's
   order, each opened with probability its weight over the largest weight, else the next is
   tried: over a run the brackets are in proportion to their weights, and where every weight is
   equal the sequence is BOHB's exactly. This is Hyper-Tune's bracket selection (Li et al.,
   "Hyper-Tune: Towards Efficient Hyper-parameter Tuning at Scale", VLDB 2022), with the rank
   correlation of measured results in place of its ranking loss of per-fidelity models.
2. Which budget's densities propose. The largest budget with a model whose rung agrees with the
   top (ρ >= TRUST, or not yet measurable, or the top itself); if the only models are on rungs
   that disagree, the proposal is random. BOHB takes the largest budget with a model, whatever
   it ranks like.

Where every rung agrees (ρ near 1) the weights are all about 1 and the model budget is BOHB's: it
is BOHB. `bohb` and `hyperband` stay as their papers define them, for comparisons.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from tuning import fidelity
from tuning.backend import mo, rayinternals
from tuning.backend.bohb import PaperBOHB, VectorisedBOHB
from tuning.backend.budget import TimeGate
from tuning.backend.hyperband import PaperHyperBand
from tuning.backend.slots import SlotGate

log = logging.getLogger(__name__)

MIN_TRIALS, FLOOR, TRUST = fidelity.MIN_TRIALS, fidelity.FLOOR, fidelity.TRUST
# Under its old name too: a run saved before the class moved to tuning.fidelity pickled it as this.
Agreement = fidelity.RungAgreement


class AgreeingBOHB(VectorisedBOHB):
    """VectorisedBOHB proposing from the largest budget that agrees with the top."""

    agreement = Agreement()  # replaced by AdaptiveBOHB with its run's own

    def model_budget(self) -> float | None:
        usable = [b for b in self.kde_models if self.agreement.trusted(b)]
        return max(usable) if usable else None


class FrontsAgreeingBOHB(mo.FrontsModel, AgreeingBOHB):
    """AgreeingBOHB splitting by several objectives and constraints (mo.FrontsModel)."""


class AdaptiveBOHB(PaperBOHB):
    """PaperBOHB whose observations also feed the run's Agreement, and whose model is AgreeingBOHB.
    With several objectives the agreement between rungs is measured on the first objective."""

    model_class, fronts_class = AgreeingBOHB, FrontsAgreeingBOHB

    def __init__(self, *args, **kwargs):
        self.agreement = Agreement()
        super().__init__(*args, **kwargs)

    def make_model(self, space, settings: dict):
        model = super().make_model(space, settings)
        model.agreement = self.agreement  # one object: TuneBOHB's save pickles both together
        return model

    def observe(self, trial_id: str, budget: float, result: dict) -> None:
        value = result.get(self.metric)
        if isinstance(value, (int, float)) and math.isfinite(value):
            self.agreement.observe(trial_id, budget, value)
        super().observe(trial_id, budget, result)

    def one_fidelity(self) -> None:
        """Every trial is trained to max_t (one rung: a table, a trainer with one result), so there
        is no rung to measure and nothing for the model to be misled by: no random fraction past the
        first points, as Optuna's TPE proposes. BOHB's third of random proposals cost up to 2x in
        regret on all twelve HPOBench and FCNet tables (docs/strategies.md#adaptive); on LCBench's
        curves, where a low rung can mislead, it stays: without it the tails grew."""
        self.bohber.random_fraction = 0.0

    def warm(self, rows: list[dict]) -> None:
        for row in rows:  # an earlier run's curves say as much about the rungs as this run's
            value = row.get(self.metric)
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.agreement.observe(f"warm:{row['trial_id']}", row["training_iteration"], value)
        super().warm(rows)


class AdaptiveHyperBand(SlotGate, TimeGate, PaperHyperBand):
    """PaperHyperBand whose next bracket's first rung is drawn by the agreement weights."""

    def __init__(self, *args, model: AdaptiveBOHB, seed: int = 0, max_t: int = 81, **kwargs):
        super().__init__(*args, max_t=max_t, **kwargs)
        # The model, not its Agreement: a resume restores the model's state into a new object.
        self.model, self._rng = model, np.random.default_rng(seed)
        self.chosen: list[int] = []  # the s of each bracket opened, in order
        if self._rung_budgets() - {0} == {max_t}:  # every bracket starts at max_t: one fidelity
            model.one_fidelity()

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        # Every epoch at a rung's budget, whatever bracket the trial runs in, as tpe's brackets do
        # (agreeing.py). Rung results alone left a rung unmeasured once the top moved past it: few
        # trials that started at epoch 1 reach epoch 27, so its bracket went back to weight 1.
        time_attr, metric, _ = rayinternals.objective(self)
        self.model.agreement.observe_epoch(trial.trial_id, result.get(time_attr), result.get(metric),
                                           self._rung_budgets())
        return super().on_trial_result(tune_controller, trial, result)

    def _rung_budgets(self) -> frozenset:
        if getattr(self, "_budgets", None) is None:  # a scheduler pickled before this existed: now
            self._budgets = frozenset(self.first_budget(k) for k in range(self.brackets_per_band))
        return self._budgets

    def create_bracket(self, s: int):
        # Hyperband's order (s is the bracket Ray would open next), each bracket opened with
        # probability weight / the largest weight, else the next in order is tried: the same mix
        # as drawing brackets by weight, and exactly BOHB's sequence where every weight is equal.
        order = [k % self.brackets_per_band for k in range(s, s - self.brackets_per_band, -1)]
        weights = {k: self.model.agreement.weight(self.first_budget(k)) for k in order if self.first_budget(k) > 0}
        top = max(weights.values())
        chosen = next(k for k in order if k in weights and (weights[k] >= top or self._rng.random() < weights[k] / top))
        self.chosen.append(chosen)
        log.debug("bracket s=%d (first rung %s) of weights %s", chosen, self.first_budget(chosen), weights)
        return super().create_bracket(chosen)
