"""What proposes the trials: Tune's random variant generator (RandomSearch), a Searcher such as
BOHB's or Optuna's in Tune's SearchGenerator (SearcherSearch), and the lazy grid. Each makes a trial
only while the scheduler has a slot for it (tuning/backend/slots.py), and, under Hyperband, once the
last one it made has started. Imported lazily by tuning.backend (it imports Ray).
"""

from __future__ import annotations

import functools
import pickle

from ray.tune.search import BasicVariantGenerator, SearchGenerator, Searcher

from tuning import conditions, spaces
from tuning.backend import rayinternals, slots


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
        self.gate = None  # the scheduler whose slots a trial waits for (slots.SlotGate), where a limit is set
        # Trials per sample: a grid over some parameters (Space.grid) runs each of its points.
        self._per_sample = spaces.mixed_grid_size(space) if space is not None else 1
        wrapped = any(isinstance(v, Whole) for p in points for v in p.values())
        self._params = (space.params if space is not None and (conditions.is_conditional(space.params) or wrapped)
                        else None)

    def get_state(self):
        state = super().get_state()  # the generator's own state; not what this run adds to it
        return state and {k: v for k, v in state.items()
                          if k not in ("_scheduler", "_more", "_params", "_per_sample", "gate")}

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
        waits = getattr(self._scheduler, "has_unstarted", lambda: False)() or not slots.free(self.gate)
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
        self.gate = None  # as RandomSearch's

    def restore_from_dir(self, dirpath: str):
        super().restore_from_dir(dirpath)
        if self._more:
            rayinternals.add_suggestions(self, self._more)

    def is_finished(self) -> bool:
        return super().is_finished() and (self._scheduler is None or self._scheduler.all_finished())

    def next_trial(self):
        # SearchGenerator makes a trial whenever is_finished() says no: that must stay its own
        # count, or paused trials would have it make trials without end.
        return None if SearchGenerator.is_finished(self) or not slots.free(self.gate) else super().next_trial()


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
