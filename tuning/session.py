"""One search run, from a checked record to its files: the data prepared and Ray started, the search
run through tuning.backend, then the tables, the incumbent's test accuracy, best_config.json,
run.json and the report; and what it came to, as a SearchResult. tuning.api checks the input and
makes the record (tuning.record), then calls this.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pandas as pd

from tuning import backend, cli, contract, growth, objectives, provenance, results, spacejson, spaces, tracking
from tuning import tracking_store
from tuning.record import DataOrigin, Incumbent, RunRecord, Segment
from tuning.results import TrialRecord
from tuning.searchresult import Best, SearchResult

if TYPE_CHECKING:  # tuning.trial.data imports torch (3 s): only a CIFAR run's driver needs it
    from tuning.trial import data

log = logging.getLogger(__name__)


class MetricError(cli.TuningError):
    """The trainer's first result could not be used (the space's metric missing, or not a number):
    the run stopped there; its files are kept."""


def start(space: spaces.Space, record: RunRecord, *, address: str | None, worker_logs: bool) -> tuple:
    """(source, cluster, ray_was_running): the run's data (None for a trainer of the user's or a
    synthetic benchmark, which bring their own), the Ray cluster started or joined, as
    backend.cluster_info describes it, and whether Ray was up before (then it is left up)."""
    source = None
    if space.trainer == "cifar":
        from tuning.trial import data

        source = data.prepare(**record.data_args)
    running = backend.ray_running()
    backend.start_ray(address=address, worker_logs=worker_logs, num_cpus=cli.SMOKE_CPUS if record.smoke else None)
    cluster = backend.cluster_info()
    record.address = cluster["address"] if address else None
    return source, cluster, running


def with_precision(space: spaces.Space, record: RunRecord) -> spaces.Space:
    """The space as its trials run it: the recorded precision among the trainer's fixed arguments
    (on a resume too, so the flag keeps its effect)."""
    if not record.precision:
        return space
    return space.replace(fixed={**space.fixed, "precision": record.precision})


def execute(space: spaces.Space, record: RunRecord, source: data.DataSource | None, results_dir: Path, *,
            resume: bool, add_samples: int = 0, keep_ray: bool = False,
            on_start: Callable[[], None] | None = None, track: tracking_store.Target | None = None) -> SearchResult:
    """Run the record's search (a first segment, or a resume adding add_samples trials) and write
    its files. on_start is called once run.json says the run is running, before the first trial.
    Ray is stopped at the end unless keep_ray. track: log to MLflow too (tuning.tracking)."""
    from tuning.report import runreport  # matplotlib, scipy: only for a run that goes ahead

    space = with_precision(space, record)
    started = time.time()
    _record_start(space, record, source, results_dir, started, resume)
    tracker = tracking.Tracker(track, record, results_dir, list(space.params)) if track else None
    if tracker is not None:
        tracker.start()
        record.write(results_dir)  # the parent run's id, before the first trial
    if on_start is not None:
        on_start()

    def on_progress(records: list[TrialRecord]) -> None:
        if tracker is not None:
            tracker.update(records)
        runreport.write_from_records(results_dir, records, record, live=True)

    spec = _run_spec(space, record, source, results_dir, resume, add_samples, progress_every_s=runreport.RELOAD_S,
                     on_progress=on_progress)
    records = None
    try:
        try:
            records, interrupted = backend.run(spec)
        except BaseException:
            if tracker is not None:
                tracker.abandon()
            raise
        finally:
            if not keep_ray:
                backend.stop_ray()
        return _written(space, record, records, interrupted, results_dir, source, started, tracker)
    except KeyboardInterrupt:
        # Ctrl-C once the search had ended but before its end was written (Ray stopping, a test
        # evaluation): the tables were lost and run.json said "running". Written now, marked interrupted.
        if records is not None and record.status == "running":
            _one_report_run(record, records)
            trials, _ = _tables(space, record, records, results_dir)
            _write_front(results_dir, trials, space)
            _record_end(record, trials, None, "interrupted", started)
            record.write(results_dir)
            if tracker is not None:
                tracker.abandon()
        raise


def _tables(space: spaces.Space, record: RunRecord, records: list[TrialRecord], results_dir: Path):
    """trials.csv and epochs.csv of what ran, written; (trials, epochs)."""
    res = record.resources_per_trial
    trials = results.trials_table(records, list(space.params), strategy=record.strategy, max_epochs=record.max_epochs,
                                  metric=space.metric, mode=space.mode, cpus=res.cpu, gpus=res.gpu,
                                  constraints=space.constraints)
    trials = objectives.annotate(trials, space, record.max_epochs)  # several objectives: feasibility, rank
    epochs = results.epochs_table(records, list(space.params), space.metric)
    results.write_tables(results_dir, trials, epochs)
    return trials, epochs


def _written(space: spaces.Space, record: RunRecord, records: list[TrialRecord], interrupted: bool,
             results_dir: Path, source, started: float, tracker) -> SearchResult:
    """The files of a search that ended, and what it came to."""
    _one_report_run(record, records)
    stopped_by = _metric_error(records, space.metric, since=started)
    trials, epochs = _tables(space, record, records, results_dir)
    if stopped_by:
        wrong, where = stopped_by
        _record_end(record, trials, None, "stopped: the trainer's metrics cannot be used", started)
        record.error = wrong
        record.write(results_dir)
        _final_report(results_dir, trials, epochs, record)  # not the live page's "the run is going"
        if tracker is not None:
            tracker.finish(records, trials, None, record.status)
        raise MetricError(f"{wrong}; the run stopped at {where} (files kept in {results_dir})")
    pareto = _write_front(results_dir, trials, space)  # not before: a stopped run's front is of stand-in values
    unfinished = [r for r in records if r.status not in ("TERMINATED", "ERROR")] or interrupted
    best = _best(trials, records, space, source, record, results_dir, tested=not unfinished)
    spent = unfinished and record.time_budget_s is not None and record.time_used_s >= record.time_budget_s
    status = "time budget spent" if spent else "interrupted" if unfinished else "finished"
    _record_end(record, trials, best, status, started)
    record.write(results_dir)
    report = _final_report(results_dir, trials, epochs, record)
    # Last: report.html is one of the parent run's artifacts.
    lines = []
    if tracker is not None:
        lines = tracker.finish(records, trials, best, status)
        record.write(results_dir)  # the parent run's id, where it was opened late (the server was down)
    return SearchResult(results_dir=results_dir, status=status, trials=trials, epochs=epochs, best=best,
                        record=record, report=report, tracking=lines, pareto=pareto)


def _final_report(results_dir: Path, trials: pd.DataFrame, epochs: pd.DataFrame, record: RunRecord) -> Path | None:
    """report.html and report.md of the segment's end, over the live page; None where it failed."""
    from tuning.report import runreport

    try:
        runreport.write_report(results_dir, trials, epochs, record)
    except Exception as exc:  # the tables are written: a figure that fails must not lose the run's exit
        log.warning("report.html not written (%s: %s); try again with python -m tuning.report %s",
                    type(exc).__name__, exc, results_dir)
        return None
    return results_dir / "report.html"


def _write_front(results_dir: Path, trials: pd.DataFrame, space: spaces.Space) -> pd.DataFrame | None:
    """pareto.csv, for a space with several objectives or constraints: the rows of trials.csv on
    the front (tuning.objectives.front), best on the first objective first. None for one metric."""
    if not objectives.multi(space):
        return None
    front = objectives.front(trials) if not trials.empty else trials
    results.write_atomic(results_dir / "pareto.csv", lambda p: front.to_csv(p, index=False))
    return front


def _one_report_run(record: RunRecord, records: list[TrialRecord]) -> None:
    """A run whose every trial's one result is what its trainer returned is single-fidelity, as
    tuning.api makes one whose trainer it can read so (tuning.contract.reporting): its full budget
    is that one report, so max_epochs is 1 and trainer_epochs what the trainer was passed."""
    ran = [rec.rows for rec in records if rec.rows]
    if record.trainer_epochs is None and ran and all(r.get("returned") for rows in ran for r in rows):
        record.trainer_epochs, record.max_epochs = record.max_epochs, 1


def _record_start(space: spaces.Space, record: RunRecord, source, results_dir: Path, started: float,
                  resume: bool) -> None:
    """run.json as the run starts: on a first segment, where its data, code and space came from."""
    if not resume:
        if source is not None:
            record.data = DataOrigin(kind=source.kind, root=source.root)
        else:  # the trainer brings its own data
            record.data = DataOrigin(kind="trainer" if contract.is_user_trainer(space.trainer)
                                     else f"benchmark:{space.trainer}")
        record.fixed, record.versions = dict(space.fixed), provenance.versions()
        record.git_commit = provenance.git_commit()
        record.started = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started))
        record.metric, record.mode, record.params = space.metric, space.mode, spacejson.declarations(space)
    _close_killed_segment(record, results_dir)
    record.segments.append(Segment(started=round(started, 1)))
    record.status, record.resumes = "running", record.resumes + 1
    record.write(results_dir)


# What a running run rewrites as it goes: results as they arrive, the live report every 30 s.
_LIVE_FILES = (results.ROWS_FILE, "report.md", "run.json")


def _close_killed_segment(record: RunRecord, results_dir: Path) -> None:
    """A segment still open in run.json was killed (SIGKILL, a crash, the machine lost) before it
    could close: count it up to the last of its files written, the nearest a dead process can tell."""
    if not record.segments or record.segments[-1].ended is not None:
        return
    seg = record.segments[-1]
    last = max((p.stat().st_mtime for p in map(results_dir.joinpath, _LIVE_FILES) if p.exists()),
               default=seg.started)
    seg.wall_s, seg.ended = round(max(0.0, last - seg.started), 1), "killed"
    record.wall_time_s = round(record.wall_time_s + seg.wall_s, 1)
    log.info("the previous segment was killed before it closed; its %.0f s up to its last write are counted in "
             "wall_time_s", seg.wall_s)


def _metric_error(records: list[TrialRecord], metric: str, since: float) -> tuple[str, str] | None:
    """(what was wrong, where the run stopped) for a run its trainer's metrics stopped in the segment
    that began at `since`, else None. Every trial that reported such a result, in any segment,
    becomes ERROR with it, its stand-in values dropped: the tables once showed them TERMINATED with
    the space's worst value as a result, and a stopped segment's row, read back, stopped every later
    resume. Other trials may have reported the metric first (a branch of a conditional space that
    lacks it): the line says how many."""
    bad = []  # (when, trial, what, which metric) of each trial's first such result
    for rec in records:
        rows = [r for r in rec.rows if r.get(results.METRIC_ERROR)]
        if rows:
            at = rows[0].get("ended_at") or rows[0].get("timestamp") or float("inf")
            bad.append((at, rec, rows[0][results.METRIC_ERROR], rows[0].get(results.METRIC_LACKING) or metric))
            rec.rows = [r for r in rec.rows if not r.get(results.METRIC_ERROR)]
            rec.status, rec.error = "ERROR", rows[0][results.METRIC_ERROR]
    now = sorted((b for b in bad if b[0] >= since), key=lambda b: b[0])
    if not now:
        return None
    at, first, wrong, lacking = now[0]
    # Trials that had reported it by then (one that started as the run stopped may have since).
    fine = sum(any(results.is_number(r.get(lacking)) and r.get("ended_at", at) < at for r in rec.rows)
               for rec in records if rec is not first)
    which = "its first result" if wrong == contract.RAY_REPORT else f"the first result without a usable {lacking}"
    where = (f"trial {first.trial_id} ({', '.join(f'{k}={v!r}' for k, v in first.config.items())}), {which}"
             + (f", after {fine} trial{'s' * (fine != 1)} had reported one: a branch of the space that lacks it?"
                if fine and wrong != contract.RAY_REPORT else ""))
    return wrong, where


def _run_spec(space: spaces.Space, record: RunRecord, source, results_dir: Path, resume: bool, add_samples: int, *,
              progress_every_s: float, on_progress: Callable[[list[TrialRecord]], None]) -> backend.RunSpec:
    smoke = record.smoke
    if smoke and space.grace_period >= record.max_epochs > 1:
        # --smoke's few epochs under a space's later first rung (20 of 200 trees): the smoke run
        # judges at epoch 1, so it exercises the scheduler instead of running as random search.
        space = space.replace(grace_period=1)
    return backend.RunSpec(
        space=space, strategy=record.strategy, num_samples=record.num_samples, max_epochs=record.max_epochs,
        seed=record.seed, cpus_per_trial=record.resources_per_trial.cpu,
        gpus_per_trial=record.resources_per_trial.gpu, source=source, results_dir=results_dir,
        workers_per_trial=record.workers_per_trial, trainer_epochs=record.trainer_epochs,
        max_train=smoke.get("max_train"), max_val=smoke.get("max_val"), max_failures=record.max_failures, resume=resume,
        max_concurrent_trials=record.max_concurrent_trials,
        storage_path=record.storage_path, storage_name=record.storage_name, tune_logs=record.tune_logs,
        progress_every_s=progress_every_s, on_progress=on_progress, add_samples=add_samples,
        extension=len(record.extensions), **_warm(space, record, resume),
        time_budget_s=record.time_budget_s, time_used_s=record.time_used_s, elapsed_before_s=record.wall_time_s,
        on_time_used=lambda used: _time_used(results_dir, record, used))


def _warm(space: spaces.Space, record: RunRecord, resume: bool) -> dict:
    """RunSpec's warm start and the user's points to evaluate, theirs first: on a first segment
    only (a resume restores the search's own state)."""
    warm, mine = record.warm_start, list(record.points_to_evaluate or [])
    if resume or not (warm or mine):
        return {}
    if not warm:
        return {"warm_points": mine}
    if record.strategy not in ("bohb", "adaptive"):  # each one of the num_samples trials, none beyond them
        return {"warm_points": (mine + [c for c in warm["configs"] if c not in mine])[:record.num_samples]}
    return {"warm_points": mine, "warm_rows": growth.all_rows(growth.earlier_runs(warm["dirs"], space))}


def _time_used(results_dir: Path, record: RunRecord, used: float) -> None:
    record.time_used_s = used
    record.write(results_dir)


def _best(trials, records: list[TrialRecord], space: spaces.Space, source, record: RunRecord, results_dir: Path, *,
          tested: bool) -> Best | None:
    """The incumbent, measured on the test set when the run finished on CIFAR data; written to
    best_config.json."""
    several = objectives.multi(space)
    row, note = (objectives.incumbent(trials, space, record.max_epochs) if several else
                 results.incumbent(trials, space.metric, space.mode, record.max_epochs))
    if row is None:
        return None
    # The trial's own config, not the table's row: an inactive parameter is absent there (the
    # table has an empty cell), and an integer stays one in a column that has empty cells.
    config = next((r.config for r in records if r.trial_id == row["trial_id"]), None)
    config = {p: row[p] for p in space.params} if config is None else dict(config)
    # In the declared order: BOHB's ConfigSpace hands its configurations over sorted by name.
    config = {**{p: config[p] for p in space.params if p in config}, **config}
    if source is not None and tested:
        row.update(_test_best(row, records, space, source, record.smoke.get("max_test"),
                              width=config.get("width", space.fixed.get("width", 16))))
    metrics = {k: row[k] for k in [*results.metric_keys(records, space.metric), "test_loss", "test_accuracy",
                                   "test_images"] if row.get(k) is not None}
    checkpoint = _checkpoint(row, records)
    best = Best(trial_id=row["trial_id"], config=config, metrics=metrics,
                epochs=int(row["epochs"]), note=note, checkpoint=checkpoint)
    record.best, record.best_note = Incumbent(trial_id=best.trial_id, epochs=best.epochs, row=row), note
    kept = checkpoint if not isinstance(checkpoint, Path) else str(
        checkpoint.relative_to(results_dir) if checkpoint.is_relative_to(results_dir) else checkpoint)
    results.write_json(results_dir / "best_config.json", {
        "trial_id": best.trial_id, "config": best.config, "fixed": dict(space.fixed), "metric": space.metric,
        "mode": space.mode, **metrics, "epochs": best.epochs, **({"note": note} if note else {}),
        "checkpoint": kept, **(_front_json(trials, records, space) if several else {})})
    return best


def _front_json(trials, records: list[TrialRecord], space: spaces.Space) -> dict:
    """best_config.json's account of several objectives: what they are, what "best" means, and
    every trial on the front with its configuration and metrics."""
    configs = {r.trial_id: r.config for r in records}
    keys = objectives.required(space)
    return {
        "objectives": objectives.of(space),
        **({"constraints": {k: list(c) for k, c in space.constraints.items()}} if space.constraints else {}),
        "best_means": "the front member best on the first objective (the others break a tie); the whole front is "
                      "under pareto",
        "pareto": [{"trial_id": row["trial_id"], "config": configs.get(row["trial_id"], {}),
                    **{k: objectives.plain(row[k]) for k in keys if k in row}}
                   for _, row in objectives.front(trials).iterrows()]}


def _checkpoint(best: dict, records: list[TrialRecord]) -> Path | str | None:
    """The best trial's last checkpoint folder, where it holds a trainer's state."""
    from tuning.trial import trialstate

    ckpt = next((r.checkpoint for r in records if r.trial_id == best["trial_id"]), None)
    if not trialstate.holds_state(ckpt):
        return None
    return ckpt if "://" in ckpt else Path(ckpt)


def _record_end(record: RunRecord, trials, best: Best | None, status: str, started: float) -> None:
    """What the segment came to, added to the record (run.json)."""
    n = len(trials)
    record.status = status
    wall = round(time.time() - started, 1)
    record.wall_time_s = round(record.wall_time_s + wall, 1)
    record.segments[-1].wall_s, record.segments[-1].ended = wall, status  # opened by _record_start
    record.trials = n
    record.cpu_hours = float(trials["cpu_hours"].sum()) if n else 0.0
    record.gpu_hours = float(trials["gpu_hours"].sum()) if n else 0.0
    record.stopped_early, record.failed = _count(trials, "stopped_early"), _count(trials, "status", "ERROR")
    record.diverged, record.memory_growing = _count(trials, "diverged"), _count(trials, "memory_growing")
    record.resumed_trials = n - _count(trials, "resumed_at", "")
    record.recomputed_epochs = int(trials["recomputed_epochs"].sum()) if n else 0
    if best is None:
        record.best, record.best_note = None, ""


def _count(trials, column: str, value=True) -> int:
    return int((trials[column] == value).sum()) if column in trials else 0


def _test_best(best: dict, records: list[TrialRecord], space: spaces.Space, source: data.DataSource,
               max_test: int | None, *, width: int) -> dict:
    """Test-set accuracy of the best trial's final model: measured once, for the best config only."""
    from tuning.trial import trainer, trialstate

    ckpt = next((r.checkpoint for r in records if r.trial_id == best["trial_id"]), None)
    if ckpt is None:
        return {}
    state = trialstate.load_checkpoint(ckpt)  # from shared storage on a cluster: copied here first
    from tuning.trial import data

    test = data.load_test(source, max_test)
    m = trainer.evaluate_test(state, test, width=width)  # the trial's width, searched or fixed
    return {"test_loss": m["loss"], "test_accuracy": m["accuracy"], "test_images": len(test)}
