"""The tpe strategy: Optuna's TPE sampler through Ray's OptunaSearch, under the same Hyperband
brackets as hyperband and bohb (tuning/backend/hyperband.py). Imported lazily (it imports Ray).

This is TPE the way Ray users run it with a Hyperband scheduler: each trial's value is the
metric at the budget where it stopped, early-stopped trials included, and TPE treats them alike.
BOHB's model instead keeps one density per budget; the comparison in docs/comparisons.md shows
what that difference is worth. Optuna's own sampler is used as it ships (TPESampler with its
defaults, seeded), so a comparison against it is against what users would leave for.
"""

from __future__ import annotations

import optuna
from ray.tune.search.optuna import OptunaSearch

from tuning import conditions, spaces


class DefineByRun:
    """The space as an Optuna define-by-run function: parents first, and a parameter asked for
    only where its conditions hold, so an inactive one is never sampled and TPE fits each
    parameter on the trials where it existed. A class, not a closure: OptunaSearch pickles it
    with its state for resumes."""

    def __init__(self, params: dict):
        self.params = params

    def __call__(self, trial) -> None:
        chosen: dict = {}
        for name in conditions.order(self.params):
            if conditions.holds(self.params[name], chosen):
                chosen[name] = _suggest(trial, name, self.params[name])


def _suggest(trial, name: str, p: spaces.Param):
    if isinstance(p, (spaces.LogUniform, spaces.Uniform)):
        return trial.suggest_float(name, p.low, p.high, log=isinstance(p, spaces.LogUniform))
    if isinstance(p, (spaces.IntUniform, spaces.IntLogUniform)):
        return trial.suggest_int(name, p.low, p.high, log=isinstance(p, spaces.IntLogUniform))
    return trial.suggest_categorical(name, list(p.values))


def searcher(space: spaces.Space, seed: int, points: list[dict] | None = None) -> OptunaSearch:
    """OptunaSearch over the space, seeded; `points`: configurations to run first (a warm start)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial otherwise
    return OptunaSearch(space=DefineByRun(space.params), metric=space.metric, mode=space.mode,
                        sampler=optuna.samplers.TPESampler(seed=seed), points_to_evaluate=points or None)
