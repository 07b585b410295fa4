"""Several objectives and constraints in the strategies that stop trials early: one order of a
rung's trials, which ASHA (MO-ASHA), Hyperband's brackets, BOHB's good/bad split and `adaptive`
share, and the early stop of a trial past the bound of a metric that only grows. Imported lazily
by tuning.backend (it imports Ray).

The order (docs/strategies.md, "Several objectives"):
1. Feasible trials with every objective measured, by non-domination rank (moocore's
   non-dominated sorting, as tuning.objectives ranks a run's tables), and within a front by
   hypervolume contribution, largest first (moocore's hv_contributions, against a reference point
   a tenth of the range past the worst feasible value of each objective), then by the objectives
   in their declared order.
2. Feasible trials missing an objective (a failed result: HpBandSter counts it as infinitely bad).
3. Infeasible trials, by total violation (Deb's rules, Deb 2000).

A rung promotes the first ceil(n / eta) of its n trials in that order, at least one: Hyperband's
count for a complete rung, and for ASHA's asynchronous rung the trial that just arrived is
promoted when it is among the first ceil(n / eta) of the n it has seen, itself included
(MO-ASHA, Schmucker et al. 2021). So a trial is never promoted over one that dominates it or is
feasible where it is not: that one comes first.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from ray.tune.schedulers.trial_scheduler import TrialScheduler

from tuning import objectives
from tuning.backend import rayinternals

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rule:
    """A space's objectives (name -> 'min' or 'max', in order) and constraints, as the schedulers
    and BOHB's model read a result by them."""

    objectives: dict
    constraints: dict

    @classmethod
    def of(cls, space) -> Rule | None:
        """The space's rule, or None for a space of one metric and no constraint."""
        return cls(objectives.of(space), dict(space.constraints)) if objectives.multi(space) else None

    def point(self, result: dict) -> tuple[np.ndarray, float]:
        """(the objectives as numbers to minimise, NaN where missing; the total violation)."""
        values = []
        for name, way in self.objectives.items():
            v = result.get(name)
            ok = isinstance(v, (int, float, np.number)) and not isinstance(v, bool) and math.isfinite(v)
            values.append((v if way == "min" else -v) if ok else math.nan)
        return np.array(values, dtype=float), objectives.violation(result, self.constraints)

    def grown_past(self, result: dict) -> str | None:
        return objectives.grown_past(result, self.constraints)


def order(values, violations) -> np.ndarray:
    """Indices of the points best first, by the module docstring's order. `values`: n x m numbers
    to minimise (NaN: missing); `violations`: n totals, 0 for a feasible point."""
    import moocore

    violations = np.asarray(violations, dtype=float)
    n = len(violations)
    values = np.asarray(values, dtype=float).reshape(n, -1)
    group = np.where(violations > 0, 2, np.where(np.isfinite(values).all(axis=1), 0, 1))
    rank, gain = np.zeros(n), np.zeros(n)
    ok = group == 0
    if ok.any():
        points = values[ok]
        ranks = moocore.pareto_rank(points)
        contribution = np.zeros(len(points))
        if points.shape[1] > 1:
            # A tenth of the range past the worst: scaling or shifting an objective (ms or s, a loss
            # or its log's offset) scales every contribution alike, so the order does not change.
            worst, best = points.max(axis=0), points.min(axis=0)
            ref = worst + np.where(worst > best, 0.1 * (worst - best), 1.0)
            for r in np.unique(ranks):
                front = ranks == r
                contribution[front] = moocore.hv_contributions(points[front], ref=ref)
        rank[ok], gain[ok] = ranks, contribution
    filled = np.where(np.isnan(values), np.inf, values)
    # np.lexsort sorts by its last key first: group, violation, rank, contribution, objectives in order.
    return np.lexsort([np.arange(n), *filled.T[::-1], -gain, rank, violations, group])


def promoted_count(n: int, eta: float) -> int:
    """How many of a rung's n trials go on: the first ceil(n / eta), at least one."""
    return max(1, math.ceil(n / eta - 1e-9))


def positions(points: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """Each point's place in `order` (0: best)."""
    best_first = order(np.array([p[0] for p in points]), [p[1] for p in points])
    place = np.empty(len(points), dtype=int)
    place[best_first] = np.arange(len(points))
    return place


# ---------------------------------------------------------------- MO-ASHA

class FrontRungs(rayinternals.AsyncBracket):
    """Ray's ASHA bracket whose rungs record each trial's point (objectives and violation) and
    promote by `order`: a trial reaching a rung goes on when it is among the first
    promoted_count(n) of the n trials recorded there, itself included."""

    latest: dict  # trial_id -> its last point, set by the scheduler before each decision
    decisions: list  # (rung, trial_id, place, n, promoted), in order: what tests and logs read

    def on_result(self, trial, cur_iter: int, cur_rew) -> str:
        point = self.latest.pop(trial.trial_id, None)
        if point is None:
            return TrialScheduler.CONTINUE
        for milestone, recorded in rayinternals.rungs(self):
            if cur_iter < milestone or trial.trial_id in recorded:
                continue
            seen = [*recorded.values(), point]
            place = int(positions(seen)[-1])
            go_on = place < promoted_count(len(seen), self.rf)
            self.decisions.append((milestone, trial.trial_id, place, len(seen), go_on))
            recorded[trial.trial_id] = point
            return TrialScheduler.CONTINUE if go_on else TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def debug_str(self) -> str:
        # Tune's progress table prints each rung's cutoff, a number that several objectives lack.
        return "Bracket: " + " | ".join(f"Iter {m:.3f}: {len(r)} trials, {sum(p[1] == 0 for p in r.values())} "
                                        "feasible" for m, r in rayinternals.rungs(self))


class StopGrown:
    """A scheduler mixin: a trial whose metric declared to only grow is past its '<=' bound stops
    at that result (it can never meet the constraint again). `rule`: None stops nothing."""

    rule: Rule | None = None

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        name = self.rule.grown_past(result) if self.rule is not None else None
        if name is not None:
            log.info("%s stopped: %s = %s is past its bound %s and only grows", trial.trial_id, name,
                     result.get(name), objectives.growing(self.rule.constraints)[name])
            return TrialScheduler.STOP
        return super().on_trial_result(tune_controller, trial, result)


class FrontAsha(StopGrown):
    """A mixin over ASHAScheduler (strategies.MoAsha): MO-ASHA. Its brackets are FrontRungs, fed
    each trial's point before Tune's scalar path decides; `rule` must be set."""

    def __init__(self, *args, rule: Rule, **kwargs):
        super().__init__(*args, **kwargs)
        self.rule, self._latest = rule, {}
        for bracket in rayinternals.asha_brackets(self):
            rayinternals.adopt(bracket, FrontRungs, latest=self._latest, decisions=[])

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        self._latest[trial.trial_id] = self.rule.point(result)
        return super().on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller, trial, result: dict):
        if result:
            self._latest[trial.trial_id] = self.rule.point(result)
        super().on_trial_complete(tune_controller, trial, result)

    def decisions(self) -> list[tuple]:
        return [d for bracket in rayinternals.asha_brackets(self) for d in bracket.decisions]

    def _rung_value(self, row: dict):
        # A resume rebuilds the rungs (strategies.Asha.rebuild) with each earlier result's point.
        return self.rule.point(row) if self.rule.objectives.keys() & row.keys() else None


# ---------------------------------------------------------------- Hyperband and BOHB

def split(rule: Rule, trials: list, results: dict, keep: int) -> tuple[list, list]:
    """(good, bad) of a complete rung: the first `keep` of its trials in `order`, by their results."""
    if not trials:
        return [], []
    place = positions([rule.point(results[t]) for t in trials])
    ranked = [t for _, t in sorted(zip(place, range(len(trials))))]
    return [trials[i] for i in ranked[:keep]], [trials[i] for i in ranked[keep:]]


class FrontsModel:
    """A mixin over BOHB's config generator (bohb.VectorisedBOHB, adaptive.AgreeingBOHB): the good
    and bad densities split a budget's results by `order` instead of by one loss. MOTPE's split
    (Ozaki et al., JAIR 2022): non-domination rank, then hypervolume contribution; infeasible
    results after every feasible one. Each result comes as a job with a `point`; HpBandSter's
    loss list for the budget is rewritten to each result's place in the order (0: best) before it
    fits, so its split, its window and everything else it does with losses stay as they are."""

    def new_result(self, job, update_model=True):
        point = getattr(job, "point", None)
        if point is None:  # a plain job: HpBandSter's own
            return super().new_result(job, update_model)
        budget = job.kwargs["budget"]
        kept = self.__dict__.setdefault("points", {}).setdefault(budget, [])
        place = positions([*kept, point]).astype(float)
        if budget in self.losses:
            self.losses[budget] = list(place[:-1])
        job.result = {"loss": float(place[-1])}
        had = len(self.configs.get(budget, ()))
        super().new_result(job, update_model)
        if len(self.configs.get(budget, ())) > had:  # HpBandSter kept it (no model on a larger budget yet)
            self.points[budget].append(point)

    def _trim(self, budget):
        keep = super()._trim(budget)
        points = self.__dict__.get("points", {}).get(budget)
        if points is not None:
            self.points[budget] = [points[i] for i in keep]
        return keep
