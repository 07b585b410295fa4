"""What each search strategy hands tune.run: (config, search_alg, scheduler) over the space's one
declaration, for a first run, a resume, an extension (--add-samples) and a warm start. Imported
lazily by tuning.backend (it imports Ray).

An extension is a resume that asks for more trials. Tune restores the trials (finished ones are
kept as they are) and, where a search has saved state, that state:
- random, ASHA, median, Hyperband: Tune's random variant generator is restored and goes on drawing
  from where its random stream stopped: new configurations, the same seed lineage. ASHA's rungs and
  the median rule's results, which Tune does not save, are rebuilt from every earlier result, so
  new trials are judged against all of them.
- grid: the lazy grid's position is restored and it walks on; points already run are never
  handed out again.
- BOHB: its saved state is restored (the model and every observation), and it proposes more.
"""

from __future__ import annotations

import numpy as np
from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler
from tuning import objectives, results, spaces
from tuning.backend.budget import TimeGate
from tuning.backend import mo, rayinternals
from tuning.backend.searches import LazyGrid, RandomSearch, SearcherSearch
from tuning.backend.slots import SlotGate
from tuning.backend.agreeing import AgreeingBrackets
from tuning.backend.hyperband import PaperHyperBand, PauseEveryResult


def to_tune(space: spaces.Space) -> dict:
    """The space's declarations as Tune's sampling distributions, for random search and ASHA; the
    parameters Space.grid names as Tune's grid_search over their grid points, which Tune runs
    num_samples times, each trial drawing the rest afresh."""

    def one(p: spaces.Param):
        if isinstance(p, spaces.LogUniform):
            return tune.loguniform(p.low, p.high)
        if isinstance(p, spaces.Uniform):
            return tune.uniform(p.low, p.high)
        if isinstance(p, spaces.IntUniform):
            return tune.randint(p.low, p.high + 1)  # Tune's upper bound is exclusive
        if isinstance(p, spaces.IntLogUniform):
            return tune.lograndint(p.low, p.high + 1)
        return tune.choice(list(p.values))

    return {k: tune.grid_search(p.grid_values()) if k in space.grid else one(p) for k, p in space.params.items()}


class InOrder:
    """FIFOScheduler's choice of the next trial, the first PENDING one in the order trials were
    added or else the first PAUSED one, without reading every finished trial before it at every
    step. Tune's own reads the whole list from its first trial on each step, so at 10,000 trials
    of nothing its last tenth cost 1.7 times its first (docs/performance.md, "Thousands of
    trials"). A trial TERMINATED or ERROR is never chosen again (a failure with retries left goes
    back to PENDING), so the finished front of the order is passed over once."""

    def on_trial_add(self, tune_controller, trial: Trial):
        super().on_trial_add(tune_controller, trial)
        self.__dict__.setdefault("_order", []).append(trial)

    def choose_trial_to_run(self, tune_controller):
        order, start = self.__dict__.setdefault("_order", []), self.__dict__.get("_finished", 0)
        while start < len(order) and order[start].status in (Trial.TERMINATED, Trial.ERROR):
            start += 1
        self._finished = start
        for wanted in (Trial.PENDING, Trial.PAUSED):
            for i in range(start, len(order)):
                if order[i].status == wanted:
                    return order[i]
        return None


class Fifo(mo.StopGrown, SlotGate, TimeGate, InOrder, FIFOScheduler):
    """Every trial runs its full budget (random, grid), unless a metric
    declared to only grow is past its bound (mo.StopGrown)."""


class Asha(SlotGate, TimeGate, InOrder, ASHAScheduler):
    """ASHA whose rungs can be rebuilt from earlier results (Tune saves no scheduler state)."""

    def rebuild(self, rows: dict[str, list[dict]]) -> int:
        """Record every earlier trial's result at each rung it reached; returns how many."""
        recorded, time_attr = 0, rayinternals.objective(self)[0]
        for bracket in rayinternals.asha_brackets(self):
            for milestone, rung in rayinternals.rungs(bracket):
                for trial_id, trial_rows in rows.items():
                    row = next((r for r in trial_rows if r.get(time_attr) == milestone), None)
                    value = None if row is None else self._rung_value(row)
                    if value is not None:
                        rung[trial_id] = value
                        recorded += 1
        return recorded

    def _rung_value(self, row: dict):
        """What a rung records of a result (None: nothing): the metric, larger is better."""
        _, metric, sign = rayinternals.objective(self)
        value = row.get(metric)
        return sign * value if isinstance(value, (int, float)) and np.isfinite(value) else None


class TpeBrackets(AgreeingBrackets, Asha):
    """tpe's asynchronous brackets, drawn away from a first rung that ranks unlike the top
    (tuning/backend/agreeing.py)."""


class MoAsha(mo.FrontAsha, Asha):
    """MO-ASHA (Schmucker et al., 2021): ASHA whose rungs promote by non-dominated sorting, feasible
    first (tuning/backend/mo.py), and stop a trial past the bound of a metric that only grows."""


class _Earlier(str):
    """A trial of an earlier segment, by its id, among the MedianStoppingRule's trials: its results
    count until the trial itself reports again (a resumed or extended run)."""


class Median(SlotGate, TimeGate, InOrder, rayinternals.MedianStoppingRule):
    """Tune's MedianStoppingRule (Google Vizier's rule, Golovin et al., KDD 2017) on epochs: from
    the grace period on, a trial stops when its best value so far is worse than the median of the
    other trials' running means up to the same epoch, once at least 3 trials got there.

    Two changes. A trial with too few others to compare against goes on: Tune's rule pauses it to
    let waiting trials catch up, which under random search (no order to keep) only costs a
    checkpoint round trip per epoch. And its results, which Tune does not save, are rebuilt from
    every earlier result on a resume, as ASHA's rungs are."""

    def too_few_others(self, tune_controller, trial, time):
        return TrialScheduler.CONTINUE

    def rebuild(self, rows: dict[str, list[dict]]) -> int:
        """Every earlier trial's results, by id until it reports again; returns how many."""
        time_attr, metric, _ = rayinternals.objective(self)
        kept = rayinternals.median_results(self)
        for trial_id, trial_rows in rows.items():
            # The last result at each epoch: an epoch trained again after a crash is reported twice.
            last = {r[time_attr]: r for r in trial_rows if time_attr in r
                    and results.is_number(r.get(metric)) and not r.get(results.METRIC_ERROR)}
            if last:
                kept[_Earlier(trial_id)] = [last[t] for t in sorted(last)]
        return sum(map(len, kept.values()))

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        # Its own earlier results, once the restored trial reports: one history, not two trials.
        kept, time_attr = rayinternals.median_results(self), rayinternals.objective(self)[0]
        earlier = kept.pop(_Earlier(trial.trial_id), None)
        if earlier is not None:
            kept[trial] = [r for r in earlier if r[time_attr] < result.get(time_attr, 0)]
        return super().on_trial_result(tune_controller, trial, result)


class HyperBand(SlotGate, TimeGate, PaperHyperBand):
    """Hyperband brackets as the papers define them (tuning/backend/hyperband.py), time-gated."""


# The median stopping rule compares a trial with at least this many others at its epoch (Tune's
# default; Optuna's MedianPruner waits for 5 finished trials).
MEDIAN_MIN_TRIALS = 3


def build(spec, budget=None):
    """(config, search_alg, scheduler) for spec (a backend.RunSpec). `budget`: a TimeBudget the
    scheduler stops starting trials at."""
    space, strategy, seed, more = spec.space, spec.strategy, spec.seed, spec.add_samples
    more = more if spec.resume else 0
    refusal = objectives.strategy_refusal(space, strategy)  # tuning.api refuses it first; compare does not
    if refusal:
        raise spaces.SpaceError(refusal)
    rule = mo.Rule.of(space)  # None for one metric: every scheduler as it was
    if strategy == "tpe" and objectives.multi(space):  # MOTPE under MO-ASHA's brackets (tuning/backend/tpe.py)
        from tuning import progress
        from tuning.backend import tpe

        first = min(space.grace_period, spec.max_epochs)
        np.random.seed(seed + spec.extension)  # Tune draws each trial's bracket from numpy's global generator
        # Tune's own bracket draw: the agreeing one (TpeBrackets) ranks rungs by one metric.
        scheduler = MoAsha(rule=rule, metric=space.metric, mode=space.mode, max_t=spec.max_epochs, grace_period=first,
                           reduction_factor=space.reduction_factor,
                           brackets=len(progress.async_brackets(first, spec.max_epochs, space.reduction_factor)))
        search = SearcherSearch(tpe.multi_objective_searcher(space, seed, spec.max_epochs, spec.warm_points),
                                more=more)
        config = {}
    elif strategy == "grid":
        scheduler, search = Fifo(), SearcherSearch(LazyGrid(space), more=more)
        config = {}
    elif strategy in ("random", "asha", "median"):
        first = min(space.grace_period, spec.max_epochs)
        if strategy == "asha":
            rungs = dict(metric=space.metric, mode=space.mode, max_t=spec.max_epochs, grace_period=first,
                         reduction_factor=space.reduction_factor)
            scheduler = MoAsha(rule=rule, **rungs) if rule else Asha(**rungs)
        elif strategy == "median":
            scheduler = Median(time_attr="training_iteration", metric=space.metric, mode=space.mode,
                               grace_period=first, min_samples_required=MEDIAN_MIN_TRIALS)
        else:
            scheduler = Fifo()
        search = RandomSearch(random_state=seed, more=more, points_to_evaluate=spec.warm_points or None,
                              space=space)
        config = to_tune(space)
    elif strategy == "tpe":  # Optuna's TPE under asynchronous Hyperband brackets (tuning/backend/tpe.py)
        from tuning import progress
        from tuning.backend import tpe

        first = min(space.grace_period, spec.max_epochs)
        np.random.seed(seed + spec.extension)  # Tune draws each trial's bracket from numpy's global generator
        searcher = tpe.searcher(space, seed, spec.max_epochs, spec.warm_points)
        scheduler = TpeBrackets(metric=space.metric, mode=space.mode, max_t=spec.max_epochs, grace_period=first,
                                reduction_factor=space.reduction_factor, explores=searcher.explores,
                                brackets=len(progress.async_brackets(first, spec.max_epochs, space.reduction_factor)))
        search = SearcherSearch(searcher, more=more)
        config = {}
    elif strategy in ("hyperband", "bohb", "adaptive"):
        model = None
        if strategy in ("bohb", "adaptive"):
            # hpbandster, ConfigSpace, scipy: seconds, for these alone
            from tuning.backend.adaptive import AdaptiveBOHB, AdaptiveHyperBand
            from tuning.backend.bohb import PaperBOHB, configspace

            np.random.seed(seed + spec.extension)  # HpBandSter draws its random fraction from numpy's global generator
            model = (PaperBOHB if strategy == "bohb" else AdaptiveBOHB)(
                space=configspace(space, seed), metric=space.metric, mode=space.mode, seed=seed,
                params=space.params, rule=rule,
                points_to_evaluate=[spaces.to_positions(space.params, p) for p in spec.warm_points] or None)
            model.warm(spec.warm_rows)
        bands = dict(time_attr="training_iteration", metric=space.metric, mode=space.mode, max_t=spec.max_epochs,
                     reduction_factor=space.reduction_factor, rule=rule,
                     observe=model.observe if model else None)
        scheduler = (AdaptiveHyperBand(**bands, model=model, seed=seed + spec.extension) if strategy == "adaptive"
                     else HyperBand(**bands))
        search = (SearcherSearch(model, scheduler=scheduler, more=more) if model else
                  RandomSearch(scheduler=scheduler, random_state=seed, more=more,
                               points_to_evaluate=spec.warm_points or None, space=space))
        config = {} if model else to_tune(space)
    else:
        raise spaces.SpaceError(f"strategy {strategy!r} unknown: use one of {', '.join(spaces.STRATEGIES)}")
    if spec.pause_every_result:  # tuning.bench: random proposals, each trial paused after every result
        scheduler = PauseEveryResult()
        # Tune's own generator, finished once its trials exist: what RandomSearch's open search avoids.
        open_search = spec.pause_every_result != "new_actor"
        search = RandomSearch(scheduler=scheduler if open_search else None, random_state=seed)
    scheduler.budget = budget
    if spec.max_concurrent_trials and isinstance(scheduler, SlotGate):
        scheduler.limit, search.gate = spec.max_concurrent_trials, scheduler
    if isinstance(scheduler, mo.StopGrown):
        scheduler.rule = rule
    return config, search, scheduler
