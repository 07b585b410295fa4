"""Optuna's TPE with a bounded cost per proposal: past WINDOW finished trials, it sees the best
tenth of that many complete ones and the most recent others, not every trial of the run.

TPE fits its two densities to every finished trial at each proposal, so a proposal costs time in
proportion to the trials so far: 68 ms at 1,000 and 186 ms at 10,000 on LCBench's 7 parameters
(``python -m tuning.bench --only scale``, docs/performance.md), and the Tune loop waits for each
(ray#18903). Its good set is the best ``min(ceil(0.1 n), 25)`` trials, at most 25, which the best
tenth of the window always holds; its bad density is fitted to the rest of the window: the recent
trials, where the search is now, which Optuna's own weights already favour. Up to WINDOW finished
trials (every run of today's sizes) the sampler sees exactly what TPESampler sees, so its proposals
are TPESampler's. With several objectives there is no single "best" to keep: the window is not
applied (docs/strategies.md). tpe over several objectives or under constraints also shows the
trials stopped early in the order of `pruned_by_front`.
"""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

WINDOW = 1000
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# A trial stopped below the full budget over several objectives: where it stopped and its point there
# (tuning.backend.mo.Rule.point: the objectives to minimise, the total violation), set by tpe.MultiObjective.
RUNG_ATTR = "tuning_rung"


def windowed(trials: list, window: int, minimize: bool) -> list:
    """The trials TPE is shown: all of them up to `window` finished ones; past that, the best
    window // 10 complete ones (by value) and the most recent others up to `window`, in the run's
    order, with every trial not finished (running, failed) kept as it is."""
    finished = [t for t in trials if t.state in FINISHED]
    if len(finished) <= window:
        return trials
    complete = sorted((t for t in finished if t.state == TrialState.COMPLETE and t.value is not None),
                      key=lambda t: t.value if minimize else -t.value)
    keep = {t.number for t in complete[:window // 10]}
    for t in reversed(finished):
        if len(keep) >= window:
            break
        keep.add(t.number)
    return [t for t in trials if t.state not in FINISHED or t.number in keep]


def pruned_by_front(trials: list) -> list:
    """The trials with the pruned ones last, in the order Optuna gives pruned trials of one objective
    (_get_pruned_trial_score: the furthest first, then the best where they stopped), "best" by
    several objectives: tuning.backend.mo.order of their RUNG_ATTR points. Optuna's own score reads
    study.direction, which a study of several objectives lacks, so these trials are told without
    intermediate values and TPE keeps them in the order shown: it fills its good set with pruned
    trials only where the complete ones are too few, and then with these first."""
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    if not pruned:
        return trials
    import numpy as np

    from tuning.backend import mo

    rungs = [t.user_attrs.get(RUNG_ATTR) or {} for t in pruned]
    steps = np.array([r.get("step", 0) for r in rungs], dtype=float)
    m = max((len(r["values"]) for r in rungs if "values" in r), default=1)
    values = np.array([r.get("values", [np.nan] * m) for r in rungs], dtype=float).reshape(len(pruned), m)
    violations = np.array([r.get("violation", 0.0) for r in rungs], dtype=float)
    place = np.empty(len(pruned))
    for step in np.unique(steps):
        at = np.flatnonzero(steps == step)
        place[at[mo.order(values[at], violations[at])]] = np.arange(len(at))
    shown = [pruned[i] for i in np.lexsort([place, -steps])]
    return [t for t in trials if t.state != TrialState.PRUNED] + shown


class _Seen:
    """A study as the sampler sees it: Study, except that its trials are `windowed` (one objective),
    or with `by_front` its pruned trials `pruned_by_front` (and no window: the window's "best" is by
    one value, blind to constraints). One view per count of trials and states asked for, so a
    proposal's several calls filter once."""

    def __init__(self, study: optuna.Study, window: int, by_front: bool = False):
        self._study, self._window, self._by_front, self._cache = study, window, by_front, {}

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_study", "_window", "_by_front", "_cache"):
            raise AttributeError(name)
        return getattr(self._study, name)

    def _show(self, trials: list) -> list:
        if self._by_front:
            return pruned_by_front(trials)
        if len(self._study.directions) > 1:
            return trials
        return windowed(trials, self._window, self._study.direction == optuna.study.StudyDirection.MINIMIZE)

    def _get_trials(self, deepcopy: bool = False, states=None, use_cache: bool = False) -> list:
        trials = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        if deepcopy:
            return self._show(trials)
        key = (len(trials), tuple(states) if states is not None else None)
        if key not in self._cache:
            self._cache = {key: self._show(trials)}
        return self._cache[key]

    def get_trials(self, deepcopy: bool = True, states=None) -> list:
        return self._get_trials(deepcopy=deepcopy, states=states, use_cache=False)


class WindowedTPE(optuna.samplers.TPESampler):
    """TPESampler (its defaults, seeded) shown `windowed` trials of a single-objective study; with
    `by_front` (tpe.MultiObjective: several objectives, or a constraint) its pruned trials
    `pruned_by_front`, unwindowed."""

    def __init__(self, *args, window: int = WINDOW, by_front: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.window, self.by_front = window, by_front
        self._seen: dict[int, _Seen] = {}

    def __getstate__(self):  # OptunaSearch is pickled with its sampler for a resume: no views of studies
        return {**self.__dict__, "_seen": {}}

    def _view(self, study):
        seen = self._seen.get(id(study))
        if seen is None or seen._study is not study:
            # A sampler pickled before by_front existed (a resumed run) has none: it showed no order.
            seen = self._seen[id(study)] = _Seen(study, self.window, getattr(self, "by_front", False))
        return seen

    def sample_relative(self, study, trial, search_space):
        return super().sample_relative(self._view(study), trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return super().sample_independent(self._view(study), trial, param_name, param_distribution)
