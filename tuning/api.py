"""The Python API: ``tuning.search()`` runs a search, ``tuning.resume()`` continues or extends one;
both return a ``SearchResult`` (tuning.session). ``python -m tuning.run`` parses its flags into
the same keywords and calls the same functions.

    import tuning
    result = tuning.search(train, "cifar_asha", num_samples=8, max_epochs=4)
    result.trials, result.epochs, result.best.config, result.report

Bad input raises ``tuning.TuningError`` with one line saying what to change, before anything
starts and without touching earlier results; the commands exit 2 with that line.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Callable, Union

from tuning import cli, inputs, objectives as objective_rules, points, record as records, spacejson, spaces
from tuning import tracking_store
from tuning.cli import UsageError

log = logging.getLogger(__name__)
# Lines for whoever watches the search (the grid's size, where the live report is): tuning.run
# prints them on stdout, beside Tune's progress table.
say = logging.getLogger("tuning.progress")
# Why a finished search has no best trial: a script reading result.best.config would otherwise
# fail on None without a word of why. tuning.run prints its summary instead, and turns it off.
outcome = logging.getLogger("tuning.outcome")

# smoke=True: CI-sized. 8 samples make it near-certain that ASHA stops one at its first rung.
SMOKE = {"num_samples": 8, "max_epochs": 2, "grid_repeats": 1, "synthetic_train": 5000,
         "synthetic_test": 1000, "max_train": 2000, "max_val": 500, "max_test": 1000}
# Hyperband (and BOHB) needs max_t >= eta for a rung (1 and 3 epochs at eta 3): a band is then a
# bracket of 3 trials paused at epoch 1, the best resumed to 3, and one of 2 trials at 3 epochs;
# 9 samples run that band and most of a second.
SMOKE_HYPERBAND = {**SMOKE, "num_samples": 9, "max_epochs": 3}
DEFAULT_MAX_FAILURES = 2


def smoke_sizes(strategy: str) -> dict:
    return SMOKE_HYPERBAND if strategy in ("bohb", "adaptive", "hyperband", "tpe") else SMOKE


@cli.in_keywords
def search(trainer: Union[Callable, str, None] = None, space: Union[spaces.Space, str, None] = None, *,
           strategy: str | None = None, num_samples: int | None = None, max_epochs: int | None = None,
           seed: int | None = None, cpus_per_trial: float | None = None, gpus_per_trial: float | None = None,
           workers_per_trial: int | None = None, precision: str | None = None, data: str | None = None,
           data_dir: str = "./data", results_dir: str | Path | None = None, address: str | None = None,
           storage_path: str | None = None, max_failures: int = DEFAULT_MAX_FAILURES,
           max_concurrent_trials: int | None = None, tune_logs: bool = False,
           worker_logs: bool = False, smoke: bool = False, time_budget: float | str | None = None,
           warm_start: list | None = None, warm_start_top: int | None = None, points_to_evaluate: list | None = None,
           mlflow: str | bool | None = None, mlflow_experiment: str | None = None,
           objectives: dict | None = None, constraints: dict | None = None, argv: list | None = None):
    """Search `space` with `trainer` and return a SearchResult.

    trainer: your function (tuning.contract; docs/your-trainer.md), "module:function", "cifar",
    or None for the space's own. space: a Space, or the name of a module in search_spaces/ (or a
    .py file defining SPACE). The other keywords are tuning.run's flags (see --help); None keeps
    what the space declares. time_budget: seconds, or "90s", "30m", "2h". mlflow: a tracking URI,
    or True for a SQLite store in the results dir (docs/tracking.md); mlflow_experiment: its
    experiment (default: the space's name). points_to_evaluate: configurations to run first, each a
    dict of parameter values (tuning/points.py). objectives, constraints: the space's, replaced
    (docs/multi-objective.md): {"loss": "min", "latency_ms": "min"}, {"peak_mem_gb": ("<=", 4)}.
    argv: the command line to record in run.json (tuning.run passes its flags)."""
    if isinstance(trainer, spaces.Space):  # search(space), or search(space, train): the trainer comes first
        raise UsageError("search()'s first argument is the trainer and its second the space: search(train, space), "
                         "or search(space=space) for the space's own trainer")
    if space is None:
        raise UsageError("search() needs a space: a Space(...) or the name of one (e.g. 'cifar_asha')")
    space = spaces.load(space) if isinstance(space, str) else space
    if not isinstance(space, spaces.Space):
        raise UsageError(f"space must be a Space or a space's name, got {type(space).__name__}")
    if trainer is not None:
        space = space.replace(trainer=trainer)
    space = inputs.with_objectives(space, objectives, constraints)
    if warm_start_top is not None and not warm_start:
        raise UsageError("--warm-start-top needs --warm-start DIR...: it says how many of those runs' best "
                         "configurations run first")
    strategy, why = strategy or space.strategy, None
    if strategy == spaces.AUTO:
        strategy, why = inputs.auto_strategy(space, max_epochs or space.max_epochs)
    if strategy not in spaces.STRATEGIES:
        raise UsageError(f"strategy {strategy!r} unknown: use one of {', '.join(spaces.STRATEGIES)}")
    refusal = objective_rules.strategy_refusal(space, strategy)
    if refusal:
        raise UsageError(refusal)
    if data is not None and space.trainer != "cifar":  # else ignored without a word, as --precision is not
        raise UsageError(f"--data is for the cifar trainer's images; {space.name or 'the space'} trains "
                         f"{spaces.trainer_name(space.trainer)}: drop it")
    for flag, value in (("results_dir", results_dir), ("data_dir", data_dir)):
        cli.check_folder_named(flag, value)
    small = smoke_sizes(strategy) if smoke else {}
    for flag, value, low in (("num_samples", num_samples, 1), ("max_epochs", max_epochs, 1),
                             ("workers_per_trial", workers_per_trial, 1), ("seed", seed, 0),
                             ("max_failures", max_failures, 0), ("max_concurrent_trials", max_concurrent_trials, 1)):
        inputs.check_at_least(flag, value, low)
    if strategy == "grid":  # tune.run's num_samples repeats the grid
        num_samples = num_samples or small.get("grid_repeats") or space.grid_repeats
        spaces.check_grid(space, num_samples)
        for line in spaces.never_on_the_grid(space):
            log.warning(line)
    else:
        num_samples = num_samples or small.get("num_samples") or space.num_samples
    spaces.check_mixed_grid(space, strategy, num_samples)
    seed = space.seed if seed is None else seed
    inputs.check_trainer(space, workers_per_trial or space.workers_per_trial)
    inputs.check_replay(space, max_epochs or small.get("max_epochs") or space.max_epochs)
    returns = inputs.returns_metrics(space, strategy)
    rec = records.RunRecord(
        space=space.name, strategy=strategy, seed=seed, num_samples=num_samples,
        max_epochs=max_epochs or small.get("max_epochs") or space.max_epochs,
        trainer=spaces.trainer_name(space.trainer), argv=argv, max_failures=max_failures, smoke=small,
        max_concurrent_trials=max_concurrent_trials,
        storage_path=inputs.storage(storage_path), tune_logs=tune_logs,
        precision=inputs.precision(space, precision), time_budget_s=inputs.budget(time_budget),
        warm_start=inputs.warm_start(space, strategy, warm_start, warm_start_top, seed),
        points_to_evaluate=points.check(space, strategy, points_to_evaluate, num_samples) or None,
        declaration=spacejson.to_json(space),
        data_args={"kind": data or ("synthetic" if smoke else "auto"), "data_dir": str(Path(data_dir).expanduser().absolute()),
                   "seed": seed, "synthetic_train": small.get("synthetic_train", 50_000),
                   "synthetic_test": small.get("synthetic_test", 10_000)})
    if rec.warm_start and rec.warm_start.get("configs"):  # run.json lists those that run: within num_samples
        mine = rec.points_to_evaluate or []
        rec.warm_start["configs"] = [c for c in rec.warm_start["configs"] if c not in mine][
            :max(rec.num_samples - len(mine), 0)]
    if strategy in ("asha", "median") and space.grace_period >= rec.max_epochs > 1 and not smoke:  # smoke: rung 1
        log.warning("grace_period %d is not below max_epochs %d: %s stops no trial early and runs as random search; "
                    "lower the space's grace_period", space.grace_period, rec.max_epochs, strategy)
    if returns:  # one report per trial, its full budget; the trainer is still passed the declared epochs
        rec.trainer_epochs, rec.max_epochs = rec.max_epochs, 1
    label = _label(space.name, space.trainer)
    # Absolute with ".." folded (not through symlinks): a refusal removes the folders made, walking up from it.
    # ~ as a shell would expand it: quoted, or in --results-dir=~/x, it reached us as a folder named ~.
    folder = Path(os.path.abspath(os.path.expanduser(results_dir or
                                                     f"results/{label}-{time.strftime('%Y%m%d-%H%M%S')}")))
    made = inputs.prepare_results_dir(folder)  # before --mlflow may make its store: refused, none is made
    if rec.storage_path:  # two runs whose results dirs share a name (or one made again) once shared one
        rec.storage_name = f"{folder.name}-{secrets.token_hex(4)}"
    lock = inputs.lock(folder)
    ray_was_running = True  # until session.start says whether it started Ray
    try:
        try:
            track = tracking_store.check(mlflow, mlflow_experiment, label, folder)  # before Ray starts
            from tuning import session  # torch, through tuning.trial.data: only for a run that goes ahead

            source, cluster, ray_was_running = session.start(space, rec, address=address, worker_logs=worker_logs)
            rec.resources_per_trial, rec.workers_per_trial = inputs.resources(
                space, cluster, cpus_per_trial, gpus_per_trial, workers_per_trial)
            inputs.check_workers_import(space, ray_was_running)
        except BaseException:  # a refusal leaves no results dir behind, nor a Ray it started
            _stop_ray_unless(ray_was_running)
            inputs.remove_if_empty(folder, made)
            lock.release()
            raise
        if why:  # said once every check has passed: a refusal is its one line alone
            log.info("strategy %s (the space names none: %s; docs/strategies.md)", strategy, why)
        if strategy == "grid":
            sizes = [len(p.grid_values()) for p in space.params.values()]
            axes = " x ".join(f"{n} {k}" for n, k in zip(sizes, space.params))
            valid = spaces.grid_size(space)
            if valid != math.prod(sizes):  # conditions: the valid combinations only
                axes += f" ({math.prod(sizes)} combinations, {valid} valid under the conditions)"
            say.info("Grid search: %s = %d points x %d repeat%s = %d trials", axes, valid,
                     num_samples, "s" * (num_samples > 1), valid * num_samples)
        return _execute(space, rec, source, folder, resume=False, keep_ray=ray_was_running, track=track)
    finally:
        lock.release()


@cli.in_keywords(like=search)
def resume(results_dir: str | Path, *, add_samples: int | None = None, time_budget: float | str | None = None,
           address: str | None = None, worker_logs: bool = False, trainer: Union[Callable, str, None] = None,
           mlflow: str | bool | None = None, mlflow_experiment: str | None = None,
           max_concurrent_trials: int | None = None):
    """Continue the unfinished search in results_dir (after a crash, Ctrl-C or a spent time
    budget) with the settings it started with; add_samples: that many more trials, in a finished
    one too; time_budget: the new total. trainer: the function to run, where the recorded one
    cannot be imported by name (it was defined in a script or a notebook). mlflow,
    mlflow_experiment: as search()'s; by default a run tracked in MLflow goes on under the same
    parent run, and mlflow=False stops tracking it. max_concurrent_trials: a new limit on trials at
    once (None: the run's own)."""
    inputs.check_at_least("add_samples", add_samples)
    inputs.check_at_least("max_concurrent_trials", max_concurrent_trials)
    cli.check_folder_named("resume", results_dir)
    budget = inputs.budget(time_budget)  # refused before the run's own refusals (finished already)
    folder = Path(results_dir).expanduser().absolute()
    rec = records.read(folder, "--resume")
    if budget is not None and budget <= rec.time_used_s:  # it started Ray, ran 0.6 s and said "13 s against 5 s"
        raise UsageError(f"--time-budget {budget:g}s: the run has used {rec.time_used_s:.0f} s of "
                         "running time already, and the budget is the total across resumes: give more than that")
    if rec.status == "finished" and not add_samples:
        raise UsageError(f"--resume {folder}: that experiment finished already; its results are there "
                         f"({cli.in_words('add --add-samples N', 'give add_samples=N')} to run N more trials in it)")
    inputs.check_tune_state(rec, folder)
    track = _resume_tracking(rec, folder, mlflow, mlflow_experiment)
    lock = inputs.lock(folder)
    try:
        space = inputs.recorded_space(rec, trainer)
        if trainer is not None:  # a function given now: checked as search() checks one, before anything is written
            inputs.check_trainer(space, rec.workers_per_trial)
            once = rec.trainer_epochs is not None  # the run's trials returned their metrics once
            if inputs.returns_metrics(space, rec.strategy) != once:
                ways = ("returns its metrics once", "reports each epoch")
                raise UsageError(f"trainer {spaces.trainer_name(trainer)} {ways[once]}, where this run's trials "
                                 f"{ways[not once].replace('returns its', 'returned their').replace('reports', 'reported')}"
                                 ": give it the trainer the run started with")
        more = inputs.extension(space, rec, add_samples)
        if budget is not None:  # a new total; what earlier segments used still counts
            rec.time_budget_s = budget
        if max_concurrent_trials is not None:
            rec.max_concurrent_trials = max_concurrent_trials
        from tuning import session

        source, _, ray_was_running = session.start(space, rec, address=address, worker_logs=worker_logs)
        try:
            inputs.check_workers_import(space, ray_was_running)
        except BaseException:
            _stop_ray_unless(ray_was_running)
            raise
        what = f"Adding {more} trials to" if more else "Resuming"
        say.info("%s %s (%s) in %s", what, rec.space or "search", rec.strategy, folder)
        return _execute(space, rec, source, folder, resume=True, add_samples=more, keep_ray=ray_was_running,
                        track=track)
    finally:
        lock.release()


def _label(name: str, trainer) -> str:
    """What names the results folder and the MLflow experiment: the space's name; else, for a trainer
    defined in the script being run (python examples/digits_torch.py), the script's, as tuning.run
    --space examples/digits_torch.py names it; else the trainer's (a notebook's function: `train`)."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or ""
    if not name and getattr(trainer, "__module__", None) == "__main__" and not script.startswith("<"):  # <stdin>
        return Path(script).stem
    return Path(name or spaces.trainer_name(trainer).rpartition(":")[2]).stem


def _stop_ray_unless(ray_was_running: bool) -> None:
    """After a refusal, the Ray this call started stops: a later search(address=...) in the process
    would have joined that local one instead of the cluster it names."""
    if not ray_was_running:
        from tuning import backend

        backend.stop_ray()


def _execute(space, rec, source, folder: Path, *, resume: bool, add_samples: int = 0, keep_ray: bool,
             track: tracking_store.Target | None = None):
    from tuning import session
    from tuning.report import runreport
    from tuning.searchresult import data_banner

    if source is not None:
        log.warning(data_banner(records.DataOrigin(kind=source.kind, root=source.root)))
    page = folder / "report.html"
    result = session.execute(
        space, rec, source, folder, resume=resume, add_samples=add_samples, keep_ray=keep_ray, track=track,
        on_start=lambda: say.info("Live report: %s (rewritten every %d s while the run goes)", page,
                                  runreport.RELOAD_S))
    why = result.without_best()
    if why:
        outcome.warning("%s. result.best is None; every trial is in result.trials.", why.rstrip("."))
    return result


def _resume_tracking(rec: records.RunRecord, folder: Path, mlflow, experiment: str | None):
    """Where a resume logs: a URI given now (checked as at a start), else where the run logged
    before. A recorded server that is down now does not stop the resume: the search goes on and
    the summary says what could not be logged."""
    label = _label(rec.space, rec.trainer)
    mine = rec.mlflow
    if mlflow is not None or mine is None:
        return tracking_store.check(mlflow, experiment, label, folder)
    uri = True if mine.default else mine.uri
    return tracking_store.check(uri, experiment or mine.experiment, label, folder, strict=False)
