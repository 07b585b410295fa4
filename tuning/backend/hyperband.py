"""Synchronous Hyperband brackets as the Hyperband and BOHB papers define them, and a BOHB searcher
whose model sees every rung result once. Imported lazily by tuning.backend (it imports Ray).

Ray 2.60's HyperBandForBOHB has three defects; the first two turn BOHB into something between random
search and Hyperband (Ray issue #12536, closed unfixed; #5775, #9245 report the same symptom):

1. A bracket is "filled" when its *live* trials number its size, and a finished trial leaves the
   live set. Tune creates one trial at a time for a searcher, so a bracket whose trials finish
   (or run at the full budget) never fills, and it swallows every later trial: on counting ones
   the first band's s = 0 bracket took 86 trials instead of 5 and no second band ever started.
   `QuotaBracket` counts every trial it was given: it takes exactly n0 and closes.
2. Tune calls the searcher's `on_trial_result` only when the decision is not STOP, so no
   full-budget result (stopped by MaximumIterationStopper) and no rung loser that Hyperband stops
   outright ever reached BOHB's model. `PaperHyperBand` reports every result at a rung budget to
   an `observe(trial_id, budget, result)` hook itself, including the ones Tune stops, and
   `PaperBOHB.observe` hands each (trial, budget) pair to HpBandSter's model exactly once.
3. A rung is decided only by a trial that sees all the others PAUSED: two that reach it together
   both wait, and Ray's fallback (decide once nothing runs) never comes while other brackets run.
   `PaperHyperBand.choose_trial_to_run` decides such a rung at the next free slot.

Brackets are opened largest first within a band (s = s_max ... 0), then a new band starts, with
Ray's (the Hyperband paper's) sizes n0 = ceil((s_max + 1) / (s + 1) * eta^s) and first budgets
r0 = max_t * eta^-s: 81/34/15/8/5 trials starting at 1/3/9/27/81 for max_t 81, eta 3.
"""

from __future__ import annotations

import logging
from typing import Callable

import ConfigSpace
import numpy as np
import scipy.stats as sps
from hpbandster.optimizers.config_generators.bohb import BOHB
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, HyperBandForBOHB
from ray.tune.schedulers.hyperband import _Bracket
from ray.tune.schedulers.trial_scheduler import TrialScheduler
from ray.tune.search.bohb import TuneBOHB
from ray.tune.search.bohb.bohb_search import _BOHBJobWrapper

from tuning import spaces

log = logging.getLogger(__name__)

Observer = Callable[[str, float, dict], None]  # (trial_id, budget, flat result)


class QuotaBracket(_Bracket):
    """A bracket that takes exactly its quota of trials (n0) and then closes, whether or not the
    trials it was given are still running."""

    def __init__(self, *args, s: int, band: int, **kwargs):
        super().__init__(*args, s=s, **kwargs)
        self.s, self.band = s, band

    def filled(self) -> bool:
        return len(self._all_trials) >= self._n0

    def describe(self) -> dict:
        """Plain data for tables and tests: which trials this bracket was given."""
        return {"band": self.band, "s": self.s, "n0": self._n0, "r0": self._r0,
                "trials": [t.trial_id for t in self._all_trials]}


class PaperHyperBand(HyperBandForBOHB):
    """Ray's synchronous Hyperband (HyperBandForBOHB: largest bracket first, trials paused at each
    rung until the rung is complete) with brackets that close and every rung result observed.

    Tune does not save scheduler state (Ray issue #30838): on resume every restored trial is added
    again, finished ones too, and a bracket waiting on a trial that will never report hangs the
    run. Finished trials are left out; unfinished ones join fresh brackets, counted in their quota,
    and continue from their checkpoints."""

    def __init__(self, *args, observe: Observer | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._observe = observe
        self._observed: set[tuple[str, float]] = set()

    def _create_bracket(self, s: int) -> QuotaBracket:
        return QuotaBracket(time_attr=self._time_attr, max_trials=self._get_n0(s), init_t_attr=self._get_r0(s),
                            max_t_attr=self._max_t_attr, eta=self._eta, s=s, band=self._state["band_idx"],
                            stop_last_trials=self._stop_last_trials)

    def on_trial_add(self, tune_controller, trial: Trial):
        if trial.status in (Trial.TERMINATED, Trial.ERROR):
            return
        super().on_trial_add(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial: Trial, result: dict) -> str:
        bracket, _ = self._trial_info[trial]
        bracket.update_trial_stats(trial, result)
        if bracket.continue_trial(trial):
            return TrialScheduler.CONTINUE
        self._rung_result(trial, bracket, result)
        others_waiting = all(t.status == Trial.PAUSED for t in bracket._live_trials if t is not trial)
        if not bracket.filled() or not others_waiting:
            self._searcher_pause(tune_controller, trial)
            return TrialScheduler.PAUSE
        action = self._process_bracket(tune_controller, bracket)
        if action == TrialScheduler.PAUSE:
            self._searcher_pause(tune_controller, trial)
        return action

    def on_trial_complete(self, tune_controller, trial: Trial, result: dict):
        # A result Tune stopped before this scheduler saw it (the full budget, reached under
        # MaximumIterationStopper) is still a rung result: observe it before the trial leaves.
        if trial in self._trial_info and result:
            self._rung_result(trial, self._trial_info[trial][0], result)
        super().on_trial_complete(tune_controller, trial, result)

    def _rung_result(self, trial: Trial, bracket: QuotaBracket, result: dict) -> None:
        budget = bracket._cumul_r
        # Only at the rung itself: after a resume a trial can join a bracket whose rung it has passed.
        if result.get(self._time_attr) != budget or (trial.trial_id, budget) in self._observed:
            return
        self._observed.add((trial.trial_id, budget))
        if self._observe is not None:
            self._observe(trial.trial_id, budget, result)

    def choose_trial_to_run(self, tune_controller, allow_recurse: bool = True):
        # Defect 3 (module docstring): each of a rung's last two trials saw the other still RUNNING,
        # its pause (a checkpoint save) in flight, and both wait. Decide such a rung here.
        for band in self._hyperbands:
            for bracket in band:
                if bracket is not None and self._rung_stuck(bracket):
                    log.debug("deciding the rung at %s every trial waits on", bracket._cumul_r)
                    self._process_bracket(tune_controller, bracket)
        return super().choose_trial_to_run(tune_controller, allow_recurse)

    @staticmethod
    def _rung_stuck(bracket: QuotaBracket) -> bool:
        live = bracket._live_trials
        return (bracket.filled() and bool(live) and bracket.cur_iter_done() and not bracket.trials_to_unpause
                and all(t.status == Trial.PAUSED for t in live))

    def _searcher_pause(self, tune_controller, trial: Trial) -> None:
        # TuneBOHB counts running trials for its concurrency limit; a random searcher has no such count.
        searcher = getattr(tune_controller.search_alg, "searcher", None)
        if hasattr(searcher, "on_pause"):
            searcher.on_pause(trial.trial_id)

    def _unpause_trial(self, tune_controller, trial: Trial):
        searcher = getattr(tune_controller.search_alg, "searcher", None)
        if hasattr(searcher, "on_unpause"):
            searcher.on_unpause(trial.trial_id)

    def brackets(self) -> list[dict]:
        return [b.describe() for band in self._hyperbands for b in band if b is not None]

    def all_finished(self) -> bool:
        return all(t.status in (Trial.TERMINATED, Trial.ERROR) for t in self._trial_info)


class PauseEveryResult(FIFOScheduler):
    """Pauses a trial after every result; FIFO resumes it at once (tuning.bench measures with it
    what one pause and resume costs, with nothing else in the way)."""

    def __init__(self):
        super().__init__()
        self._trials: set[Trial] = set()

    def on_trial_result(self, tune_controller, trial: Trial, result: dict) -> str:
        self._trials.add(trial)
        return TrialScheduler.PAUSE

    def all_finished(self) -> bool:
        return all(t.status in (Trial.TERMINATED, Trial.ERROR) for t in self._trials)


class PaperBOHB(TuneBOHB):
    """TuneBOHB fed by PaperHyperBand.observe, each (trial, budget) once, with plain proposals.

    Tune's own `on_trial_result` path stays for bookkeeping only: it misses results Tune stops.
    With ConfigSpace 1.x TuneBOHB proposes numpy scalars (np.int64 batch sizes, np.str_ choices);
    the trainer, the progress table and the result files get plain Python values, while BOHB's own
    bookkeeping (trial_to_params, which feeds its KDE) keeps what ConfigSpace gave it."""

    def __init__(self, *args, **kwargs):
        self.observed: list[tuple[str, float]] = []  # what the model was given, in order
        super().__init__(*args, **kwargs)

    def _setup_bohb(self):
        super()._setup_bohb()
        self.bohber = VectorisedBOHB(self._space, **(self._bohb_config or {}))

    def suggest(self, trial_id: str):
        config = super().suggest(trial_id)
        return None if config is None else {k: spaces.plain(v) for k, v in config.items()}

    def on_trial_result(self, trial_id: str, result: dict):
        if trial_id not in self.paused:
            self.running.add(trial_id)

    def observe(self, trial_id: str, budget: float, result: dict) -> None:
        if (trial_id, budget) in self.observed:  # a resumed run's scheduler starts afresh
            return
        self.observed.append((trial_id, budget))
        self.bohber.new_result(_BOHBJobWrapper(self._metric_op * result[self.metric], budget,
                                               self._params(trial_id, result)))

    def warm(self, rows: list[dict]) -> None:
        """Earlier runs' results (tuning.run --warm-start), each at its budget (its training
        iteration), in the way HpBandSter warm-starts: every point stored, each budget's model fitted
        once, after its last point, budgets in ascending order (a model on a larger budget makes
        HpBandSter skip smaller ones)."""
        by_budget: dict[float, list[dict]] = {}
        for row in rows:
            value = row.get(self.metric)
            if isinstance(value, (int, float)) and np.isfinite(value):
                by_budget.setdefault(row["training_iteration"], []).append(row)
        for budget in sorted(by_budget):
            batch = by_budget[budget]
            for i, row in enumerate(batch):
                job = _BOHBJobWrapper(self._metric_op * row[self.metric], budget,
                                      {k: row["config"][k] for k in self._space})
                self.bohber.new_result(job, update_model=i == len(batch) - 1)

    def _params(self, trial_id: str, result: dict) -> dict:
        # After a resume, TuneBOHB's saved state may predate trials that reported before the
        # crash (it raised KeyError, Ray issue #39900). Each result carries its trial's config
        # (flattened to "config/<name>"), which is all BOHB keeps about it.
        if trial_id not in self.trial_to_params:
            self.trial_to_params[trial_id] = {k: result[f"config/{k}"] for k in self._space}
        return self.trial_to_params[trial_id]

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False):
        self.trial_to_params.setdefault(trial_id, {})
        super().on_trial_complete(trial_id, result, error)


def categorical_bandwidth(n: int, k: np.ndarray | int) -> np.ndarray:
    """The probability a categorical kernel puts on the other k - 1 values, fitted to n points:
    Optuna's TPE kernel (optuna/samplers/_tpe/parzen_estimator.py), which weights the observed value
    1 against a prior weight of 1 spread over the k values and the n + 1 kernels, normalised:
    lambda = (k - 1) / (n + 1 + k). It shrinks as points come in, and stays below (k - 1) / k, so
    the observed value always weighs more than any other (docs/strategies.md)."""
    k = np.asarray(k, dtype=float)
    return (k - 1) / (n + 1 + k)


class MixedKDE:
    """A product-kernel density over ConfigSpace vectors: statsmodels' Gaussian kernel (as
    KDEMultivariate's, untruncated) on continuous columns, an Aitchison-Aitken kernel on categorical
    ones (1 - lambda on the observed value, lambda / (k - 1) on each other) with k the parameter's
    number of values and lambda from categorical_bandwidth.

    statsmodels' own unordered kernel, as HpBandSter fits it, takes its bandwidth from the normal
    reference rule on the integer codes: about 1.1 for a five-value parameter whose good points
    disagree, past (k - 1) / k = 0.8, where the observed value weighs less than each other one
    (measured in docs/strategies.md). It also counts only the values present in the data, so what
    an absent value gets depends on how many others the points have. Same attributes as
    KDEMultivariate (data, bw, pdf), so HpBandSter's own get_config still runs on it
    (tuning.benchsched times it)."""

    def __init__(self, data: np.ndarray, bw: np.ndarray, vartypes: np.ndarray):
        self.data, self.vartypes = np.asarray(data, dtype=float), vartypes
        self.bw = np.array(bw, dtype=float)
        cat = vartypes > 0
        self.bw[cat] = categorical_bandwidth(len(self.data), vartypes[cat])

    def pdf(self, x) -> np.ndarray | float:
        """The density at one vector (a float) or at each row of a 2-D array."""
        points = np.atleast_2d(np.asarray(x, dtype=float))
        cont = self.vartypes == 0
        kernel = np.ones((len(points), len(self.data)))
        if cont.any():
            z = (points[:, None, cont] - self.data[None, :, cont]) / self.bw[cont]
            kernel *= np.exp(-0.5 * np.sum(z ** 2, axis=2)) / np.prod(np.sqrt(2 * np.pi) * self.bw[cont])
        for j in np.flatnonzero(~cont):
            same = np.rint(points[:, None, j]) == self.data[None, :, j]
            lam = self.bw[j]
            kernel *= np.where(same, 1 - lam, lam / max(self.vartypes[j] - 1, 1))
        dens = kernel.mean(axis=1)
        return dens if np.ndim(x) == 2 else float(dens[0])


class VectorisedBOHB(BOHB):
    """HpBandSter's BOHB config generator (the authors' design: good and bad densities per budget on
    the top_n_percent split, the largest budget with enough points, the random fraction, candidates
    drawn around good points and the one with the lowest g/l proposed), with two changes.

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

    Configuration spaces with conditions are not supported, as the spaces here have none."""

    def new_result(self, job, update_model=True):
        before = {b: m["good"] for b, m in self.kde_models.items()}
        super().new_result(job, update_model)
        for budget, models in self.kde_models.items():
            if before.get(budget) is not models["good"]:  # HpBandSter has just (re)fitted this budget
                self.kde_models[budget] = {name: MixedKDE(kde.data, kde.bw, self.vartypes)
                                           for name, kde in models.items()}

    def get_config(self, budget):
        if not self.kde_models or np.random.rand() < self.random_fraction:
            return dict(self.configspace.sample_configuration()), {"model_based_pick": False}
        models = self.kde_models[max(self.kde_models)]
        good, bad = models["good"], models["bad"]
        n, cont = self.num_samples, self.vartypes == 0
        data = good.data[np.random.randint(0, len(good.data), size=n)]
        bw = np.maximum(good.bw, self.min_bandwidth)
        vectors = data.copy()
        if cont.any():
            m, sd = data[:, cont], self.bw_factor * bw[cont]
            vectors[:, cont] = sps.truncnorm.rvs(-m / sd, (1 - m) / sd, loc=m, scale=sd)
        for j in np.flatnonzero(~cont):
            k, kept = self.vartypes[j], data[:, j].astype(int)
            # Drawn from the good kernel itself, whose other values share lambda equally.
            other = (kept + np.random.randint(1, k, size=n)) % k if k > 1 else kept
            vectors[:, j] = np.where(np.random.rand(n) < 1 - bw[j], kept, other)
        best = self._best(good.pdf(vectors), bad.pdf(vectors))
        if best is None:
            return dict(self.configspace.sample_configuration()), {"model_based_pick": False}
        vector = vectors[best]
        vector[~cont] = np.rint(vector[~cont])
        return dict(ConfigSpace.Configuration(self.configspace, vector=vector)), {"model_based_pick": True}

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
