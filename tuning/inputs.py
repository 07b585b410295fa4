"""Every input of tuning.search and tuning.resume checked before anything starts (tuning.api calls
these in order): flags and their values, the trainer against its contract, the results folder and
its lock, the resources a trial asks for, and what a resume or a warm start reads back. Bad input
raises UsageError (or SpaceError, ContractError) with one line saying what to change.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from tuning import cli, contract, growth, record as records, results, spacejson, spaces
from tuning.cli import UsageError
from tuning.objectives import of as objectives_of

log = logging.getLogger(__name__)


def with_objectives(space: spaces.Space, objectives: dict | None, constraints: dict | None) -> spaces.Space:
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
        if space.reference_point is not None and dict(objectives) != dict(space.objectives or {}):
            # declared for the space's own objectives: for others (or other directions) it measures nothing
            log.info("the space's reference point %s is for its own objectives: the report derives one from "
                     "the results instead", space.reference_point)
            changes["reference_point"] = None
    return space.replace(**changes)


def check_at_least(name: str, value, minimum=1) -> None:
    """A count given as a keyword or a flag (None: the space's own): a whole number, as the CLI's
    flags take it; 2.5 trials or "4" is a mistake to name, not to round."""
    if value is None:
        return
    flag = "--" + name.replace("_", "-")
    if not spaces.whole(value):
        raise UsageError(f"{flag} must be a whole number, got {value!r}")
    if value < minimum:
        raise UsageError(f"{flag} must be at least {minimum}, got {value}")


def storage(value: str | None) -> str | None:
    import argparse

    try:
        return cli.storage_path(str(value)) if value else None
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--storage-path {exc}") from None


def budget(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        return growth.parse_duration(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise UsageError(f"--time-budget {value!r}: give a positive number of seconds or a duration such as 30m")
    return float(value)


def check_trainer(space: spaces.Space, workers: int) -> None:
    """A trainer of the user's, checked where the driver can: it imports, and it takes what tuning
    passes (tuning.contract); the built-in CIFAR trainer, which a space that names none runs, takes
    every parameter the space searches or fixes."""
    if space.trainer == "cifar":
        spaces.check_reported(space)  # a Space declared without trainer= may be meant for another
        unknown = [k for k in (*space.params, *space.fixed) if k not in spaces.CIFAR_PARAMS]
        if unknown:
            raise contract.ContractError(
                f"{', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} not a parameter of the "
                "built-in CIFAR trainer, which a space that names no trainer runs: give the space "
                "trainer=your_function (or 'module:function'), or search the CIFAR trainer's own "
                f"({', '.join(sorted(spaces.CIFAR_PARAMS))})")
    if not contract.is_user_trainer(space.trainer):
        if workers > 1 and space.trainer != "cifar":  # ran as one process on all the ranks' CPUs, without a word
            raise contract.ContractError(f"--workers-per-trial {workers}: {spaces.trainer_name(space.trainer)} "
                                         "trains as one process (a benchmark, or a replay): drop it")
        return
    fn = contract.resolve(space.trainer)
    name = spaces.trainer_name(space.trainer)
    if workers > 1 and contract.module_of(fn) is None:  # first: its signature cannot mend this
        raise contract.ContractError(f"trainer {name}: --workers-per-trial {workers} spawns DDP ranks, which import "
                                     "the trainer by name: define it in an importable module and pass "
                                     "'module:function'")
    contract.check_signature(fn, name, list(space.params), list(space.fixed), ranks=workers,
                             conditional={k: p.when for k, p in space.params.items() if p.when})


def auto_strategy(space: spaces.Space, max_epochs: int) -> tuple[str, str]:
    """(strategy, why) for a space that names none, from the comparisons (docs/comparisons.md):
    adaptive where the trainer reports every epoch (best mean rank on LCBench's real curves, within
    the counting-ones goal); tpe where each trial is one report (a trainer that returns its metrics,
    or one epoch), as adaptive's brackets would have nothing to judge; asha where the space walks a
    grid over some parameters, which only random, asha and median run; bohb where a trainer that
    reports every epoch is searched for several objectives (on LCBench's six tasks with two
    objectives ahead of adaptive on five and never significantly behind any row; level with
    adaptive on ZDT and the tables)."""
    if space.grid:
        return "asha", f"grid={list(space.grid)} runs under random, asha or median"
    if max_epochs == 1:
        return "tpe", "one epoch: each trial is one report"
    if contract.is_user_trainer(space.trainer) and contract.reporting(contract.resolve(space.trainer)) == "returns":
        return "tpe", "the trainer returns its metrics: each trial is one report"
    if len(objectives_of(space)) > 1:
        return "bohb", "several objectives, and the trainer reports every epoch"
    return "adaptive", "the trainer reports every epoch"


def returns_metrics(space: spaces.Space, strategy: str) -> bool:
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


def check_replay(space: spaces.Space, max_epochs: int) -> None:
    """A replay of a recorded run (tuning/compare/recorded.py) asks only for what was recorded."""
    from tuning.compare import recorded as replay

    if replay.is_replay(space.trainer):
        replay.check(replay.read(replay.folder_of(space.trainer)), space, max_epochs)


def check_workers_import(space: spaces.Space, ray_was_running: bool) -> None:
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


def lock(path: Path):
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


def held(path: Path) -> bool:
    """Whether a live tuning.run holds the results dir (lock); a folder no run ever held is not probed."""
    if not (path / ".lock").exists():
        return False
    try:
        lock(path).release()
    except UsageError:
        return True
    return False


def refuse_used_results_dir(path: Path) -> None:
    """Refuse a results dir that holds anything, or that another run holds, touching nothing."""
    if path.is_dir() and (path / ".lock").exists():
        lock(path).release()  # refuses if another run holds it
    if path.exists() and not path.is_dir():
        raise UsageError(f"results dir {path} is a file: choose a new --results-dir, a folder")
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"results dir {path} already exists and is not empty: choose a new --results-dir so no "
                         f"earlier result is overwritten (or {cli.in_words('--resume it', 'tuning.resume it')} if "
                         "it is unfinished)")


def prepare_results_dir(path: Path) -> Path | None:
    """Make sure results can be written there without touching anything already present.
    Returns the outermost folder this made (path or a parent of it; None if path existed), so a
    later refusal can remove what it made."""
    made = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
    refuse_used_results_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        remove_if_empty(path, made)
        raise UsageError(f"cannot write to results dir {path} ({exc.strerror or exc}): "
                         "choose a writable --results-dir") from None
    return made


def remove_if_empty(path: Path, made: Path | None) -> None:
    """Remove path and the parents up to `made` (prepare_results_dir's), each if nothing but our
    lock is in it. Called while the lock is held, so no second run can have taken the folder."""
    if made is None:
        return
    for folder in [path, *path.parents]:
        try:
            if any(p.name != ".lock" for p in folder.iterdir()):
                return
            (folder / ".lock").unlink(missing_ok=True)
            folder.rmdir()
        except OSError:  # gone already, or not ours to remove
            return
        if folder == made:
            return


def resources(space: spaces.Space, cluster: dict, cpus, gpus, workers) -> tuple[records.Resources, int]:
    """(CPUs and GPUs per trial, DDP workers per trial), checked against what Ray sees: a trial
    runs on one node, so against the largest node's CPUs and GPUs."""
    workers = workers if workers is not None else space.workers_per_trial
    check_at_least("workers_per_trial", workers)
    # Not given: the space's CPUs for each of the trial's DDP ranks, which a refusal says.
    derived = "" if cpus is not None else (f" (the space's cpus_per_trial {space.cpus_per_trial:g} for each of "
                                           f"{workers} ranks)" if workers > 1 else " (the space's cpus_per_trial)")
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
        raise UsageError(f"--cpus-per-trial {cpus:g}{derived} is more than the {have_cpus:g} CPUs of the largest Ray "
                         f"node: lower it so a trial can start{' (--cpus-per-trial N: the ranks share N)' if derived and workers > 1 else ''}")
    if gpus > have_gpus:
        raise UsageError(f"--gpus-per-trial {gpus:g} is more than the {have_gpus:g} GPUs of the largest Ray node: "
                         f"use --gpus-per-trial {have_gpus:g} or run where GPUs are available")
    ranks = int(gpus) if gpus > 1 else workers
    batch = space.params.get("batch_size")
    fixed = space.fixed.get("batch_size")
    if ranks > 1 and isinstance(batch, spaces.Choice) and any(int(b) % ranks for b in batch.values):
        raise UsageError(f"batch_size choices {list(batch.values)} do not all split evenly over {ranks} "
                         "ranks (batch_size is the global batch): use a rank count that divides them")
    if ranks > 1 and isinstance(batch, (spaces.IntUniform, spaces.IntLogUniform)):  # consecutive sizes: some odd
        raise UsageError(f"batch_size {type(batch).__name__}({batch.low}, {batch.high}) draws sizes that do not split "
                         f"evenly over {ranks} ranks (batch_size is the global batch): search a Choice of multiples "
                         f"of {ranks}, e.g. Choice({[b for b in (32, 64, 128, 256) if b % ranks == 0]})")
    if ranks > 1 and batch is None and spaces.whole(fixed) and int(fixed) % ranks:
        raise UsageError(f"the fixed batch_size {fixed} does not split evenly over {ranks} ranks (batch_size is "
                         "the global batch): use a rank count that divides it")
    return records.Resources(cpu=cpus, gpu=gpus), workers


def precision(space: spaces.Space, flag: str | None) -> str | None:
    """The CIFAR trainer's precision: the flag, else the space's fixed setting, else auto; None
    for other trainers, which take no such argument."""
    if space.trainer != "cifar" or "precision" in space.params:
        if flag:
            why = "searches precision" if space.trainer == "cifar" else f"trains {spaces.trainer_name(space.trainer)}"
            raise UsageError(f"--precision is for the cifar trainer's fixed setting; {space.name or 'the space'} "
                             f"{why}: drop it")
        searched = space.params.get("precision") if space.trainer == "cifar" else None
        unknown = [v for v in getattr(searched, "values", ()) if v not in contract.PRECISIONS]
        if unknown:  # each trial of it failed at run time
            raise spaces.SpaceError(f"{space.name or 'the space'}: precision searches {unknown[0]!r}, which the "
                                    f"cifar trainer does not know: use values of {', '.join(contract.PRECISIONS)}")
        return None
    value = flag or space.fixed.get("precision", "auto")
    if value not in contract.PRECISIONS:
        where = "--precision" if flag else f"{space.name or 'the space'}: fixed precision"
        raise spaces.SpaceError(f"{where} {value!r} unknown: use one of {', '.join(contract.PRECISIONS)}")
    return value


def recorded_space(rec: records.RunRecord, trainer) -> spaces.Space:
    """The space a run searched: as its record declares it (the space file may have changed since),
    with its trainer. A function defined in a script travels by value and has no importable name:
    the space file gives it back, or `trainer`."""
    by_name = not contract.is_user_trainer(rec.trainer) or contract.importable(rec.trainer)
    if trainer is not None and by_name and spaces.trainer_name(trainer) != rec.trainer:
        raise UsageError(f"--trainer {spaces.trainer_name(trainer)}: this run's trials ran {rec.trainer}, which a resume "
                         "imports by name and runs again: drop --trainer, or start a new run to try another trainer")
    if trainer is None and not by_name:
        try:
            trainer = spaces.load(rec.space).trainer
        except spaces.SpaceError:
            how = cli.in_words("resume it from Python, tuning.resume(DIR, trainer=your_function)",
                               "give it again, tuning.resume(DIR, trainer=your_function)")
            raise UsageError(f"this run's trainer {rec.trainer} was defined in a script, so it cannot be imported by "
                             f"name: {how}") from None
    if not rec.declaration:  # a run recorded before run.json held the whole space
        space = spaces.load(rec.space)
        return space.replace(trainer=trainer) if trainer is not None else space
    return spacejson.from_json(rec.declaration, trainer=trainer)


def extension(space: spaces.Space, rec: records.RunRecord, add_samples: int | None) -> int:
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


def warm_start(space: spaces.Space, strategy: str, dirs: list | None, top: int | None,
               seed: int | None = None) -> dict | None:
    """What a warm start brings: earlier results (BOHB) or best configurations (the others). An
    earlier run of the same seed drew the same random configurations in the same order, which
    this run would draw again: said, as --seed is the user's to choose."""
    if isinstance(dirs, (str, Path)):  # one folder, as a path: it was read letter by letter
        dirs = [dirs]
    if not dirs:
        return None
    if strategy == "grid":
        raise UsageError("--warm-start: grid search walks its fixed points and has nothing to learn from earlier "
                         f"runs; use any other strategy ({', '.join(s for s in spaces.STRATEGIES if s != 'grid')})")
    if space.grid:  # Tune would count each earlier configuration as one of a grid pass's samples
        raise UsageError(f"--warm-start with grid={list(space.grid)}: every grid point runs num_samples fresh "
                         "trials, which earlier configurations would replace unevenly; drop one of the two")
    if top is not None and strategy in ("bohb", "adaptive"):  # else ignored without a word
        raise UsageError(f"--warm-start-top: {strategy}'s model learns from every earlier result, not from the best "
                         "few: drop --warm-start-top")
    top = 3 if top is None else top
    check_at_least("warm_start_top", top)
    runs = growth.earlier_runs([str(d) for d in dirs], space)
    same = [str(Path(d).absolute()) for d, (rec, _) in zip(dirs, runs) if rec.seed == seed]
    if same:
        log.warning("--warm-start: %s ran with seed %s too, so this run's random draws repeat its configurations "
                    "in the same order; give --seed another value to draw new ones", ", ".join(same), seed)
    return {"dirs": [str(Path(d).absolute()) for d in dirs], "top": top, "results": len(growth.all_rows(runs)),
            "configs": [] if strategy in ("bohb", "adaptive") else growth.best_configs(runs, space, top)}


def check_tune_state(rec: records.RunRecord, folder: Path) -> None:
    """A resume needs the experiment state Tune saved in DIR/tune: without it (deleted, or unreadable)
    Tune logs an error and starts every trial again under new ids, and the tables lose the earlier
    ones. Refused, where trials have results. A run on a --storage-path keeps it there, in a folder
    named after DIR: checked where that is a folder here, left to Ray where it is a URI (s3://...)."""
    rows = folder / results.ROWS_FILE
    if not rows.is_file() or not rows.stat().st_size:
        return
    from tuning import backend

    storage, name = backend.experiment_location(folder, rec.storage_path, rec.storage_name)
    local = storage.removeprefix("file://")
    if "://" in local:
        return
    tune = Path(local) / name
    states = sorted(tune.glob("experiment_state-*.json"))
    try:
        json.loads(states[-1].read_text()) if states else None
    except (OSError, ValueError):
        states = []
    if not states:
        raise UsageError(f"--resume {folder}: its trials have results, but Tune's saved state "
                         f"({tune}/experiment_state-*.json) is missing or unreadable, so Tune would start "
                         "every trial again and the tables would lose these: restore the file, or start a new run "
                         f"(--warm-start {folder} runs this one's best configurations first)")

