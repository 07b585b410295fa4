"""The pieces tuning.backend hands tune.run that subclass Ray's own: callbacks, the
progress reporter, the synthetic benchmarks' trainable, and the reading of a Tune trial back into
plain data. Imported lazily, once, by tuning.backend when Tune is used: it imports Ray, and the
CLIs answer --help and bad input without it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pyarrow.fs
import ray
from ray import tune
from ray.tune import Callback
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback

from tuning import objectives, progress, results, spaces
from tuning import params as param_types
from tuning.backend import rayinternals
from tuning.compare.benchmarks import BENCHMARKS

log = logging.getLogger(__name__)



class Recorder(Callback):
    """Keeps every result in arrival order, with the run's wall clock: what a budget-vs-incumbent
    curve needs, and what per-trial result files cannot say."""

    def __init__(self):
        self.rows: list[dict] = []
        self.starts: dict[str, float] = {}  # trial id -> when Tune started it (wall_s)
        self.started = time.monotonic()

    def on_trial_start(self, iteration, trials, trial, **info):
        self.starts.setdefault(trial.trial_id, time.monotonic() - self.started)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.rows.append({**result, "trial_id": trial.trial_id, "wall_s": time.monotonic() - self.started,
                          "config": {k: param_types.plain(v) for k, v in trial.config.items()}})


BAR_EVERY_S = 0.5  # the progress bar's updates, at most this often


class Reporter(rayinternals.Reporter):
    """Tune's CLIReporter, made safe for trials Tune has not scheduled yet, and for finished trials
    that never reported the metric.

    Its error table reads ``Trial.error_file`` of every trial, and in Ray 2.60 that raises
    "Should not access `trial_driver_staging_path` without setting `trial_dir_name`" for a trial
    Tune has added but not yet scheduled (its directory is assigned at scheduling). That crashed
    runs with HyperBandForBOHB, whose pending and paused trials wait on each other. Assigning
    the directory the way Tune does when it schedules the trial keeps both tables whole: every
    trial's progress row, and every real error row.

    It sorts finished trials by the metric and raises TypeError on one without it (a trial the
    run stopped before its first result, a trial that failed at once): the table goes unsorted then.

    Its "Current best trial" line looks up every parameter column in the best trial's config and
    raises KeyError where a conditional parameter is absent (the table itself shows it empty):
    that line gets the trial as it is, with None for the parameters it does not have."""

    def best_trial(self, best):
        config = (best.last_result or {}).get("config", {}) if best is not None else {}
        if best is None or all(p in config for p in self.parameters):
            return best
        full = {**dict.fromkeys(self.parameters), **config}
        return SimpleNamespace(trial_id=best.trial_id, last_result={**best.last_result, "config": full})

    def setup_progress(self, planned: int, results_dir: Path | None, *, strategy: str = "",
                       elapsed_before_s: float = 0.0, constraints: dict | None = None, worst: float | None = None,
                       one_objective: bool = True, budget=None) -> None:
        """Each table is followed by a progress line (tuning/progress.py) over `planned` epochs,
        also written to results_dir/progress.json for the live report; an interactive terminal
        also gets a progress bar, updated at every step. `elapsed_before_s`: the wall time of the
        run's earlier segments (a resume), which the elapsed time goes on from."""
        self._planned, self._progress_file = planned, results_dir and results_dir / progress.PROGRESS_FILE
        self._constraints = constraints or {}  # the line's best is of feasible results
        # Over several objectives the first one's best is no trial's merit (often one stopped early, off
        # the front): the line leaves it out, and the live report draws the front.
        self._one_objective = one_objective
        self._worst = worst  # what a diverged trial reports: no one's best (a run where all diverged shows none)
        self._strategy, self._before = strategy, elapsed_before_s
        self._budget = budget  # a --time-budget's TimeBudget: the time left is at most what it has left
        self._started, self._at_start, self._at_once, self._early = time.monotonic(), None, 1, None
        self._last = (None, None)  # (when, epochs done) at the last line: the recent rate
        self._bar, self._bar_at = None, 0.0
        if sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=planned, unit="epoch", desc="tuning", file=sys.stderr, leave=False)

    def should_report(self, trials, done=False):
        # At most every BAR_EVERY_S: counting the epochs reads every trial, and Tune asks at every
        # step, which at 10,000 trials made the count grow with the run (docs/performance.md).
        if getattr(self, "_bar", None) is not None and (done or time.monotonic() >= self._bar_at):
            self._bar.n = min(_epochs_done(trials), self._bar.total)
            self._bar.refresh()
            self._bar_at = time.monotonic() + BAR_EVERY_S
        return super().should_report(trials, done)

    def report(self, trials, done, *sys_info):
        for trial in trials:
            if trial.storage.trial_dir_name is None:
                trial.init_local_path()
        self.sort_finished_by_metric(all(self.metric in (t.last_result or {}) for t in trials
                                         if t.status == "TERMINATED"))
        super().report(trials, done, *sys_info)
        if getattr(self, "_planned", None) is not None:
            self._progress(trials, done)

    def _progress(self, trials, done: bool) -> None:
        done_now = _epochs_done(trials)
        if self._at_start is None:  # a resume's earlier epochs: this segment's clock never saw them
            self._at_start = done_now if done_now < self._planned else 0
        self._at_once = max(self._at_once, sum(t.status == "RUNNING" for t in trials))
        results = [t.last_result for t in trials if (t.last_result or {}).get("training_iteration")]
        per_epoch = [r["time_total_s"] / r["training_iteration"] for r in results if r.get("time_total_s")]
        if self._constraints:  # the best feasible one: an infeasible value is no one's best
            values = [r[self.metric] for r in results if isinstance(r.get(self.metric), (int, float))
                      and r[self.metric] != self._worst and objectives.violation(r, self._constraints) == 0]
        else:
            values = [v for t in trials if self.metric in t.metric_analysis
                      for v in [t.metric_analysis[self.metric][self.mode]] if v != self._worst]
        best = (min if self.mode == "min" else max)(values) if values and self._one_objective else None
        now = time.monotonic()
        last_at, last_done = self._last
        rate = (done_now - last_done) / (now - last_at) if last_at is not None and now > last_at else None
        self._last = (now, done_now)
        est = progress.estimate(done=done_now, done_at_start=self._at_start, planned=self._planned,
                                elapsed_s=self._before + now - self._started, epoch_s=per_epoch,
                                at_once=self._at_once, best=best, strategy=self._strategy,
                                running=sum(t.status == "RUNNING" for t in trials),
                                waiting=sum(t.status == "PENDING" for t in trials), recent_rate=rate or None,
                                budget_left_s=self._budget.total_s - self._budget.used() if self._budget else None)
        if self._bar is not None:
            self._bar.total = est.planned
        # The estimate the run is judged by at the end: made at 10 % of the run, so not on a resume past it.
        if (self._early is None and est.left_s is not None and done_now >= 0.1 * self._planned
                and self._at_start < 0.1 * self._planned):
            self._early = est.elapsed_s + est.left_s
        line = est.line(self.metric, finished=done)
        if done and self._early is not None:
            line += f" (estimated after the first 10 % of the run: {progress.duration(self._early)})"
        print(line, flush=True)
        if self._progress_file is not None:
            progress.write(self._progress_file, est, line, finished=done)
        if done and self._bar is not None:
            self._bar.close()


def _epochs_done(trials) -> int:
    return sum((t.last_result or {}).get("training_iteration", 0) for t in trials)


def reporter(space: spaces.Space, every_s: float = 30, *, planned: int | None = None,
             results_dir: Path | None = None, strategy: str = "", elapsed_before_s: float = 0.0,
             budget=None) -> Reporter:
    """The progress table of a run of `space`, sorted by its metric; with `planned` (epochs), a
    progress line and ETA after each table (Reporter.setup_progress)."""
    # A table at the first step, then at most every every_s (Tune's default, 5 s, buries a CIFAR
    # run's output in full tables), and the final one: a short run still shows start and end.
    # The table is asked for outright: left to Tune, it depends on the verbosity the previous
    # tune.run of the process left behind, and a second run in one process printed none.
    # Tune shows only the columns some trial has reported.
    columns = [*dict.fromkeys([space.metric, "loss", "accuracy"]), "training_iteration"]
    table = Reporter(metric_columns=columns, parameter_columns=list(space.params), metric=space.metric,
                     mode=space.mode, sort_by_metric=True, max_report_frequency=every_s,
                     print_intermediate_tables=True)
    if planned is not None:
        table.setup_progress(planned, results_dir, strategy=strategy, elapsed_before_s=elapsed_before_s,
                             constraints=dict(space.constraints), worst=space.worst,
                             one_objective=len(objectives.of(space)) == 1, budget=budget)
    return table


def tune_loggers() -> list:
    """Tune's own per-trial loggers (result.json, progress.csv, TensorBoard): RunSpec.tune_logs."""
    return [JsonLoggerCallback(), CSVLoggerCallback(), TBXLoggerCallback()]


class Progress(Callback):
    """Hands every trial's record to on_progress at the first step, then at most every
    every_s seconds (counted from the end of the last call).

    The records are read on the driver, between Tune's steps (Tune's trials are not thread-safe);
    on_progress runs in a thread, one call at a time, so a slow one (a report's figures: seconds on
    a loaded machine) neither holds up the trials waiting for the driver to take their results nor
    makes Tune warn that a callback is a bottleneck. on_progress failing never stops the run: the
    first failure is logged, later ones are not (they would repeat it every every_s). wait() joins
    the call in flight."""

    def __init__(self, rows_file: Path, every_s: float, on_progress: Callable[[list[results.TrialRecord]], None]):
        self.rows_file, self.every_s, self.on_progress = rows_file, every_s, on_progress
        self.next, self.warned, self.worker = 0.0, False, None  # the first at the first step

    def on_step_end(self, iteration, trials, **info):
        if time.monotonic() < self.next or (self.worker is not None and self.worker.is_alive()):
            return
        rows = results.read_rows(self.rows_file, quiet=True)
        records = [trial_record(t, rows.get(t.trial_id, [])) for t in trials]
        self.worker = threading.Thread(target=self._call, args=(records,), name="on_progress", daemon=True)
        self.worker.start()

    def _call(self, records: list[results.TrialRecord]) -> None:
        began = time.monotonic()
        try:
            self.on_progress(records)
        except Exception as exc:  # whatever it is, the trials go on
            if not self.warned:
                log.warning("on_progress failed (%s: %s); the run goes on, and later failures are not "
                            "logged", type(exc).__name__, exc)
                self.warned = True
        # It takes CPU from the trials: keep that under a tenth of the time, however slow it gets.
        took = time.monotonic() - began
        self.next = time.monotonic() + max(self.every_s, 9 * took)

    def wait(self) -> None:
        if self.worker is not None:
            self.worker.join()


class RowLog(Callback):
    """Appends every result to `path` (results.jsonl) as it arrives, before the step's experiment
    snapshot: after a crash the file holds what the snapshot on storage knows, or more (the
    snapshot is copied there in the background); a resume trains those epochs again, and the
    tables count them as recomputed.

    A row that cannot be written (a full disk) raises results.WriteError out of tune.run: Tune
    calls this before it records the result and its checkpoint, so the saved experiment stays
    behind the file, and a resume trains that epoch again and logs it then."""

    def __init__(self, path: Path):
        self.path = path
        self.error: results.WriteError | None = None
        # A line cut short by a crash or a full disk must not swallow the next row.
        if path.exists() and path.stat().st_size:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    self._append("\n")

    def _append(self, text: str) -> None:
        try:
            with open(self.path, "a") as f:
                f.write(text)
        except OSError as exc:
            raise results.WriteError(self.path, exc) from None

    def on_trial_result(self, iteration, trials, trial, result, **info):
        try:
            self._append(json.dumps({**result, "trial_id": trial.trial_id}, default=str) + "\n")
        except results.WriteError as exc:
            self.error = exc
            raise


def raising_write_errors(tune_run, rows: RowLog):
    """tune.run, except that a row the `rows` callback could not write comes out as the
    results.WriteError it is: Tune wraps a callback's exception in a TuneError of its traceback."""

    def call(*args, **kwargs):
        try:
            return tune_run(*args, **kwargs)
        except Exception:
            if rows.error is not None:
                raise rows.error from None
            raise

    return call


class SyntheticBenchmark(tune.Trainable):
    """A synthetic benchmark as a class Trainable: an evaluation is a pure function of
    (config, t, seed), so the only state is the iteration, which Tune itself checkpoints and
    restores; Tune saves only when HyperBand pauses the trial, not after every result."""

    def setup(self, config, *, benchmark: str, max_t: int, seed: int):
        self.fn, self.max_t, self.seed = BENCHMARKS[benchmark].fn, max_t, seed
        self.node_id = ray.get_runtime_context().get_node_id()
        self.reset_config(config)

    def reset_config(self, new_config):
        self.params = {k: param_types.plain(v) for k, v in new_config.items()}
        self.restored_from = 0
        return True

    def step(self):
        t = self.iteration + 1
        return {"loss": self.fn(self.params, t, self.max_t, self.seed), "epoch": t,
                "restored_from": self.restored_from, "node_id": self.node_id,
                "ended_at": time.time()}  # to the microsecond: Tune's timestamp has whole seconds

    def save_checkpoint(self, checkpoint_dir: str):
        return {"epoch": self.iteration}

    def load_checkpoint(self, checkpoint):
        self.restored_from = self.iteration  # Tune has restored the iteration already


def _kept_error(trial, results_dir: Path | None) -> str | None:
    """Where the trial's traceback is: Tune's error.txt, copied into the results dir when one is
    given (the copy's path relative to it), or the copy an earlier segment made; None if neither."""
    tune_file = Path(trial.error_file) if trial.error_file else None
    if results_dir is None:
        return str(tune_file) if tune_file is not None and tune_file.exists() else None
    kept = Path(ERRORS, f"{trial.trial_id}.txt")
    if tune_file is not None and tune_file.exists():
        try:
            (results_dir / ERRORS).mkdir(exist_ok=True)
            results.write_bytes(results_dir / kept, tune_file.read_bytes())
        except (OSError, results.WriteError) as exc:  # the run's tables matter more than the copy
            log.warning("trial %s's traceback not copied into %s (%s): it stays at %s", trial.trial_id,
                        results_dir, exc, tune_file)
            return str(tune_file)
    return str(kept) if (results_dir / kept).exists() else None


def _uri(fs, path: str) -> str:
    """A local path as is; anything else as a URI that pyarrow.fs opens (s3://bucket/key)."""
    return path if isinstance(fs, pyarrow.fs.LocalFileSystem) else f"{fs.type_name}://{path}"


ERRORS = "errors"  # in the results dir: each failed trial's traceback, <trial_id>.txt


def trial_record(trial, rows: list[dict], results_dir: Path | None = None) -> results.TrialRecord:
    """What the tables need to know of a trial: its rows, status, error and checkpoint. With
    `results_dir`, a failed trial's traceback is copied to results_dir/errors/<trial_id>.txt and
    error_file is that path, relative to the results dir: Tune writes it in Ray's session folder
    under /tmp, which is gone after a reboot (a resume then keeps the copy)."""
    error, error_file = None, None
    if trial.status == "ERROR":
        error_file = _kept_error(trial, results_dir)
    if error_file is not None:  # the trainer's whole traceback
        lines = [ln for ln in Path(results_dir or "", error_file).read_text().splitlines() if ln.strip()]
        error = lines[-1] if lines else "unknown error"
    checkpoint = trial.checkpoint
    return results.TrialRecord(
        trial_id=trial.trial_id,
        status=trial.status,
        config={k: param_types.plain(v) for k, v in trial.config.items()},
        rows=rows,
        error=error,
        error_file=error_file,
        failures=int(trial.run_metadata.num_failures),
        checkpoint=_uri(checkpoint.filesystem, checkpoint.path) if checkpoint is not None else None,
        path=trial.path if trial.storage.trial_dir_name else None,  # None: not scheduled yet
    )
