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

import functools
import pickle

import numpy as np
from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler
from ray.tune.search import BasicVariantGenerator, SearchGenerator, Searcher

from tuning import conditions, objectives, results, spaces
from tuning.backend.budget import TimeGate
from tuning.backend import mo, rayinternals
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


class Fifo(mo.StopGrown, TimeGate, InOrder, FIFOScheduler):
    """Every trial runs its full budget (random, grid), unless a metric
    declared to only grow is past its bound (mo.StopGrown)."""


class Asha(TimeGate, InOrder, ASHAScheduler):
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


class Median(TimeGate, InOrder, rayinternals.MedianStoppingRule):
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


class HyperBand(TimeGate, PaperHyperBand):
    """Hyperband brackets as the papers define them (tuning/backend/hyperband.py), time-gated."""


class RandomSearch(BasicVariantGenerator):
    """Tune's random variant generator. `more`: an extension's new trials. Tune restores the saved
    generator but asks it for nothing new on a resume: `more` trials are added from where its
    random stream stopped (new configurations, the same seed lineage), numbered after the others.

    With a scheduler that pauses trials, the search counts as finished only once every trial of
    that scheduler is. Tune keeps a stopped or paused trial's actor for reuse only while its search
    is unfinished or another trial is staged for the resources, and a search whose last trial has
    been created counts as finished: from then on a pause with no trial staged destroyed the
    trial's process and its resume started a new one that imported torch and the trainable again
    (tuning.bench measures a pause and resume both ways). A paused trial is work to come. Tune
    ends the experiment when its trials are done and the search is finished, the same moment:
    nothing waits longer. (A trial paused while every other is finished still loses its process:
    Tune marks it terminated before it decides.)

    `space`: with conditions, every parameter is drawn as usual and the inactive ones are dropped
    before the trial exists (ConditionalTrials), which is conditional sampling: the active ones'
    distribution is the same, and the random stream, resumes and extensions stay Tune's own."""

    def __init__(self, *args, scheduler=None, more: int = 0, space: spaces.Space | None = None,
                 points_to_evaluate: list | None = None, **kwargs):
        points = [{k: Whole(v) if isinstance(v, (list, dict)) else v for k, v in p.items()}
                  for p in points_to_evaluate or []]
        super().__init__(*args, points_to_evaluate=points or None, **kwargs)
        self._scheduler, self._more = scheduler, more
        # Trials per sample: a grid over some parameters (Space.grid) runs each of its points.
        self._per_sample = spaces.mixed_grid_size(space) if space is not None else 1
        wrapped = any(isinstance(v, Whole) for p in points for v in p.values())
        self._params = (space.params if space is not None and (conditions.is_conditional(space.params) or wrapped)
                        else None)

    def get_state(self):
        state = super().get_state()  # the generator's own state; not what this run adds to it
        return state and {k: v for k, v in state.items()
                          if k not in ("_scheduler", "_more", "_params", "_per_sample")}

    def add_configurations(self, experiments):
        super().add_configurations(experiments)
        if self._params is not None:
            for iterator in rayinternals.iterators(self):
                rayinternals.adopt(iterator, ConditionalTrials, params=self._params)

    def restore_from_dir(self, dirpath: str):
        super().restore_from_dir(dirpath)
        if self._more:
            conditional = None if self._params is None else functools.partial(
                rayinternals.adopt, cls=ConditionalTrials, params=self._params)
            rayinternals.add_samples(self, self._more, self._per_sample, adopt_as=conditional)

    def is_finished(self) -> bool:
        return super().is_finished() and (self._scheduler is None or self._scheduler.all_finished())

    def next_trial(self):
        # Whether to make another trial is the generator's own count, not is_finished above; under
        # Hyperband, one trial waits to start at a time (tuning/backend/hyperband.py).
        waits = getattr(self._scheduler, "has_unstarted", lambda: False)()
        return None if waits or BasicVariantGenerator.is_finished(self) else super().next_trial()


class Whole:
    """A warm point's list or dict value (a Choice of them), kept whole on its way through Tune's
    points_to_evaluate, which takes a point's dicts for nested settings to merge into its own and
    its lists for paths into them: Tune sees a leaf, and ConditionalTrials puts the value back as
    it makes the trial."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):  # Tune checks a point against its domain: `value in categories`
        return self.value == (other.value if isinstance(other, Whole) else other)

    __hash__ = None


class ConditionalTrials(rayinternals.TrialIterator):
    """Tune's trial iterator, whose trials leave out the parameters their own values make inactive:
    from the config, the evaluated parameters and the trial's name alike; and whose warm points'
    lists and dicts come back whole (Whole)."""

    # Tune builds its iterators itself (add_configurations, a restored search's pickle), and
    # rayinternals.add_samples an extension's: RandomSearch takes them over as they are
    # (rayinternals.adopt), random stream and position included.
    params: dict

    def create_trial(self, resolved_vars, spec):
        config = {k: v.value if isinstance(v, Whole) else v for k, v in spec.get("config", {}).items()}
        spec = {**spec, "config": config}
        dropped = set(config) - set(conditions.drop_inactive(self.params, config))
        if dropped:
            spec = {**spec, "config": {k: v for k, v in config.items() if k not in dropped}}
            resolved_vars = {path: v for path, v in resolved_vars.items()
                             if not (len(path) == 2 and path[0] == "config" and path[1] in dropped)}
        return super().create_trial(resolved_vars, spec)


class SearcherSearch(SearchGenerator):
    """A Searcher (the lazy grid, BOHB) in Tune's SearchGenerator. `more`: an extension's extra
    trials, counted on from what the restored search had created. With a pausing scheduler, it is
    finished only once that scheduler's trials are, as RandomSearch."""

    def __init__(self, searcher: Searcher, *, scheduler=None, more: int = 0):
        super().__init__(searcher)
        self._scheduler, self._more = scheduler, more

    def restore_from_dir(self, dirpath: str):
        super().restore_from_dir(dirpath)
        if self._more:
            rayinternals.add_suggestions(self, self._more)

    def is_finished(self) -> bool:
        return super().is_finished() and (self._scheduler is None or self._scheduler.all_finished())

    def next_trial(self):
        # SearchGenerator makes a trial whenever is_finished() says no: that must stay its own
        # count, or paused trials would have it make trials without end.
        return None if SearchGenerator.is_finished(self) else super().next_trial()


class LazyGrid(Searcher):
    """Walks the space's grid point by point, the last parameter fastest; num_samples repeats it.
    tune.grid_search expands the whole grid up front, deep-copying the spec for every point: seconds
    per run for counting ones' 65,536 points, before the first trial starts."""

    def __init__(self, space: spaces.Space):
        super().__init__(metric=space.metric, mode=space.mode)
        self.grid = spaces.grid_points(space)
        self.size, self.index = spaces.grid_size(space), 0
        # A conditional grid is its valid combinations, listed once (check_grid bounds how many).
        self.points = list(conditions.grid(space.params, self.grid)) if conditions.is_conditional(space.params) \
            else None

    def suggest(self, trial_id: str):
        i, self.index = self.index % self.size, self.index + 1
        if self.points is not None:
            return dict(self.points[i])
        config = {}
        for key, values in reversed(self.grid.items()):
            i, j = divmod(i, len(values))
            config[key] = values[j]
        return {k: config[k] for k in self.grid}

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False):
        pass

    def save(self, checkpoint_path: str):
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.index, f)

    def restore(self, checkpoint_path: str):
        with open(checkpoint_path, "rb") as f:
            self.index = pickle.load(f)


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
            from tuning.backend.bohb import PaperBOHB

            np.random.seed(seed + spec.extension)  # HpBandSter draws its random fraction from numpy's global generator
            model = (PaperBOHB if strategy == "bohb" else AdaptiveBOHB)(
                space=spaces.to_configspace(space, seed), metric=space.metric, mode=space.mode, seed=seed,
                params=space.params, rule=rule)
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
    if isinstance(scheduler, mo.StopGrown):
        scheduler.rule = rule
    return config, search, scheduler
