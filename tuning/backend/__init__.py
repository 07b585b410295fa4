"""Every Ray call of the project: starting Ray, search algorithms and schedulers, ``tune.run``
with a CLIReporter, and reading back what the trials did; the trainables are in
tuning/backend/trainables.py, the Tune callbacks, stopper and reporter (Ray's subclasses) in
tuning/backend/tune_parts.py.

What leaves this package is plain data (dicts, lists, paths), so tables, reports and the CLIs
never touch Ray objects.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from tuning import progress as progress_math
from tuning import results, spaces
from tuning.backend.cluster import (ClusterError, cluster_info, environ, prestarted_workers,  # noqa: F401
                                    start_ray, stop_ray, worker_import_error)

if TYPE_CHECKING:  # tuning.data imports torch: a trial of a synthetic benchmark (a Ray actor
    # importing this package) starts seconds sooner without it
    from tuning.contract import DataSource

log = logging.getLogger(__name__)
say = logging.getLogger("tuning.progress")  # lines for the user: tuning.run prints them to stdout

ROWS_FILE = results.ROWS_FILE  # in the results dir: what the tables are built from
EXPERIMENT_NAME = "tune"  # Ray's experiment folder inside the results dir


def _tune_parts():
    """tuning.backend.tune_parts (Ray's subclasses), imported when Tune is first used: importing
    Ray takes seconds, and the CLIs answer --help and bad input without it."""
    from tuning.backend import tune_parts

    return tune_parts


def recorder():
    """A Tune callback that keeps every result in arrival order, with the run's wall clock
    (tune_parts.Recorder); pass it in RunSpec.callbacks and read its .rows afterwards."""
    return _tune_parts().Recorder()


def bohb_suggestion(space: spaces.Space) -> dict:
    """One configuration from the BOHB searcher tuning.run would build: proves hpbandster,
    ConfigSpace and Ray's TuneBOHB import and agree (tuning.doctor)."""
    from tuning.backend.bohb import PaperBOHB, configspace

    searcher = PaperBOHB(space=configspace(space, 0), metric=space.metric, mode=space.mode, seed=0)
    return searcher.suggest("doctor")


def ray_running() -> bool:
    """Whether this process is connected to Ray already (a notebook's own ray.init, or an earlier
    search's Ray left running): a search then uses it and leaves it running."""
    import ray

    return ray.is_initialized()


def _trial_dirname(trial) -> str:
    return trial.trial_id


@dataclass
class RunSpec:
    space: spaces.Space
    strategy: str
    num_samples: int
    max_epochs: int
    seed: int
    cpus_per_trial: float
    gpus_per_trial: float
    source: DataSource
    results_dir: Path
    workers_per_trial: int = 1
    # A trainer that returns its metrics (tuning.contract): the epochs it is passed, while
    # max_epochs, its one report, is 1.
    trainer_epochs: int | None = None
    max_train: int | None = None
    max_val: int | None = None
    budget_iterations: int | None = None  # stop the run after this many iterations in all
    max_failures: int = 0  # retries of a trial whose training raises, from its last checkpoint
    max_concurrent_trials: int | None = None  # trials running at once, at most (backend/slots.py); None: as resources allow
    resume: bool = False  # continue the experiment saved in results_dir (or storage_path)
    # Where Tune keeps the experiment and trial checkpoints: a folder or URI every node reaches.
    # None: results_dir/tune, on this machine.
    storage_path: str | None = None
    storage_name: str | None = None  # the experiment's folder there (experiment_location)
    progress: bool = True  # print the CLIReporter table
    # At most this often: the CLIReporter table, and on_progress(records) with every trial's
    # record (as run() returns them) while the run goes: tuning.run's live report.
    progress_every_s: float = 30
    on_progress: Callable[[list[results.TrialRecord]], None] | None = None
    # Snapshot the experiment after every step that changed a trial (backend/snapshots.py), so a
    # crash loses at most the epoch in flight (tuning.run). Comparisons, rerun rather than
    # resumed, keep Tune's adaptive period.
    snapshot_every_step: bool = True
    # Tune's per-trial loggers (TensorBoard, progress.csv): off, because with many short trials
    # they cost more than the trials (tuning.bench); on for users who read TensorBoard.
    tune_logs: bool = False
    callbacks: list = field(default_factory=list)
    # tuning.bench: what a pause and resume cost. "new_actor": Tune's own finished search, so that a
    # paused trial with no other trial waiting loses its actor and its resume starts a new one.
    pause_every_result: bool | str = False
    # Growing a search (tuning.run --add-samples, --warm-start, --time-budget). An extension is a
    # resume with add_samples new trials, the extension-th of the run (its seed lineage).
    add_samples: int = 0
    extension: int = 0
    warm_points: list = field(default_factory=list)  # configurations to evaluate first: the user's, then a warm start's
    warm_rows: list = field(default_factory=list)  # earlier runs' results, for BOHB's model
    time_budget_s: float | None = None  # seconds of running time, of which time_used_s are gone
    elapsed_before_s: float = 0.0  # the wall time of the run's earlier segments: the progress line goes on from it
    time_used_s: float = 0.0
    on_time_used: Callable[[float], None] | None = None  # told the running total every few seconds
    # Called with (search_alg, scheduler) once tune.run returns: lets tests look at the brackets
    # and at what BOHB's model was given.
    on_search: Callable | None = None

    @property
    def rows_file(self) -> Path:
        """Every result the run reported, one JSON line each, across resumes."""
        return self.results_dir / ROWS_FILE


def run(spec: RunSpec) -> tuple[list[results.TrialRecord], bool]:
    """Run the experiment through ``tune.run``: one record per trial, and whether Ctrl-C
    cut it short (its state is saved; ``resume=True`` continues it)."""
    from ray import tune
    from ray.tune import CheckpointConfig

    from tuning.backend import budget as time_budget
    from tuning.backend import interrupted as cut_short
    from tuning.backend import snapshots, stoppers, strategies, trainables

    parts = _tune_parts()
    space = spec.space
    # tuning.run makes it before anything starts; a comparison's runs are made here, where with a
    # --storage-path Tune makes none of its own.
    spec.results_dir.mkdir(parents=True, exist_ok=True)
    budget = (time_budget.TimeBudget(spec.time_budget_s, spec.time_used_s, spec.on_time_used)
              if spec.time_budget_s is not None else None)
    config, search_alg, scheduler = strategies.build(spec, budget)
    if spec.resume and hasattr(scheduler, "rebuild"):  # Tune saves no scheduler state: ASHA's rungs, median's results
        log.info("%s rebuilt from %d earlier results", "ASHA's rungs" if spec.strategy in ("asha", "tpe") else
                 "the median rule's results", scheduler.rebuild(results.read_rows(spec.rows_file)))
    # Ctrl-C: tune.run catches the first SIGINT, saves the experiment and returns; its handler
    # puts back the one it found, which is how we can tell afterwards that the run was cut short.
    before = signal.getsignal(signal.SIGINT)
    tune_handler_set = (threading.current_thread() is threading.main_thread()
                        and os.environ.get("TUNE_DISABLE_SIGINT_HANDLER", "0") == "0")
    storage, name = experiment_location(spec.results_dir, spec.storage_path, spec.storage_name)
    progress = [parts.Progress(spec.rows_file, spec.progress_every_s, spec.on_progress)] if spec.on_progress else []
    planned = planned_epochs(spec)
    if spec.progress:
        say.info("Planned: %d epochs in all (%s, %s)", planned, spec.strategy, _plan_words(spec))
    stopper = stoppers.stopper(spec.max_epochs, spec.budget_iterations)
    row_log, endings = parts.RowLog(spec.rows_file), cut_short.Endings(stopper)
    with tune_switches(spec.snapshot_every_step), snapshots.cheaper(), prestarted_workers():
        analysis = parts.raising_write_errors(tune.run, row_log)(
            trainables.trainable(spec),
            name=name,
            storage_path=storage,
            config=config,
            num_samples=_num_samples(spec),
            search_alg=search_alg,
            scheduler=scheduler,
            stop=stopper,
            resources_per_trial={"cpu": spec.cpus_per_trial, "gpu": spec.gpus_per_trial},
            progress_reporter=parts.reporter(space, spec.progress_every_s, planned=planned,
                                             results_dir=spec.results_dir, strategy=spec.strategy,
                                             elapsed_before_s=spec.elapsed_before_s, budget=budget)
            if spec.progress else None,
            verbose=1 if spec.progress else 0,
            # Without reuse every trial starts a fresh Python process and imports torch again.
            reuse_actors=True,
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            trial_dirname_creator=_trial_dirname,
            trial_name_creator=trainables.trial_name(space),
            raise_on_failed_trial=False,
            max_failures=spec.max_failures,
            resume=True if spec.resume else None,
            # Tune keeps a callback's state by its place in the list: ones added later go last.
            callbacks=[row_log, *(parts.tune_loggers() if spec.tune_logs else []), *progress, *spec.callbacks,
                       *([time_budget.StopWhenSpent(budget)] if budget else []), endings],
        )
    for p in progress:
        p.wait()  # a live report being written finishes before the final one
    if budget is not None:
        budget.save(force=True)
    if spec.on_search is not None:
        spec.on_search(search_alg, scheduler)
    interrupted = tune_handler_set and signal.getsignal(signal.SIGINT) is before
    signal.signal(signal.SIGINT, before)  # Tune leaves its handler installed after a normal run
    rows = results.read_rows(spec.rows_file)
    records = [parts.trial_record(t, rows.get(t.trial_id, []), spec.results_dir) for t in analysis.trials]
    return (endings.corrected(records) if interrupted else records), interrupted


@contextlib.contextmanager
def tune_switches(snapshot_every_step: bool):
    """Tune's switches, read from the environment by tune.run on the driver: set for the run and
    put back as they were afterwards, so that importing or calling tuning leaves the process's
    environment unchanged. A value the user set is theirs and is kept (docs/troubleshooting.md)."""
    wanted = {
        # tune.run's default output engine ignores a passed CLIReporter (Ray 2.60); the old one prints it.
        "RAY_AIR_NEW_OUTPUT": "0",
        # num_to_keep forces an experiment snapshot after checkpoints; its "may become a bottleneck"
        # warning fires every few epochs of a fast trial and buries the table. The snapshot is tiny.
        "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
        # Tune's per-trial loggers (result.json, progress.csv, TensorBoard) stay off: they live in a
        # staging folder that every experiment snapshot copies to storage whole, so with a snapshot per
        # step that copy never stopped, and 100 trials of 0.5 s took several times their ideal time
        # (tuning.bench, overhead). The rows go to one results.jsonl instead, written as they arrive;
        # RunSpec.tune_logs (tuning.run --tune-logs) brings the loggers back, at that cost.
        "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
        # A snapshot after every step (that changed a trial: backend/snapshots.py), so a crash loses
        # at most one (tuning.run); comparisons, rerun rather than resumed, keep Tune's adaptive period.
        "TUNE_GLOBAL_CHECKPOINT_S": "0" if snapshot_every_step else None,
    }
    with environ(wanted, keep_set=True):
        yield


def planned_epochs(spec: RunSpec) -> int:
    """The run's planned total in epochs (tuning/progress.py): what the progress line counts to."""
    return progress_math.planned_epochs(spec.strategy, trials=_trials(spec), max_epochs=spec.max_epochs,
                                        grace_period=spec.space.grace_period,
                                        reduction_factor=spec.space.reduction_factor)


def _plan_words(spec: RunSpec) -> str:
    trials = _trials(spec)
    if spec.space.grid and spec.strategy != "grid":
        points = " x ".join(f"{len(spec.space.params[k].grid_values())} {k}" for k in spec.space.grid)
        trials = f"{trials} (grid of {points} x {spec.num_samples} samples)"
    if spec.strategy in ("grid", "random"):
        return f"{trials} trials x {spec.max_epochs} epochs"
    if spec.strategy == "median":
        return (f"at most {trials} trials x {spec.max_epochs} epochs: the median stopping rule stops some sooner, "
                f"from epoch {min(spec.space.grace_period, spec.max_epochs)}")
    if spec.strategy == "asha":
        return (f"{trials} trials, rungs from {min(spec.space.grace_period, spec.max_epochs)} to {spec.max_epochs} "
                f"epochs, 1/{spec.space.reduction_factor} going on at each")
    return f"{trials} trials in Hyperband brackets up to {spec.max_epochs} epochs, eta {spec.space.reduction_factor}"


def _trials(spec: RunSpec) -> int:
    """Trials the run plans: for grid, the grid times its repeats; otherwise num_samples, each a
    pass over the grid points of the parameters Space.grid names (Tune's grid_search)."""
    return _num_samples(spec) * (1 if spec.strategy == "grid" else spaces.mixed_grid_size(spec.space))


def _num_samples(spec: RunSpec) -> int:
    """Trials for tune.run to create; for grid, the grid times its repeats (LazyGrid walks the
    grid num_samples times). A resume creates what its restored search has left."""
    return spec.num_samples * (spaces.grid_size(spec.space) if spec.strategy == "grid" else 1)


def experiment_location(results_dir: Path, storage_path: str | None, name: str | None = None) -> tuple[str, str]:
    """(storage_path, name) for tune.run: results_dir/tune by default; on shared storage, the
    run's own folder (`name`: run.json's storage_name), else one named after the results dir."""
    if storage_path is None:
        return str(results_dir.absolute()), EXPERIMENT_NAME
    return storage_path, name or results_dir.name
