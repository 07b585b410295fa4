"""BOHB's searcher and model: TuneBOHB fed each rung result once by PaperHyperBand
(tuning/backend/hyperband.py), and HpBandSter's config generator with a categorical kernel that
learns, support for conditional spaces, and vectorised proposals (docs/strategies.md says what
differs from HpBandSter and why). Imported lazily by tuning.backend (it imports Ray).
"""

from __future__ import annotations

import warnings

import ConfigSpace
import ConfigSpace.util
import numpy as np
import scipy.stats as sps
from hpbandster.optimizers.config_generators.bohb import BOHB
from ray.tune.utils.util import unflatten_dict

from tuning import params as param_types
from tuning.backend import mo, rayinternals
from tuning.backend.kde import MixedKDE, active_bandwidths


def configspace(space, seed: int | None = None) -> ConfigSpace.ConfigurationSpace:
    """The space's ConfigSpace twin, which TuneBOHB and the model below search (a choice of lists,
    dicts or None by position: ConfigSpace's categories must be scalars)."""
    CS = ConfigSpace
    cs = CS.ConfigurationSpace(seed=seed)
    for k, p in space.params.items():
        if isinstance(p, param_types.LogUniform):
            hp = CS.UniformFloatHyperparameter(k, lower=p.low, upper=p.high, log=True)
        elif isinstance(p, param_types.Uniform):
            hp = CS.UniformFloatHyperparameter(k, lower=p.low, upper=p.high)
        elif isinstance(p, (param_types.IntUniform, param_types.IntLogUniform)):
            hp = CS.UniformIntegerHyperparameter(k, lower=p.low, upper=p.high, log=isinstance(p, param_types.IntLogUniform))
        else:
            hp = CS.CategoricalHyperparameter(k, choices=list(range(len(p.values))) if p.by_position else list(p.values))
        cs.add(hp)
    for k, p in space.params.items():  # every parent exists now
        when = {parent: [param_types.to_positions(space.params, {parent: v})[parent] for v in values]
                for parent, values in (p.when or {}).items()}
        tests = [CS.InCondition(cs[k], cs[parent], values) if len(values) > 1 else
                 CS.EqualsCondition(cs[k], cs[parent], values[0]) for parent, values in when.items()]
        if tests:
            cs.add(tests[0] if len(tests) == 1 else CS.AndConjunction(*tests))
    return cs


class PaperBOHB(rayinternals.tune_bohb()):
    """TuneBOHB fed by PaperHyperBand.observe, each (trial, budget) once, with plain proposals.

    Tune's own `on_trial_result` path stays for bookkeeping only: it misses results Tune stops.
    With ConfigSpace 1.x TuneBOHB proposes numpy scalars (np.int64 batch sizes, np.str_ choices);
    the trainer, the progress table and the result files get plain Python values, while BOHB's own
    bookkeeping (trial_to_params, which feeds its KDE) keeps what ConfigSpace gave it."""

    model_class: type = None  # VectorisedBOHB, set below it; tuning/backend/adaptive.py's own
    fronts_class: type = None  # the same with mo.FrontsModel's split, for a space's mo.Rule

    def __init__(self, *args, params: dict | None = None, rule: mo.Rule | None = None, **kwargs):
        self.observed: list[tuple[str, float]] = []  # what the model was given, in order
        self.rule = rule  # several objectives or a constraint: each result's point, split by mo.order
        # The space's declarations: a choice of lists, dicts or None is a ConfigSpace category by its
        # position (bohb.configspace), which the trials get back as the value.
        self.params = params or {}
        super().__init__(*args, **kwargs)

    def make_model(self, space, settings: dict):
        return (self.fronts_class if self.rule else self.model_class)(space, **settings)

    def suggest(self, trial_id: str):
        config = super().suggest(trial_id)
        if config is None:
            return None
        return param_types.from_positions(self.params, {k: param_types.plain(v) for k, v in config.items()})

    def on_trial_result(self, trial_id: str, result: dict):
        if trial_id not in self.paused:
            self.running.add(trial_id)

    def observe(self, trial_id: str, budget: float, result: dict) -> None:
        # A set beside the list: a list's `in` made 10,000 trials' observations quadratic.
        seen = self.__dict__.setdefault("_seen", set(self.observed))  # a searcher pickled without it too
        if (trial_id, budget) in seen:  # a resumed run's scheduler starts afresh
            return
        self.observed.append((trial_id, budget))
        seen.add((trial_id, budget))
        self.bohber.new_result(self._job(result, budget, self._params(trial_id, result)))

    def _job(self, result: dict, budget: float, params: dict):
        if self.rule is None:
            return rayinternals.bohb_job(self.sign * result[self.metric], budget, params)
        job = rayinternals.bohb_job(0.0, budget, params)  # its loss is its place among the budget's points
        job.point = self.rule.point(result)
        return job

    def warm(self, rows: list[dict]) -> None:
        """Earlier runs' results (tuning.run --warm-start), each at its budget (its training
        iteration), in the way HpBandSter warm-starts: every point stored, each budget's model fitted
        once, after its last point, budgets in ascending order (a model on a larger budget makes
        HpBandSter skip smaller ones)."""
        by_budget: dict[float, list[dict]] = {}
        for row in rows:  # with several objectives, a row with its first one (mo.order places the rest)
            value = row.get(self.metric)
            if isinstance(value, (int, float)) and np.isfinite(value):
                by_budget.setdefault(row["training_iteration"], []).append(row)
        for budget in sorted(by_budget):
            batch = by_budget[budget]
            for i, row in enumerate(batch):
                config = param_types.to_positions(self.params, row["config"])
                job = self._job(row, budget, {k: config[k] for k in self.config_space if k in config})
                self.bohber.new_result(job, update_model=i == len(batch) - 1)

    def _params(self, trial_id: str, result: dict) -> dict:
        # After a resume, TuneBOHB's saved state may predate trials that reported before the
        # crash (it raised KeyError, Ray issue #39900). Each result carries its trial's config
        # (flattened to "config/<name>", a dict value further to "config/<name>/<key>"; an inactive
        # parameter is absent), which is all BOHB keeps.
        if trial_id not in self.trial_to_params:
            config = unflatten_dict({k[len("config/"):]: v for k, v in result.items() if k.startswith("config/")})
            config = param_types.to_positions(self.params, {k: v for k, v in config.items() if k in self.config_space})
            self.trial_to_params[trial_id] = config
        return self.trial_to_params[trial_id]

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False):
        self.trial_to_params.setdefault(trial_id, {})
        super().on_trial_complete(trial_id, result, error)


def observe(model: BOHB, config: dict, loss: float, budget: float) -> None:
    """Give HpBandSter's model one result (lower loss is better), in the job form it reads: what
    the bench and the tests feed a model directly, without Tune."""
    model.new_result(rayinternals.bohb_job(loss, budget, config))


class VectorisedBOHB(BOHB):
    """HpBandSter's BOHB config generator (the authors' design: good and bad densities per budget on
    the top_n_percent split, the largest budget with enough points, the random fraction, candidates
    drawn around good points and the one with the lowest g/l proposed), with three changes.

    1. Categorical parameters get MixedKDE's kernel instead of statsmodels' normal-reference
       Aitchison-Aitken one: the points, the split, and the continuous bandwidths are HpBandSter's,
       fitted by HpBandSter; only each categorical column's bandwidth and kernel are replaced
       (docs/strategies.md, "BOHB's model for categorical parameters").
    2. The proposal step is vectorised. The original draws its num_samples candidates one scalar at
       a time through scipy.stats.truncnorm and evaluates both KDEs once per candidate, and the
       Tune loop waits for it: 298 ms per proposal on counting ones against 56 ms here (python -m
       tuning.bench --only scheduler, docs/bench/scheduler-2026-12-02, with statsmodels' KDEs;
       MixedKDE's pdf is vectorised over candidates and points too). Here the same candidates (a
       random good point, each continuous value from a truncated normal of bandwidth_factor x its
       bandwidth, each categorical one from the good kernel: kept with probability 1 - lambda, else
       one of the other values) are drawn in one call and both KDEs evaluated on all at once.
    3. A candidate that is a configuration already evaluated at the model's budget is not proposed
       (_evaluated); if all are, the proposal is random, as where HpBandSter finds no usable one.

    With conditions (ConfigSpace conditions, from tuning.conditions), an inactive parameter is NaN
    in a point's vector, and it stays NaN: the densities are fitted on the points as they were
    (MixedKDE's conditional kernel; continuous bandwidths from active values, active_bandwidths),
    not on HpBandSter's imputation, which copied each missing value from another point of the set
    where it was active, so that a branch's points carried other branches' values into g/l.
    Candidates take a value only where their own values make the parameter active: around the good
    point where it had one, from the prior where it had none (the density's own component there).
    HpBandSter's impute_conditional_data still runs for its own fit, whose densities are then
    replaced; its loop stopped early when the first missing column was column 0 (`while
    np.any(indices)` is False for [0]; fixed here)."""

    def impute_conditional_data(self, array: np.ndarray) -> np.ndarray:
        out = np.array(array, dtype=float)
        for datum in out:
            missing = np.flatnonzero(np.isnan(datum))
            while missing.size:
                j = missing[0]
                donors = np.flatnonzero(np.isfinite(array[:, j]))
                if donors.size:  # another point where the parameter is active: take its values
                    row = array[np.random.choice(donors)]
                    datum[missing] = row[missing]
                else:  # active nowhere in these points: a random legal value
                    k = self.vartypes[j]
                    datum[j] = np.random.rand() if k == 0 else np.random.randint(k)
                missing = np.flatnonzero(np.isnan(datum))
        return out

    # Past this many results at a budget the densities are fitted to a window of them: the best
    # top_n_percent of WINDOW (HpBandSter's good set had the window been the whole run) and the
    # most recent others. Fitting to all made each proposal and each result cost time in
    # proportion to the results so far (docs/performance.md, "Thousands of trials"); up to WINDOW
    # results, every run of today's sizes, the model is HpBandSter's own.
    window = 1000

    def new_result(self, job, update_model=True):
        before = {b: m["good"] for b, m in self.kde_models.items()}
        budget = job.kwargs["budget"]
        if len(self.configs.get(budget, ())) >= self.window:
            self._trim(budget)
        had = len(self.configs.get(budget, ()))
        with warnings.catch_warnings():  # statsmodels 0.15, at each KDE: its default generator will change.
            # HpBandSter's normal-reference bandwidths draw no random numbers; a comparison printed it.
            warnings.filterwarnings("ignore", "After 0.17 or January 2028", FutureWarning)
            super().new_result(job, update_model)
        if len(self.configs.get(budget, ())) > had:  # every point evaluated there, the window aside
            self.__dict__.setdefault("evaluated", {}).setdefault(budget, []).append(self.configs[budget][-1])
        for budget, models in self.kde_models.items():
            if before.get(budget) is not models["good"]:  # HpBandSter has just (re)fitted this budget
                sets = self._unimputed(budget) if self.configspace.conditions else {}
                self.kde_models[budget] = {
                    name: MixedKDE(sets[name], self._bandwidths(sets[name], kde.bw), self.vartypes) if sets
                    else MixedKDE(kde.data, kde.bw, self.vartypes) for name, kde in models.items()}

    def _trim(self, budget) -> list[int]:
        """Leave window - 1 results at the budget, so that the next makes `window`: the best
        top_n_percent of the window by loss, and the most recent of the others, in their order."""
        losses = np.asarray(self.losses[budget], dtype=float)
        best = set(np.argsort(losses, kind="stable")[:self.window * self.top_n_percent // 100].tolist())
        recent = [i for i in range(len(losses) - 1, -1, -1) if i not in best][:self.window - 1 - len(best)]
        keep = sorted(best | set(recent))
        self.configs[budget] = [self.configs[budget][i] for i in keep]
        self.losses[budget] = [self.losses[budget][i] for i in keep]
        return keep

    def _unimputed(self, budget) -> dict[str, np.ndarray]:
        """The good and bad points HpBandSter has just fitted at this budget, before imputation: its
        own split (the best top_n_percent, at least min_points_in_model, against the rest)."""
        configs, losses = np.array(self.configs[budget]), np.array(self.losses[budget])
        n_good = max(self.min_points_in_model, (self.top_n_percent * len(configs)) // 100)
        n_bad = max(self.min_points_in_model, ((100 - self.top_n_percent) * len(configs)) // 100)
        order = np.argsort(losses)
        return {"good": configs[order[:n_good]], "bad": configs[order[n_good:n_good + n_bad]]}

    def _bandwidths(self, data: np.ndarray, fitted: np.ndarray) -> np.ndarray:
        bw = np.array(fitted, dtype=float)
        cont = self.vartypes == 0
        bw[cont] = np.clip(active_bandwidths(data[:, cont], len(self.vartypes)), self.min_bandwidth, None)
        return bw

    def _deactivate(self, vectors: np.ndarray) -> np.ndarray:
        """NaN where a candidate's own values make the parameter inactive. ConfigSpace orders its
        parameters parents first, and a condition on an inactive (NaN) parent is not satisfied."""
        for condition in sorted(self.configspace.conditions, key=lambda c: c.child_vector_id):
            # one per child (several parents: a conjunction), parents' columns before children's
            j = condition.child_vector_id
            vectors[~condition.satisfied_by_vector_array(vectors.T), j] = np.nan
        return vectors

    def model_budget(self) -> float | None:
        """The budget whose densities propose: HpBandSter's largest budget with a model (None: no
        model to use, propose at random)."""
        return max(self.kde_models)

    def get_config(self, budget):
        if not self.kde_models or np.random.rand() < self.random_fraction:
            return dict(self.configspace.sample_configuration()), {"model_based_pick": False}
        budget = self.model_budget()
        if budget is None:
            return dict(self.configspace.sample_configuration()), {"model_based_pick": False}
        models = self.kde_models[budget]
        good, bad = models["good"], models["bad"]
        n, cont = self.num_samples, self.vartypes == 0
        data = good.data[np.random.randint(0, len(good.data), size=n)]
        bw = np.maximum(good.bw, self.min_bandwidth)
        vectors = data.copy()
        if cont.any():
            m, sd = np.nan_to_num(data[:, cont], nan=0.5), self.bw_factor * bw[cont]
            vectors[:, cont] = sps.truncnorm.rvs(-m / sd, (1 - m) / sd, loc=m, scale=sd)
        for j in np.flatnonzero(~cont):
            k, kept = self.vartypes[j], np.nan_to_num(data[:, j]).astype(int)
            # Drawn from the good kernel itself, whose other values share lambda equally.
            other = (kept + np.random.randint(1, k, size=n)) % k if k > 1 else kept
            vectors[:, j] = np.where(np.random.rand(n) < 1 - bw[j], kept, other)
        absent = np.isnan(data)
        if absent.any():  # the good point lacked the parameter: its component there is the prior
            prior = np.random.rand(*vectors.shape)
            prior[:, ~cont] = np.floor(prior[:, ~cont] * self.vartypes[~cont])
            vectors[absent] = prior[absent]
        if self.configspace.conditions:
            vectors = self._deactivate(vectors)
        evaluated = self.__dict__.get("evaluated", {}).get(budget, self.configs[budget])
        fresh = ~self._evaluated(vectors, evaluated, budget)
        best = self._best(good.pdf(vectors[fresh]), bad.pdf(vectors[fresh])) if fresh.any() else None
        if best is None:
            return dict(self.configspace.sample_configuration()), {"model_based_pick": False}
        vector = vectors[fresh][best]
        vector[~cont] = np.rint(vector[~cont])
        config = ConfigSpace.util.deactivate_inactive_hyperparameters(
            dict(ConfigSpace.Configuration(self.configspace, vector=vector)), self.configspace)
        return dict(config), {"model_based_pick": True}

    def _evaluated(self, vectors: np.ndarray, seen: list, budget=None) -> np.ndarray:
        """Which candidates are a configuration already evaluated at the model's budget (NaN, an
        inactive parameter there, matches any value): their result there is known, and proposing
        one again spends a trial on it. HpBandSter does not check; on paired choices 27 % of its
        model-based proposals were such repeats, mostly of its own good points (docs/strategies.md).
        Without conditions (no NaN) the evaluated points are kept as a set of their values rounded
        to 1e-9, grown as results arrive: comparing each candidate with every point took 69 ms a
        proposal at 10,000 results (docs/performance.md, "Thousands of trials")."""
        if not len(seen):
            return np.zeros(len(vectors), dtype=bool)
        if self.configspace.conditions:
            return self.evaluated_among(vectors, np.asarray(seen, dtype=float))
        known = self.__dict__.setdefault("_known", {})  # budget -> (points taken in, their set)
        count, keys = known.get(budget, (0, set()))
        if count > len(seen):  # not this budget's list after all: start again
            count, keys = 0, set()
        keys.update(tuple(np.round(np.asarray(p, dtype=float), 9)) for p in seen[count:])
        known[budget] = (len(seen), keys)
        return np.array([tuple(np.round(v, 9)) in keys for v in vectors], dtype=bool)

    @staticmethod
    def evaluated_among(vectors: np.ndarray, seen: np.ndarray) -> np.ndarray:
        """_evaluated's rule by comparing every candidate with every point, NaN matching any value."""
        same = (np.abs(vectors[:, None, :] - seen[None]) < 1e-9) | np.isnan(seen)[None]
        return same.all(axis=2).any(axis=1)

    @staticmethod
    def _best(l: np.ndarray, g: np.ndarray) -> int | None:
        """Index of the candidate with the lowest g/l, as HpBandSter's loop picks it: both floored
        at 1e-32 the way Python's max() floors them (a NaN l stays NaN, a NaN g becomes the floor),
        non-finite ratios skipped unless l is finite there, in which case the first such wins."""
        g = np.where(g > 1e-32, g, 1e-32)
        l = np.where(l < 1e-32, 1e-32, l)
        ratio = g / l
        odd = ~np.isfinite(ratio) & np.isfinite(l)
        if odd.any():
            return int(np.flatnonzero(odd)[0])
        finite = np.isfinite(ratio)
        return int(np.flatnonzero(finite)[np.argmin(ratio[finite])]) if finite.any() else None


class FrontsBOHB(mo.FrontsModel, VectorisedBOHB):
    """VectorisedBOHB splitting by several objectives and constraints (mo.FrontsModel)."""


PaperBOHB.model_class, PaperBOHB.fronts_class = VectorisedBOHB, FrontsBOHB
