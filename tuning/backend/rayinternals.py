"""Every use of Ray's private API in tuning, in one room: what a Ray upgrade could break. Each section names what it
patches or reads, the Ray version it was written against (WRITTEN_FOR) and why; tests/test_rayinternals.py tests
each target against the installed Ray. Other modules never name Ray's private API (tests/test_layout.py holds that).
On another Ray major.minor it logs one warning at import instead of refusing to run (pyproject pins ray[tune]==2.60.*:
another Ray is an upgrade being tried); a patch whose target is gone raises RayChanged (one line) when applied."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import ray
import ray.air._internal.usage as air_usage
from ray._common.usage.usage_lib import TagKey, record_extra_usage_tag
from ray.tune import CLIReporter, ExperimentAnalysis
from ray.tune.execution import class_cache
from ray.tune.execution.tune_controller import TuneController
from ray.tune.schedulers import HyperBandForBOHB, MedianStoppingRule as _MedianStoppingRule
from ray.tune.schedulers.async_hyperband import _Bracket as _AsyncBracket
from ray.tune.schedulers.hyperband import _Bracket
from ray.tune.search.basic_variant import _TrialIterator
from ray.tune.trainable.metadata import _TrainingRunMetadata

from tuning.cli import TuningError

log = logging.getLogger(__name__)

WRITTEN_FOR = "2.60"  # the Ray major.minor every patch and private read below was written against


class RayChanged(TuningError):
    """A Ray name tuning patches or reads is gone: this Ray is not the one tuning was written for."""


def version_problem(version: str = ray.__version__) -> str | None:
    """One line saying this Ray is not WRITTEN_FOR and what to do; None when it is."""
    if ".".join(version.split(".")[:2]) == WRITTEN_FOR:
        return None
    return (f"Ray {version} is installed, and tuning patches Ray {WRITTEN_FOR}'s internals "
            f"(tuning/backend/rayinternals.py): install ray[tune]=={WRITTEN_FOR}.*, or run "
            "tests/test_rayinternals.py to see which patch this Ray breaks")


if version_problem():
    log.warning(version_problem())


# ---------------------------------------------------------------- patching

_lock = threading.Lock()
_active: dict[tuple[int, str], list] = {}  # (id(owner), name) -> [blocks open, Ray's original]


def _target(owner, name: str):
    try:
        return getattr(owner, name)
    except AttributeError:
        raise RayChanged(f"Ray {ray.__version__} has no {getattr(owner, '__name__', owner)}.{name}, which tuning "
                         f"patches (written for Ray {WRITTEN_FOR}): install ray[tune]=={WRITTEN_FOR}.*") from None


@contextlib.contextmanager
def patched(*replacements: tuple[object, str, object]):
    """Within the block each (owner, name, replacement) is in place; Ray's own is put back when the last block
    that set it ends. Nested blocks and concurrent searches in one process share one replacement, the first's."""
    with _lock:
        for owner, name, new in replacements:
            slot = _active.setdefault((id(owner), name), [0, None])
            if slot[0] == 0:
                slot[1] = _target(owner, name)
                setattr(owner, name, new)
            slot[0] += 1
    try:
        yield
    finally:
        with _lock:
            for owner, name, _ in replacements:
                slot = _active[(id(owner), name)]
                slot[0] -= 1
                if slot[0] == 0:
                    setattr(owner, name, slot[1])
                    del _active[(id(owner), name)]


def original(owner, name: str):
    """Ray's own `owner.name`, whether or not a block has replaced it."""
    slot = _active.get((id(owner), name))
    return slot[1] if slot else getattr(owner, name)


# ---------------------------------------------------------------- the experiment snapshot
# Ray 2.60. Why: tuning/backend/snapshots.py. Patched: what snapshot_patches lists. Read: the controller's
# _checkpoint_manager (_should_force_sync_up, _last_save_time, _last_sync_time), _trials_to_cache, _trials,
# what save_to_dir writes (_get_trial_checkpoints, __getstate__, _start_time, _storage, _search_alg, _callbacks,
# _session_str).


@dataclass(frozen=True)
class SnapshotClock:
    """What a TuneController knows of its experiment snapshots."""

    forced: bool  # Tune forces the next one (num_to_keep trial checkpoints since the last)
    marked: bool  # a trial was marked to be written again since the last
    saved_at: float  # time.monotonic() when the last was written (-inf: never)
    launched_at: float | None  # when the last copy to storage was launched (None: never)


def snapshot_clock(controller) -> SnapshotClock:
    manager = controller._checkpoint_manager
    return SnapshotClock(forced=manager._should_force_sync_up, marked=bool(controller._trials_to_cache),
                         saved_at=manager._last_save_time, launched_at=manager._last_sync_time)


def take_snapshot(controller, force: bool = False, wait: bool = False) -> None:
    """Ray's own TuneController.checkpoint (its period, the copy to storage)."""
    original(TuneController, "checkpoint")(controller, force=force, wait=wait)


def write_snapshot(controller, chunks: Callable) -> None:
    """Ray 2.60's TuneController.save_to_dir, but: text from chunks(), renamed into place, no stopper (snapshots.py)."""
    staging = Path(controller._storage.experiment_driver_staging_path)
    os.makedirs(staging, exist_ok=True)
    beside = Path(tempfile.mkdtemp(dir=staging.parent))  # fresh: a write cut short leaves nothing to move in later
    # A PAUSED or PENDING trial a scheduler stops is never marked (_schedule_trial_stop): a resume trained it on.
    controller._trials_to_cache.update(t for t in controller._trials if t.status in ("TERMINATED", "ERROR"))
    runner = {k: v for k, v in controller.__getstate__().items() if k != "_stopper"}
    pieces = chunks(list(controller._get_trial_checkpoints().values()), runner, {"start_time": controller._start_time})
    with open(beside / controller.experiment_state_file_name, "w") as f:
        f.writelines(pieces)
    controller._search_alg.save_to_dir(str(beside), session_str=controller._session_str)
    controller._callbacks.save_to_dir(str(beside), session_str=controller._session_str)
    for name in os.listdir(beside):
        os.replace(beside / name, staging / name)
    os.rmdir(beside)


def analyse_metric(metadata, metric: str, value, step: int = 1) -> None:
    """Ray's own _TrainingRunMetadata.update_metric: a trial's running statistics of one key."""
    original(_TrainingRunMetadata, "update_metric")(metadata, metric, value, step)


def tag_callback_counts(counts: dict[str, int]) -> None:
    """Ray's usage tag of the callbacks a run was given, as its tag_callbacks records it."""
    record_extra_usage_tag(TagKey.AIR_CALLBACKS, json.dumps(counts))


def snapshot_patches(*, checkpoint: Callable, save_to_dir: Callable, update_metric: Callable,
                     tag_callbacks: Callable, trial_dataframes: Callable):
    """A block (patched) in which TuneController.checkpoint and save_to_dir, _TrainingRunMetadata.update_metric,
    tune.run's tag_callbacks and the ExperimentAnalysis's reading of the trials' result files are these."""
    return patched((TuneController, "checkpoint", checkpoint), (TuneController, "save_to_dir", save_to_dir),
                   (_TrainingRunMetadata, "update_metric", update_metric),
                   (air_usage, "tag_callbacks", tag_callbacks),
                   (ExperimentAnalysis, "_fetch_trial_dataframes", trial_dataframes))


# ---------------------------------------------------------------- trial actors' environment
# Ray 2.60. Tune gives every trial actor runtime_env={"env_vars": class_cache.DEFAULT_ENV_VARS}
# (PL_DISABLE_FORK=1, for PyTorch Lightning: Ray #28197), and Ray runs an actor with a runtime env
# only in a worker started with it: 1.0 s a trial (tuning/backend/cluster.py, prestarted_workers).
# It also copies the driver's AWS credentials and Ray Train's variables in (ENV_VARS_TO_PROPAGATE).


def tune_actor_env() -> dict[str, str]:
    """The environment variables Tune gives every trial actor."""
    return dict(class_cache.DEFAULT_ENV_VARS)


def tune_propagated_env() -> dict[str, str]:
    """The driver's variables Tune would copy into a trial actor's runtime env now."""
    return {k: os.environ[k] for k in class_cache.ENV_VARS_TO_PROPAGATE if k in os.environ}


def without_tune_actor_env(propagate: set[str]):
    """A block in which trial actors get none of Tune's defaults, of the driver's variables only `propagate`."""
    return patched((class_cache, "DEFAULT_ENV_VARS", {}),
                   (class_cache, "ENV_VARS_TO_PROPAGATE", set(propagate) & set(class_cache.ENV_VARS_TO_PROPAGATE)))


# ---------------------------------------------------------------- joining a cluster
# Ray 2.60. ray.init picks up this machine's auth token by itself only for address="auto", and a driver naming
# HOST:PORT was refused after 20 s of retries (tuning/backend/cluster.py, _check_token). And for "auto" without
# RAY_ADDRESS it falls back from the address `ray start` wrote down to any Ray running on the machine.


def enable_token_auth_if_available() -> bool:
    """Token mode on here where a token is found (RAY_AUTH_TOKEN[_PATH], ~/.ray/auth_token); whether it was."""
    from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available

    return bool(maybe_enable_token_auth_if_token_available(warn_if_disabled=False))


def connect_gcs(address: str) -> None:
    """One connection to the GCS at `address`: AuthenticationError where it refuses this process's token."""
    from ray._raylet import GcsClient

    GcsClient(address=address)


def started_address() -> str | None:
    """The address the latest `ray start --head` on this machine wrote down (RAY_TMPDIR, TMPDIR or /tmp), or None."""
    from ray._private.services import find_bootstrap_address

    return find_bootstrap_address(None)


# ---------------------------------------------------------------- the progress table
# Ray 2.60's CLIReporter keeps its settings in private attributes and finds the best trial in _current_best_trial,
# whose line raised KeyError for a conditional parameter a trial lacks (tuning/backend/tune_parts.py, Reporter).


class Reporter(CLIReporter):
    """CLIReporter with the private parts tuning's reporter uses under public names."""

    def _current_best_trial(self, trials):
        best, metric = super()._current_best_trial(trials)
        return self.best_trial(best), metric

    def best_trial(self, best):
        """The best trial as the "Current best trial" line shows it (None: no best yet)."""
        return best

    metric = property(lambda self: self._metric)
    mode = property(lambda self: self._mode)
    parameters = property(lambda self: list(self._parameter_columns))  # the parameter columns

    def sort_finished_by_metric(self, on: bool) -> None:
        """Whether the table sorts finished trials by the metric (until changed again)."""
        self._sort_by_metric = on


# ---------------------------------------------------------------- Ray's OptunaSearch
# Ray 2.60's OptunaSearch keeps each Tune trial's Optuna trial in _ot_trials, those told Optuna in
# _completed_trials, the study in _ot_study; tuning/backend/tpe.py tells Optuna how some ended (pruned).


def optuna_trial(search, trial_id: str):
    """The Optuna trial `search` (an OptunaSearch) holds for `trial_id`; None once Optuna was told its end."""
    if trial_id in search._completed_trials:
        return None
    return search._ot_trials.get(trial_id)


def tell_optuna(search, trial_id: str, state) -> None:
    """Tell Optuna that `trial_id` ended in `state` (an optuna TrialState), and `search` that it was told."""
    search._ot_study.tell(search._ot_trials[trial_id], state=state)
    search._completed_trials.add(trial_id)


# ---------------------------------------------------------------- Tune's searches and schedulers
# Ray 2.60. What the strategy modules (and bench/scale.py) read and set of Tune's searches and schedulers, and the
# private hooks they override, under public names; why each is used is said in those modules.


def adopt(obj, cls: type, **attrs) -> None:
    """Make an object Ray built (a trial iterator, a bracket) a `cls`, a subclass of its own, with `attrs`."""
    obj.__class__ = cls
    for name, value in attrs.items():
        setattr(obj, name, value)


TrialIterator = _TrialIterator  # BasicVariantGenerator's trials of one spec
AsyncBracket = _AsyncBracket  # an AsyncHyperBandScheduler's (ASHA's) bracket: its rungs are rungs(bracket)


def iterators(search) -> list:  # a BasicVariantGenerator's, one per spec
    return search._iterators


def add_samples(search, n: int, per_sample: int = 1, adopt_as: Callable | None = None) -> None:
    """A restored BasicVariantGenerator goes on to `n` more samples of its last spec (`per_sample`
    trials each), from where its random stream stopped; `adopt_as(iterator)` before it is used."""
    more = _TrialIterator(uuid_prefix=search._uuid_prefix, num_samples=n,
                          unresolved_spec=search._iterators[-1].unresolved_spec, start=search._total_samples,
                          random_state=search._random_state)
    if adopt_as is not None:
        adopt_as(more)
    search._iterators.append(more)
    search._trial_generator = itertools.chain(search._trial_generator, more)
    search._total_samples += n * per_sample
    search._finished = False


def add_suggestions(search, n: int) -> None:
    """A restored SearchGenerator goes on to `n` more trials than it had created."""
    search._total_samples, search._finished = search._counter + n, False


def objective(scheduler) -> tuple[str, str, float]:
    """(time attribute, metric, sign) of an ASHA, median or Hyperband scheduler: better, more sign * value."""
    sign = getattr(scheduler, "_metric_op", None)  # the median rule keeps only its mode
    sign = sign if sign is not None else 1.0 if scheduler._mode == "max" else -1.0
    return scheduler._time_attr, scheduler._metric, sign


def asha_brackets(scheduler, of_trials: bool = False):
    """An AsyncHyperBandScheduler's brackets, or (of_trials) its trial id -> bracket, writable."""
    return scheduler._trial_info if of_trials else scheduler._brackets


def rungs(bracket) -> list[tuple[float, dict]]:  # an ASHA bracket's (milestone, {trial id: sign * value}), writable
    return bracket._rungs


def mark_paused(tune_controller, trial) -> None:
    """A PENDING trial PAUSED, though it never ran: Tune starts a PAUSED one only when its scheduler chooses it."""
    tune_controller._set_trial_status(trial, trial.PAUSED)


def median_results(scheduler) -> dict:  # a MedianStoppingRule's results per trial, which may be written to
    return scheduler._results


class MedianStoppingRule(_MedianStoppingRule):
    def _on_insufficient_samples(self, tune_controller, trial, time):
        return self.too_few_others(tune_controller, trial, time)

    def too_few_others(self, tune_controller, trial, time) -> str:
        """What a trial with too few others at its time does (Ray's own: pause, now and then)."""
        return super()._on_insufficient_samples(tune_controller, trial, time)


class Bracket(_Bracket):
    """A synchronous Hyperband bracket, with what tuning reads of it under public names."""

    all_trials = property(lambda self: self._all_trials)  # every trial it was given
    live_trials = property(lambda self: self._live_trials)
    quota = property(lambda self: self._n0)  # trials it takes
    first_budget = property(lambda self: self._r0)
    # its current rung's; set, the rung it heads for next, in place of Ray's int(r * eta) (QuotaBracket)
    budget = property(lambda self: self._cumul_r, lambda self, b: self.__dict__.update(_r=b, _cumul_r=b))


class HyperBand(HyperBandForBOHB):
    """Tune's synchronous Hyperband, its private hooks under public names."""

    def _create_bracket(self, s: int):
        return self.create_bracket(s)

    def create_bracket(self, s: int):
        return super()._create_bracket(s)

    def bracket_settings(self, s: int) -> dict:
        """Ray's arguments for the s-th bracket of the current band."""
        return dict(time_attr=self._time_attr, max_trials=self._get_n0(s), init_t_attr=self._get_r0(s),
                    max_t_attr=self._max_t_attr, eta=self._eta, stop_last_trials=self._stop_last_trials)

    def first_budget(self, s: int) -> float:
        return self._get_r0(s)

    band = property(lambda self: self._state["band_idx"])
    brackets_per_band = property(lambda self: self._s_max_1)
    bands = property(lambda self: self._hyperbands)  # lists of brackets (None where not opened)
    trial_brackets = property(lambda self: self._trial_info)  # trial -> (bracket, band)

    def decide(self, tune_controller, bracket) -> str:
        """Ray's decision for a bracket whose rung may be complete."""
        return self._process_bracket(tune_controller, bracket)

    def _unpause_trial(self, tune_controller, trial):
        return self.unpause_trial(tune_controller, trial)

    def unpause_trial(self, tune_controller, trial) -> None:
        super()._unpause_trial(tune_controller, trial)


def bohb_job(loss: float, budget: float, config: dict):
    """One result in the job form HpBandSter's model reads, as TuneBOHB hands it over."""
    from ray.tune.search.bohb.bohb_search import _BOHBJobWrapper  # imports HpBandSter: only for BOHB

    return _BOHBJobWrapper(loss, budget, config)


@functools.cache
def tune_bohb() -> type:
    """Ray's TuneBOHB, its model made by make_model(space, settings) (Ray's: BOHB(space, **settings)) and its settings
    as config_space and sign (sign * value is a loss). A function: HpBandSter and ConfigSpace import in a second."""
    from ray.tune.search.bohb import TuneBOHB

    class Searcher(TuneBOHB):
        def _setup_bohb(self):
            super()._setup_bohb()
            self.bohber = self.make_model(self._space, self._bohb_config or {})

        def make_model(self, space, settings: dict):
            return self.bohber

        config_space = property(lambda self: self._space)
        sign = property(lambda self: self._metric_op)

    return Searcher
