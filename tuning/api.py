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
import time
from pathlib import Path
from typing import Callable, Union

from tuning import cli, contract, growth, objectives as objective_rules, record as records, spacejson, spaces
from tuning import tracking_store
from tuning.cli import UsageError

log = logging.getLogger(__name__)
# Lines for whoever watches the search (the grid's size, where the live report is): tuning.run
# prints them on stdout, beside Tune's progress table.
say = logging.getLogger("tuning.progress")

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


def search(trainer: Union[Callable, str, None] = None, space: Union[spaces.Space, str, None] = None, *,
           strategy: str | None = None, num_samples: int | None = None, max_epochs: int | None = None,
           seed: int | None = None, cpus_per_trial: float | None = None, gpus_per_trial: float | None = None,
           workers_per_trial: int | None = None, precision: str | None = None, data: str | None = None,
           data_dir: str = "./data", results_dir: str | Path | None = None, address: str | None = None,
           storage_path: str | None = None, max_failures: int = DEFAULT_MAX_FAILURES, tune_logs: bool = False,
           worker_logs: bool = False, smoke: bool = False, time_budget: float | str | None = None,
           warm_start: list | None = None, warm_start_top: int | None = None,
           mlflow: str | bool | None = None, mlflow_experiment: str | None = None,
           objectives: dict | None = None, constraints: dict | None = None, argv: list | None = None):
    """Search `space` with `trainer` and return a SearchResult.

    trainer: your function (tuning.contract; docs/your-trainer.md), "module:function", "cifar",
    or None for the space's own. space: a Space, or the name of a module in search_spaces/ (or a
    .py file defining SPACE). The other keywords are tuning.run's flags (see --help); None keeps
    what the space declares. time_budget: seconds, or "90s", "30m", "2h". mlflow: a tracking URI,
    or True for a SQLite store in the results dir (docs/tracking.md); mlflow_experiment: its
    experiment (default: the space's name). objectives, constraints: the space's, replaced
    (docs/multi-objective.md): {"loss": "min", "latency_ms": "min"}, {"peak_mem_gb": ("<=", 4)}.
    argv: the command line to record in run.json (tuning.run passes its flags)."""
    if space is None:
        raise UsageError("search() needs a space: a Space(...) or the name of one (e.g. 'cifar_asha')")
    space = spaces.load(space) if isinstance(space, str) else space
    if not isinstance(space, spaces.Space):
        raise UsageError(f"space must be a Space or a space's name, got {type(space).__name__}")
    if trainer is not None:
        space = space.replace(trainer=trainer)
    space = _with_objectives(space, objectives, constraints)
    if warm_start_top is not None and not warm_start:
        raise UsageError("--warm-start-top needs --warm-start DIR...: it says how many of those runs' best "
                         "configurations run first")
    strategy = strategy or space.strategy
    if strategy not in spaces.STRATEGIES:
        raise UsageError(f"strategy {strategy!r} unknown: use one of {', '.join(spaces.STRATEGIES)}")
    refusal = objective_rules.strategy_refusal(space, strategy)
    if refusal:
        raise UsageError(refusal)
    small = smoke_sizes(strategy) if smoke else {}
    for flag, value, low in (("num_samples", num_samples, 1), ("max_epochs", max_epochs, 1),
                             ("workers_per_trial", workers_per_trial, 1), ("seed", seed, 0),
                             ("max_failures", max_failures, 0)):
        check_at_least(flag, value, low)
    if strategy == "grid":  # tune.run's num_samples repeats the grid
        num_samples = num_samples or small.get("grid_repeats") or space.grid_repeats
        spaces.check_grid(space, num_samples)
    else:
        num_samples = num_samples or small.get("num_samples") or space.num_samples
    spaces.check_mixed_grid(space, strategy, num_samples)
    seed = space.seed if seed is None else seed
    _check_trainer(space, workers_per_trial or space.workers_per_trial)
    _check_replay(space, max_epochs or small.get("max_epochs") or space.max_epochs)
    returns = _returns_metrics(space, strategy)
    rec = records.RunRecord(
        space=space.name, strategy=strategy, seed=seed, num_samples=num_samples,
        max_epochs=max_epochs or small.get("max_epochs") or space.max_epochs,
        trainer=spaces.trainer_name(space.trainer), argv=argv, max_failures=max_failures, smoke=small,
        storage_path=_storage(storage_path), tune_logs=tune_logs,
        precision=_precision(space, precision), time_budget_s=_budget(time_budget),
        warm_start=_warm_start(space, strategy, warm_start, warm_start_top), declaration=spacejson.to_json(space),
        data_args={"kind": data or ("synthetic" if smoke else "auto"), "data_dir": str(Path(data_dir).absolute()),
                   "seed": seed, "synthetic_train": small.get("synthetic_train", 50_000),
                   "synthetic_test": small.get("synthetic_test", 10_000)})
    if returns:  # one report per trial, its full budget; the trainer is still passed the declared epochs
        rec.trainer_epochs, rec.max_epochs = rec.max_epochs, 1
    label = Path(space.name or spaces.trainer_name(space.trainer).rpartition(":")[2]).stem
    folder = Path(results_dir or f"results/{label}-{time.strftime('%Y%m%d-%H%M%S')}").absolute()
    track = tracking_store.check(mlflow, mlflow_experiment, label, folder)  # before Ray and before any file
    created = _prepare_results_dir(folder)
    lock = _lock(folder)
    try:
        try:
            from tuning import session  # torch, through tuning.data: only for a run that goes ahead

            source, cluster, ray_was_running = session.start(space, rec, address=address, worker_logs=worker_logs)
            rec.resources_per_trial, rec.workers_per_trial = _resources(
                space, cluster, cpus_per_trial, gpus_per_trial, workers_per_trial)
            _check_workers_import(space, ray_was_running)
        except BaseException:
            lock.release()
            _remove_if_empty(folder, created)
            raise
        if strategy == "grid":
            points = " x ".join(f"{len(p.grid_values())} {k}" for k, p in space.params.items())
            say.info("Grid search: %s = %d points x %d repeat%s = %d trials", points, spaces.grid_size(space),
                     num_samples, "s" * (num_samples > 1), spaces.grid_size(space) * num_samples)
        return _execute(space, rec, source, folder, resume=False, keep_ray=ray_was_running, track=track)
    finally:
        lock.release()


def resume(results_dir: str | Path, *, add_samples: int | None = None, time_budget: float | str | None = None,
           address: str | None = None, worker_logs: bool = False, trainer: Union[Callable, str, None] = None,
           mlflow: str | bool | None = None, mlflow_experiment: str | None = None):
    """Continue the unfinished search in results_dir (after a crash, Ctrl-C or a spent time
    budget) with the settings it started with; add_samples: that many more trials, in a finished
    one too; time_budget: the new total. trainer: the function to run, where the recorded one
    cannot be imported by name (it was defined in a script or a notebook). mlflow,
    mlflow_experiment: as search()'s; by default a run tracked in MLflow goes on under the same
    parent run, and mlflow=False stops tracking it."""
    folder = Path(results_dir).absolute()
    rec = records.read(folder, "--resume")
    if rec.status == "finished" and not add_samples:
        raise UsageError(f"--resume {folder}: that experiment finished already; its results are there "
                         "(add --add-samples N to run N more trials in it)")
    track = _resume_tracking(rec, folder, mlflow, mlflow_experiment)
    lock = _lock(folder)
    try:
        space = _recorded_space(rec, trainer)
        more = _extension(space, rec, add_samples)
        if time_budget is not None:  # a new total; what earlier segments used still counts
            rec.time_budget_s = _budget(time_budget)
        from tuning import session

        source, _, ray_was_running = session.start(space, rec, address=address, worker_logs=worker_logs)
        _check_workers_import(space, ray_was_running)
        what = f"Adding {more} trials to" if more else "Resuming"
        say.info("%s %s (%s) in %s", what, rec.space or "search", rec.strategy, folder)
        return _execute(space, rec, source, folder, resume=True, add_samples=more, keep_ray=ray_was_running,
                        track=track)
    finally:
        lock.release()


def _execute(space, rec, source, folder: Path, *, resume: bool, add_samples: int = 0, keep_ray: bool,
             track: tracking_store.Target | None = None):
    from tuning import session
    from tuning.report import runreport

    if source is not None:
        log.warning(session.data_banner({"kind": source.kind, "root": source.root}))
    page = folder / "report.html"
    return session.execute(
        space, rec, source, folder, resume=resume, add_samples=add_samples, keep_ray=keep_ray, track=track,
        on_start=lambda: say.info("Live report: %s (rewritten every %d s while the run goes)", page,
                                  runreport.RELOAD_S))


def _resume_tracking(rec: records.RunRecord, folder: Path, mlflow, experiment: str | None):
    """Where a resume logs: a URI given now (checked as at a start), else where the run logged
    before. A recorded server that is down now does not stop the resume: the search goes on and
    the summary says what could not be logged."""
    label = Path(rec.space or spaces.trainer_name(rec.trainer).rpartition(":")[2]).stem
    mine = rec.mlflow or {}
    if mlflow is not None or not mine:
        return tracking_store.check(mlflow, experiment, label, folder)
    uri = True if mine.get("default") else mine["uri"]
    return tracking_store.check(uri, experiment or mine.get("experiment"), label, folder, strict=False)


# ---------------------------------------------------------------- checks

def _with_objectives(space: spaces.Space, objectives: dict | None, constraints: dict | None) -> spaces.Space:
    """The space with the objectives and constraints given (--objective, --constraint) in place of its
    own; the first objective becomes its metric. Checked as a Space checks them."""
    if objectives is None and constraints is None:
        return space
    changes = {"constraints": constraints} if constraints is not None else {}
    if objectives is not None:
        if not isinstance(objectives, dict) or not objectives:
            raise UsageError(f"objectives= takes a dict of metric names and directions, e.g. "
                             f"{{'loss': 'min', 'latency_ms': 'min'}}, got {objectives!r}")
        first, way = next(iter(objectives.items()))
        changes.update(objectives=objectives, metric=first, mode=way if way in ("min", "max") else "min")
    return space.replace(**changes)


def check_at_least(name: str, value, minimum=1) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum):
        flag = "--" + name.replace("_", "-")
        raise UsageError(f"{flag} must be at least {minimum}, got {value}")


def _storage(value: str | None) -> str | None:
    import argparse

    try:
        return cli.storage_path(str(value)) if value else None
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--storage-path {exc}") from None


def _budget(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        return growth.parse_duration(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise UsageError(f"--time-budget {value!r}: give a positive number of seconds or a duration such as 30m")
    return float(value)


def _check_trainer(space: spaces.Space, workers: int) -> None:
    """A trainer of the user's, checked where the driver can: it imports, and it takes what tuning
    passes (tuning.contract)."""
    if not contract.is_user_trainer(space.trainer):
        return
    fn = contract.resolve(space.trainer)
    name = spaces.trainer_name(space.trainer)
    contract.check_signature(fn, name, list(space.params), list(space.fixed), ranks=workers,
                             conditional={k: p.when for k, p in space.params.items() if p.when})
    if workers > 1 and contract.module_of(fn) is None:
        raise contract.ContractError(f"trainer {name}: --workers-per-trial {workers} spawns DDP ranks, which import "
                                     "the trainer by name: define it in an importable module and pass "
                                     "'module:function'")


def _returns_metrics(space: spaces.Space, strategy: str) -> bool:
    """Whether the trainer returns its metrics instead of calling on_epoch, as its source reads
    (tuning.contract.reporting): each trial is then one report. A strategy that judges trials by
    their epochs refuses it here, before anything starts; one the source does not tell is caught
    at its first trial."""
    if not contract.is_user_trainer(space.trainer):
        return False
    fn = contract.resolve(space.trainer)
    if contract.reporting(fn) != "returns":
        return False
    refusal = contract.one_report_refusal(strategy, 1, spaces.trainer_name(space.trainer))
    if refusal:
        raise contract.ContractError(refusal)
    log.info("trainer %s returns its metrics instead of calling on_epoch: each trial is one report",
             spaces.trainer_name(space.trainer))
    return True


def _check_replay(space: spaces.Space, max_epochs: int) -> None:
    """A replay of a recorded run (tuning/replay.py) asks only for what was recorded."""
    from tuning import replay

    if replay.is_replay(space.trainer):
        replay.check(replay.read(replay.folder_of(space.trainer)), space, max_epochs)


def _check_workers_import(space: spaces.Space, ray_was_running: bool) -> None:
    """Ray's workers can import the trainer's module (they get the driver's sys.path as it was when
    Ray started, and a cluster's other nodes only what is installed there)."""
    from tuning import backend

    module = contract.module_of(space.trainer) if contract.is_user_trainer(space.trainer) else None
    if module is None:
        return
    error = backend.worker_import_error(module)
    if error:
        if not ray_was_running:
            backend.stop_ray()
        raise contract.ContractError(
            f"trainer {spaces.trainer_name(space.trainer)} imports here but not in Ray's worker processes "
            f"({error}): put its folder on PYTHONPATH before Ray starts (or install it on every node), "
            "or pass the function itself")


def _lock(path: Path):
    """Hold the results dir for this process: a second run on it refuses instead of mixing files.
    The OS drops the lock when the process dies, even by SIGKILL, so --resume can take it."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise UsageError(f"results dir {path} is in use by another tuning.run: wait for it to finish "
                         "or choose another --results-dir") from None
    return lock


def _prepare_results_dir(path: Path) -> bool:
    """Make sure results can be written there without touching anything already present.
    Returns whether the folder was created now (so a later refusal can remove it)."""
    created = not path.exists()
    if path.is_dir() and (path / ".lock").exists():
        _lock(path).release()  # refuses if another run holds it
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"results dir {path} already exists and is not empty: choose a new --results-dir "
                         "so no earlier result is overwritten (or --resume it if it is unfinished)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write to results dir {path} ({exc.strerror or exc}): "
                         "choose a writable --results-dir") from None
    return created


def _remove_if_empty(path: Path, created: bool) -> None:
    if created and path.exists() and not any(p.name != ".lock" for p in path.iterdir()):
        (path / ".lock").unlink(missing_ok=True)
        path.rmdir()


def _resources(space: spaces.Space, cluster: dict, cpus, gpus, workers) -> tuple[dict, int]:
    """({"cpu", "gpu"} per trial, DDP workers per trial), checked against what Ray sees: a trial
    runs on one node, so against the largest node's CPUs and GPUs."""
    workers = workers if workers is not None else space.workers_per_trial
    check_at_least("workers_per_trial", workers)
    cpus = cpus if cpus is not None else space.cpus_per_trial * workers
    gpus = gpus if gpus is not None else space.gpus_per_trial
    alive = [n for n in cluster["nodes"] if n["alive"]]
    have_cpus, have_gpus = max(n["cpus"] for n in alive), max(n["gpus"] for n in alive)
    if gpus == "auto":
        gpus = 1 if have_gpus >= 1 and workers == 1 else 0
    if cpus <= 0:
        raise UsageError(f"--cpus-per-trial must be positive, got {cpus}")
    if gpus < 0:
        raise UsageError(f"--gpus-per-trial must not be negative, got {gpus}")
    if gpus > 1 and gpus != int(gpus):
        raise UsageError(f"--gpus-per-trial {gpus:g}: above 1 a trial runs one DDP rank per GPU, "
                         "so give a whole number (or at most 1 to share a GPU)")
    if workers > 1 and gpus > 0:
        raise UsageError(f"--workers-per-trial {workers} is for CPU trials; a GPU trial runs one rank "
                         "per GPU: use --gpus-per-trial N instead, or --gpus-per-trial 0")
    if cpus > have_cpus:
        raise UsageError(f"--cpus-per-trial {cpus:g} is more than the {have_cpus:g} CPUs of the largest Ray "
                         "node: lower it so a trial can start")
    if gpus > have_gpus:
        raise UsageError(f"--gpus-per-trial {gpus:g} is more than the {have_gpus:g} GPUs of the largest Ray node: "
                         f"use --gpus-per-trial {have_gpus:g} or run where GPUs are available")
    ranks = int(gpus) if gpus > 1 else workers
    batch = space.params.get("batch_size")
    if ranks > 1 and isinstance(batch, spaces.Choice) and any(int(b) % ranks for b in batch.values):
        raise UsageError(f"batch_size choices {list(batch.values)} do not all split evenly over {ranks} "
                         "ranks (batch_size is the global batch): use a rank count that divides them")
    return {"cpu": cpus, "gpu": gpus}, workers


def _precision(space: spaces.Space, flag: str | None) -> str | None:
    """The CIFAR trainer's precision: the flag, else the space's fixed setting, else auto; None
    for other trainers, which take no such argument."""
    if space.trainer != "cifar" or "precision" in space.params:
        if flag:
            why = "searches precision" if space.trainer == "cifar" else f"trains {spaces.trainer_name(space.trainer)}"
            raise UsageError(f"--precision is for the cifar trainer's fixed setting; {space.name or 'the space'} "
                             f"{why}: drop it")
        return None
    value = flag or space.fixed.get("precision", "auto")
    if value not in contract.PRECISIONS:
        raise spaces.SpaceError(f"{space.name}: fixed precision {value!r} unknown: use one of "
                                f"{', '.join(contract.PRECISIONS)}")
    return value


def _recorded_space(rec: records.RunRecord, trainer) -> spaces.Space:
    """The space a run searched: as its record declares it (the space file may have changed since),
    with its trainer. A function defined in a script travels by value and has no importable name:
    the space file gives it back, or `trainer`."""
    by_name = not contract.is_user_trainer(rec.trainer) or contract.importable(rec.trainer)
    if trainer is None and not by_name:
        try:
            trainer = spaces.load(rec.space).trainer
        except spaces.SpaceError:
            raise UsageError(f"this run's trainer {rec.trainer} was defined in a script, so it cannot be imported by "
                             "name: resume it from Python, tuning.resume(DIR, trainer=your_function)") from None
    if not rec.declaration:  # a run recorded before run.json held the whole space
        space = spaces.load(rec.space)
        return space.replace(trainer=trainer) if trainer is not None else space
    return spacejson.from_json(rec.declaration, trainer=trainer)


def _extension(space: spaces.Space, rec: records.RunRecord, add_samples: int | None) -> int:
    """Checks --add-samples and records it; the number of new trials (0: a plain resume)."""
    if add_samples is None:
        return 0
    check_at_least("add_samples", add_samples)
    if rec.strategy == "grid":  # the grid walks on and never hands out a point twice
        left = spaces.grid_size(space) - rec.trials
        if add_samples > left:
            raise UsageError(f"--add-samples {add_samples}: the grid has {max(left, 0)} points not yet run "
                             "(grid search never repeats one); add at most that many, or tune on at random "
                             "with a new run (--strategy random)")
    growth.record_extension(rec, add_samples)
    return add_samples


def _warm_start(space: spaces.Space, strategy: str, dirs: list | None, top: int | None) -> dict | None:
    """What a warm start brings: earlier results (BOHB) or best configurations (the others)."""
    if not dirs:
        return None
    if strategy == "grid":
        raise UsageError("--warm-start: grid search walks its fixed points and has nothing to learn from earlier "
                         "runs; use random, asha, hyperband or bohb")
    if space.grid:  # Tune would count each earlier configuration as one of a grid pass's samples
        raise UsageError(f"--warm-start with grid={list(space.grid)}: every grid point runs num_samples fresh "
                         "trials, which earlier configurations would replace unevenly; drop one of the two")
    top = 3 if top is None else top
    check_at_least("warm_start_top", top)
    runs = growth.earlier_runs([str(d) for d in dirs], space)
    return {"dirs": [str(Path(d).absolute()) for d in dirs], "top": top, "results": len(growth.all_rows(runs)),
            "configs": [] if strategy in ("bohb", "adaptive") else growth.best_configs(runs, space, top)}
