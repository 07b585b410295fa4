"""Every Ray call of the project: starting Ray, search algorithms and schedulers, ``tune.run``
with a CLIReporter, and reading back what the trials did; the trainables are in
tuning/backend/trainables.py, the results.jsonl log in tuning/backend/rowlog.py.

What leaves this package is plain data (dicts, lists, paths), so tables, reports and the CLIs
never touch Ray objects.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tuning import results, spaces
from tuning.backend import rowlog
from tuning.backend.cluster import ClusterError, cluster_info, quiet_ray_logging, start_ray, stop_ray  # noqa: F401
from tuning.backend.trainables import benchmark_trainable, train_function
from tuning.benchmarks import BENCHMARKS
from tuning.data import DataSource

log = logging.getLogger(__name__)

REPORTED = ["loss", "accuracy", "training_iteration"]
ROWS_FILE = results.ROWS_FILE  # in the results dir: what the tables are built from
EXPERIMENT_NAME = "tune"  # Ray's experiment folder inside the results dir


def recorder():
    """A Tune callback that keeps every result in arrival order, with the run's wall clock:
    what a budget-vs-incumbent curve needs, and what per-trial result files cannot say."""
    import time

    from ray.tune import Callback

    class Recorder(Callback):
        def __init__(self):
            self.rows: list[dict] = []
            self.starts: dict[str, float] = {}  # trial id -> when Tune started it (wall_s)
            self.started = time.monotonic()

        def on_trial_start(self, iteration, trials, trial, **info):
            self.starts.setdefault(trial.trial_id, time.monotonic() - self.started)

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.rows.append({**result, "trial_id": trial.trial_id, "wall_s": time.monotonic() - self.started,
                              "config": {k: spaces.plain(v) for k, v in trial.config.items()}})

    return Recorder()


def bohb_suggestion(space: spaces.Space) -> dict:
    """One configuration from the BOHB searcher tuning.run would build: proves hpbandster,
    ConfigSpace and Ray's TuneBOHB import and agree (tuning.doctor)."""
    from tuning.backend.hyperband import PaperBOHB

    searcher = PaperBOHB(space=spaces.to_configspace(space, 0), metric=space.metric, mode=space.mode, seed=0)
    return searcher.suggest("doctor")


def _stopper(max_t: int, budget_iterations: int | None):
    """Each trial stops at max_t; with a budget, the whole run stops once its trials have
    trained budget_iterations iterations (epochs, fidelity units) between them."""
    from ray.tune.stopper import CombinedStopper, MaximumIterationStopper, Stopper

    per_trial = MaximumIterationStopper(max_t)
    if budget_iterations is None:
        return per_trial

    class BudgetStopper(Stopper):
        def __init__(self):
            self.used = 0

        def __call__(self, trial_id, result):
            self.used += 1  # one result is one iteration of one trial
            # Past the budget, stop each trial at its next result: stop_all alone lets the
            # running trials report about a hundred more iterations (measured) before they stop.
            return self.used >= budget_iterations

        def stop_all(self):
            return self.used >= budget_iterations

    return CombinedStopper(per_trial, BudgetStopper())


def _reporter(space: spaces.Space, every_s: float = 30):
    """Tune's CLIReporter, made safe for trials Tune has not scheduled yet.

    Its error table reads ``Trial.error_file`` of every trial, and in Ray 2.60 that raises
    "Should not access `trial_driver_staging_path` without setting `trial_dir_name`" for a trial
    Tune has added but not yet scheduled (its directory is assigned at scheduling). That crashed
    runs with HyperBandForBOHB, whose pending and paused trials wait on each other. Assigning
    the directory the way Tune does when it schedules the trial keeps both tables whole: every
    trial's progress row, and every real error row."""
    from ray.tune import CLIReporter

    class Reporter(CLIReporter):
        def report(self, trials, done, *sys_info):
            for trial in trials:
                if trial.storage.trial_dir_name is None:
                    trial.init_local_path()
            super().report(trials, done, *sys_info)

    # A table at the first step, then at most every every_s (Tune's default, 5 s, printed 26 full
    # tables in 2 minutes of a CIFAR run), and the final one: a short run still shows start and end.
    return Reporter(metric_columns=REPORTED, parameter_columns=list(space.params), metric=space.metric,
                    mode=space.mode, sort_by_metric=True, max_report_frequency=every_s)


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
    max_train: int | None = None
    max_val: int | None = None
    budget_iterations: int | None = None  # stop the run after this many iterations in all
    max_failures: int = 0  # retries of a trial whose training raises, from its last checkpoint
    resume: bool = False  # continue the experiment saved in results_dir (or storage_path)
    # Where Tune keeps the experiment and trial checkpoints: a folder or URI every node reaches.
    # None: results_dir/tune, on this machine.
    storage_path: str | None = None
    progress: bool = True  # print the CLIReporter table
    # At most this often: the CLIReporter table, and on_progress(records) with every trial's plain
    # record (as run() returns them) while the run goes: tuning.run's live report.
    progress_every_s: float = 30
    on_progress: Callable[[list[dict]], None] | None = None
    # Snapshot the experiment after every step, so a crash loses at most the epoch in flight
    # (tuning.run). Comparisons, rerun rather than resumed, keep Tune's adaptive period.
    snapshot_every_step: bool = True
    # Tune's per-trial loggers (TensorBoard, progress.csv): off, because with many short trials
    # they cost more than the trials (tuning.bench); on for users who read TensorBoard.
    tune_logs: bool = False
    callbacks: list = field(default_factory=list)
    pause_every_result: bool = False  # tuning.bench: what a pause and resume cost
    # Growing a search (tuning.run --add-samples, --warm-start, --time-budget). An extension is a
    # resume with add_samples new trials, the extension-th of the run (its seed lineage).
    add_samples: int = 0
    extension: int = 0
    warm_points: list = field(default_factory=list)  # configurations to evaluate first
    warm_rows: list = field(default_factory=list)  # earlier runs' results, for BOHB's model
    time_budget_s: float | None = None  # seconds of running time, of which time_used_s are gone
    time_used_s: float = 0.0
    on_time_used: Callable[[float], None] | None = None  # told the running total every few seconds
    # Called with (search_alg, scheduler) once tune.run returns: lets tests look at the brackets
    # and at what BOHB's model was given.
    on_search: Callable | None = None

    @property
    def rows_file(self) -> Path:
        """Every result the run reported, one JSON line each, across resumes."""
        return self.results_dir / ROWS_FILE


def run(spec: RunSpec) -> tuple[list[dict], bool]:
    """Run the experiment through ``tune.run``: one plain record per trial, and whether Ctrl-C
    cut it short (its state is saved; ``resume=True`` continues it)."""
    from ray import tune
    from ray.tune import CheckpointConfig

    from tuning.backend import budget as time_budget
    from tuning.backend import strategies

    space = spec.space
    budget = (time_budget.TimeBudget(spec.time_budget_s, spec.time_used_s, spec.on_time_used)
              if spec.time_budget_s is not None else None)
    config, search_alg, scheduler = strategies.build(spec, budget)
    if spec.resume and hasattr(scheduler, "rebuild"):  # Tune saves no scheduler state: ASHA's rungs
        log.info("ASHA's rungs rebuilt from %d earlier results", scheduler.rebuild(results.read_rows(spec.rows_file)))
    if space.trainer in BENCHMARKS:
        trainable = tune.with_parameters(benchmark_trainable(), benchmark=space.trainer,
                                         max_t=spec.max_epochs, seed=spec.seed)
    else:
        trainable = tune.with_parameters(
            train_function, trainer_name=space.trainer, source=spec.source, max_epochs=spec.max_epochs,
            fixed=dict(space.fixed), seed=spec.seed, threads=max(1, int(spec.cpus_per_trial)),
            metric=space.metric, diverged_value=space.diverged_value, workers=spec.workers_per_trial,
            max_train=spec.max_train, max_val=spec.max_val)
    _set_tune_switches(spec.snapshot_every_step)
    # Ctrl-C: tune.run catches the first SIGINT, saves the experiment and returns; its handler
    # puts back the one it found, which is how we can tell afterwards that the run was cut short.
    before = signal.getsignal(signal.SIGINT)
    tune_handler_set = (threading.current_thread() is threading.main_thread()
                        and os.environ.get("TUNE_DISABLE_SIGINT_HANDLER", "0") == "0")
    storage, name = experiment_location(spec.results_dir, spec.storage_path)
    progress = [_progress(spec.rows_file, spec.progress_every_s, spec.on_progress)] if spec.on_progress else []
    row_log = rowlog.row_log(spec.rows_file)
    analysis = rowlog.raising_write_errors(tune.run, row_log)(
        trainable,
        name=name,
        storage_path=storage,
        config=config,
        num_samples=_num_samples(spec),
        search_alg=search_alg,
        scheduler=scheduler,
        stop=_stopper(spec.max_epochs, spec.budget_iterations),
        resources_per_trial={"cpu": spec.cpus_per_trial, "gpu": spec.gpus_per_trial},
        progress_reporter=_reporter(space, spec.progress_every_s) if spec.progress else None,
        verbose=1 if spec.progress else 0,
        # Without reuse every trial starts a fresh Python process and imports torch again.
        reuse_actors=True,
        checkpoint_config=CheckpointConfig(num_to_keep=2),
        trial_dirname_creator=_trial_dirname,
        raise_on_failed_trial=False,
        max_failures=spec.max_failures,
        resume=True if spec.resume else None,
        callbacks=[row_log, *(_tune_loggers() if spec.tune_logs else []), *progress, *spec.callbacks,
                   *([time_budget.StopWhenSpent(budget)] if budget else [])],
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
    return [_record(t, rows.get(t.trial_id, [])) for t in analysis.trials], interrupted


def _set_tune_switches(snapshot_every_step: bool) -> None:
    """Tune's switches, read from the environment by tune.run on the driver: set just before it.
    Not at import, so importing the package changes nothing for whoever imports it."""
    # tune.run's default output engine ignores a passed CLIReporter (Ray 2.60); the old one prints it.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # num_to_keep forces an experiment snapshot after checkpoints; its "may become a bottleneck"
    # warning fires every few epochs of a fast trial and buries the table. The snapshot is tiny.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Tune's per-trial loggers (result.json, progress.csv, TensorBoard) stay off: they live in a
    # staging folder that every experiment snapshot copies to storage whole, so with a snapshot per
    # step that copy never stopped, and 100 trials of 0.5 s took 1.7-3.2x their ideal time
    # (tuning.bench, overhead). The rows go to one results.jsonl instead, written as they arrive;
    # RunSpec.tune_logs (tuning.run --tune-logs) brings the loggers back, at that cost.
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    if snapshot_every_step:
        os.environ["TUNE_GLOBAL_CHECKPOINT_S"] = "0"
    else:
        os.environ.pop("TUNE_GLOBAL_CHECKPOINT_S", None)


def _num_samples(spec: RunSpec) -> int:
    """Trials for tune.run to create; for grid, the grid times its repeats (num_samples repeats
    the grid, as with tune.grid_search). A resume creates what its restored search has left."""
    return spec.num_samples * (spaces.grid_size(spec.space) if spec.strategy == "grid" else 1)


def experiment_location(results_dir: Path, storage_path: str | None) -> tuple[str, str]:
    """(storage_path, name) for tune.run: results_dir/tune by default; on shared storage, a
    folder named after the results dir, so runs sharing a storage path stay apart."""
    if storage_path is None:
        return str(results_dir.absolute()), EXPERIMENT_NAME
    return storage_path, results_dir.name


def _tune_loggers() -> list:
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback

    return [JsonLoggerCallback(), CSVLoggerCallback(), TBXLoggerCallback()]


def _progress(rows_file: Path, every_s: float, on_progress: Callable[[list[dict]], None]):
    """A Tune callback handing every trial's plain record to on_progress at the first step, then
    at most every every_s seconds (counted from the end of the last call).

    The records are read on the driver, between Tune's steps (Tune's trials are not thread-safe);
    on_progress runs in a thread, one call at a time, so a slow one (a report's figures: seconds on
    a loaded machine) neither holds up the trials waiting for the driver to take their results nor
    makes Tune warn that a callback is a bottleneck. on_progress failing never stops the run: the
    first failure is logged, later ones are not (they would repeat it every every_s). wait() joins
    the call in flight."""
    import time

    from ray.tune import Callback

    class Progress(Callback):
        def __init__(self):
            self.next, self.warned, self.worker = 0.0, False, None  # the first at the first step

        def on_step_end(self, iteration, trials, **info):
            if time.monotonic() < self.next or (self.worker is not None and self.worker.is_alive()):
                return
            rows = results.read_rows(rows_file, quiet=True)
            records = [_record(t, rows.get(t.trial_id, [])) for t in trials]
            self.worker = threading.Thread(target=self._call, args=(records,), name="on_progress", daemon=True)
            self.worker.start()

        def _call(self, records: list[dict]) -> None:
            began = time.monotonic()
            try:
                on_progress(records)
            except Exception as exc:  # whatever it is, the trials go on
                if not self.warned:
                    log.warning("on_progress failed (%s: %s); the run goes on, and later failures are not "
                                "logged", type(exc).__name__, exc)
                    self.warned = True
            # It takes CPU from the trials: keep that under a tenth of the time, however slow it gets.
            took = time.monotonic() - began
            self.next = time.monotonic() + max(every_s, 9 * took)

        def wait(self) -> None:
            if self.worker is not None:
                self.worker.join()

    return Progress()


def _uri(fs, path: str) -> str:
    """A local path as is; anything else as a URI that pyarrow.fs opens (s3://bucket/key)."""
    import pyarrow.fs

    return path if isinstance(fs, pyarrow.fs.LocalFileSystem) else f"{fs.type_name}://{path}"


def _record(trial, rows: list[dict]) -> dict:
    """What the tables need to know of a trial: its rows, status, error and checkpoint."""
    error = None
    if trial.status == "ERROR" and trial.error_file and Path(trial.error_file).exists():
        lines = [ln for ln in Path(trial.error_file).read_text().splitlines() if ln.strip()]
        error = lines[-1] if lines else "unknown error"
    checkpoint = trial.checkpoint
    return {
        "trial_id": trial.trial_id,
        "status": trial.status,
        "config": {k: spaces.plain(v) for k, v in trial.config.items()},
        "rows": rows,
        "error": error,
        "failures": int(trial.run_metadata.num_failures),
        "checkpoint": _uri(checkpoint.filesystem, checkpoint.path) if checkpoint is not None else None,
        "path": trial.path if trial.storage.trial_dir_name else None,  # None: not scheduled yet
    }
