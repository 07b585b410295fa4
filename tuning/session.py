"""One search run, from a checked plan to its files: the data prepared and Ray started, the search
run through tuning.backend, then the tables, the best trial's test accuracy, best_config.json,
run.json and the report. tuning.run parses and checks the flags, makes the plan and calls this.

The plan is the run's record (run.json): what was asked for and, as the run goes, what came of it.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tuning import backend, cli, data, growth, results, spaces

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What a run (or a resumed segment of one) came to."""

    status: str  # as run.json records it: "finished", "interrupted" or "time budget spent"
    best: dict | None  # the best trial's row of trials.csv, with its test figures where measured
    succeeded: int  # trials that trained to the end (TERMINATED)


def start(space: spaces.Space, plan: dict, *, address: str | None, worker_logs: bool) -> tuple:
    """(source, cluster): the run's data (None for a synthetic benchmark, which needs none) and the
    Ray cluster started or joined, as backend.cluster_info describes it; the plan records its
    address when one was given."""
    source = None
    if space.trainer == "cifar":
        source = data.prepare(**plan["data_args"])
    backend.start_ray(address=address, worker_logs=worker_logs, num_cpus=cli.SMOKE_CPUS if plan["smoke"] else None)
    cluster = backend.cluster_info()
    plan["address"] = cluster["address"] if address else None
    return source, cluster


def with_precision(space: spaces.Space, plan: dict) -> spaces.Space:
    """The space as its trials run it: the recorded precision among the trainer's fixed arguments
    (on --resume too, so the flag keeps its effect)."""
    if not plan.get("precision"):
        return space
    return space.replace(fixed={**space.fixed, "precision": plan["precision"]})


def execute(space: spaces.Space, plan: dict, source: data.DataSource | None, results_dir: Path, *,
            resume: bool, add_samples: int = 0, on_start: Callable[[], None] | None = None) -> Outcome:
    """Run the plan's search (a first segment, or a resume adding add_samples trials) and write
    its files. on_start is called once run.json says the run is running, before the first trial."""
    from tuning import runreport  # matplotlib, scipy: only for a run that goes ahead

    space = with_precision(space, plan)
    started = time.time()
    _record_start(space, plan, source, results_dir, started, resume, params=runreport.declarations(space))
    if on_start is not None:
        on_start()
    spec = _run_spec(space, plan, source, results_dir, resume, add_samples, progress_every_s=runreport.RELOAD_S,
                     on_progress=lambda records: runreport.write_from_records(results_dir, records, plan, live=True))
    records, interrupted = backend.run(spec)
    backend.stop_ray()

    params = list(space.params)
    resources = plan["resources_per_trial"]
    trials = results.trials_table(records, params, strategy=plan["strategy"], max_epochs=plan["max_epochs"],
                                  metric=space.metric, mode=space.mode, cpus=resources["cpu"], gpus=resources["gpu"])
    epochs = results.epochs_table(records, params)
    results.write_tables(results_dir, trials, epochs)
    unfinished = [r for r in records if r["status"] not in ("TERMINATED", "ERROR")] or interrupted
    best = _best(trials, records, space, source, plan, results_dir, tested=not unfinished)
    spent = unfinished and plan.get("time_budget_s") is not None and plan.get("time_used_s", 0) >= plan["time_budget_s"]
    status = "time budget spent" if spent else "interrupted" if unfinished else "finished"
    _record_end(plan, trials, best, status, started)
    results.write_json(results_dir / "run.json", plan)
    try:
        runreport.write_report(results_dir, trials, epochs, plan)
    except Exception as exc:  # the tables are written: a figure that fails must not lose the run's exit
        log.warning("report.html not written (%s: %s); try again with python -m tuning.report %s",
                    type(exc).__name__, exc, results_dir)
    return Outcome(status=status, best=best, succeeded=_count(trials, "status", "TERMINATED"))


def _record_start(space: spaces.Space, plan: dict, source, results_dir: Path, started: float,
                  resume: bool, *, params: dict) -> None:
    """run.json as the run starts: on a first segment, where its data, code and space (its
    parameter declarations, `params`) came from."""
    if not resume:
        plan.update(data={"kind": source.kind, "root": source.root} if source else
                    {"kind": f"benchmark:{space.trainer}"}, fixed=dict(space.fixed),
                    versions=results.versions(), git_commit=results.git_commit(),
                    started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                    metric=space.metric, mode=space.mode, params=params)
    plan.update(status="running", resumes=plan.get("resumes", -1) + 1)
    results.write_json(results_dir / "run.json", plan)


def _run_spec(space: spaces.Space, plan: dict, source, results_dir: Path, resume: bool, add_samples: int, *,
              progress_every_s: float, on_progress: Callable[[list[dict]], None]) -> backend.RunSpec:
    smoke = plan["smoke"]
    return backend.RunSpec(
        space=space, strategy=plan["strategy"], num_samples=plan["num_samples"], max_epochs=plan["max_epochs"],
        seed=plan["seed"], cpus_per_trial=plan["resources_per_trial"]["cpu"],
        gpus_per_trial=plan["resources_per_trial"]["gpu"], source=source, results_dir=results_dir,
        workers_per_trial=plan["workers_per_trial"], max_train=smoke.get("max_train"),
        max_val=smoke.get("max_val"), max_failures=plan["max_failures"], resume=resume,
        storage_path=plan.get("storage_path"), tune_logs=plan.get("tune_logs", False),
        progress_every_s=progress_every_s, on_progress=on_progress, add_samples=add_samples,
        extension=len(plan.get("extensions", [])), **_warm(space, plan, resume),
        time_budget_s=plan.get("time_budget_s"), time_used_s=plan.get("time_used_s", 0.0),
        on_time_used=lambda used: _time_used(results_dir, plan, used))


def _warm(space: spaces.Space, plan: dict, resume: bool) -> dict:
    """RunSpec's warm start: on a first segment only (a resume restores the search's own state)."""
    warm = plan.get("warm_start")
    if not warm or resume:
        return {}
    if plan["strategy"] != "bohb":
        return {"warm_points": warm["configs"]}
    return {"warm_rows": growth.all_rows(growth.earlier_runs(warm["dirs"], space))}


def _time_used(results_dir: Path, plan: dict, used: float) -> None:
    plan["time_used_s"] = used
    results.write_json(results_dir / "run.json", plan)


def _best(trials, records: list[dict], space: spaces.Space, source, plan: dict, results_dir: Path, *,
          tested: bool) -> dict | None:
    """The best trial, measured on the test set when the run finished on CIFAR data; written to
    best_config.json."""
    best = results.best_trial(trials, space.metric, space.mode)
    if best is None:
        return None
    if source is not None and tested:
        best.update(_test_best(best, records, space, source, plan["smoke"].get("max_test")))
    results.write_json(results_dir / "best_config.json", {
        "trial_id": best["trial_id"], "config": {p: best[p] for p in space.params}, "fixed": dict(space.fixed),
        **{k: best.get(k) for k in ("loss", "accuracy", "epochs", "test_loss", "test_accuracy")}})
    return best


def _record_end(plan: dict, trials, best: dict | None, status: str, started: float) -> None:
    """What the segment came to, added to the plan (run.json)."""
    plan.update(status=status,
                wall_time_s=round(plan.get("wall_time_s", 0) + time.time() - started, 1), trials=len(trials),
                cpu_hours=float(trials["cpu_hours"].sum()) if len(trials) else 0.0,
                gpu_hours=float(trials["gpu_hours"].sum()) if len(trials) else 0.0,
                stopped_early=_count(trials, "stopped_early"), failed=_count(trials, "status", "ERROR"),
                diverged=_count(trials, "diverged"), memory_growing=_count(trials, "memory_growing"),
                resumed_trials=len(trials) - _count(trials, "resumed_at", ""),
                recomputed_epochs=int(trials["recomputed_epochs"].sum()) if len(trials) else 0, best=best)


def _count(trials, column: str, value=True) -> int:
    return int((trials[column] == value).sum()) if column in trials else 0


def _test_best(best: dict, records: list[dict], space: spaces.Space, source: data.DataSource,
               max_test: int | None) -> dict:
    """Test-set accuracy of the best trial's final model: measured once, for the best config only."""
    from tuning import trainer

    ckpt = next((r["checkpoint"] for r in records if r["trial_id"] == best["trial_id"]), None)
    if ckpt is None:
        return {}
    if "://" in ckpt:  # shared storage on a cluster: bring the checkpoint here first
        import pyarrow.fs

        with tempfile.TemporaryDirectory() as d:
            pyarrow.fs.copy_files(ckpt, d)
            state = trainer.read_checkpoint(d)
    else:
        state = trainer.read_checkpoint(ckpt)
    test = data.load_test(source, max_test)
    m = trainer.evaluate_test(state, test, width=space.fixed.get("width", 16))
    return {"test_loss": m["loss"], "test_accuracy": m["accuracy"], "test_images": len(test)}
