"""``python -m tuning.run --space NAME``: tune a search space with Ray Tune.

The CLI parses and checks flags, makes the run's plan, then calls the library: tuning.session runs
it (data, Ray through tuning.backend, tables, report). Bad input exits with code 2 and one line saying what to change.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from tuning import cli, data, growth, results, session, spaces
from tuning.cli import UsageError
from tuning.trainer import PRECISIONS
from tuning.backend import ClusterError as _ClusterError  # no Ray import: that waits for a valid run

log = logging.getLogger("tuning.run")

# --smoke: CI-sized. 8 samples make it near-certain that ASHA stops one at its first rung.
SMOKE = {"num_samples": 8, "max_epochs": 2, "grid_repeats": 1, "synthetic_train": 5000,
         "synthetic_test": 1000, "max_train": 2000, "max_val": 500, "max_test": 1000}
# Hyperband (and BOHB) needs max_t >= eta for a rung (1 and 3 epochs at eta 3): a band is then a
# bracket of 3 trials paused at epoch 1, the best resumed to 3, and one of 2 trials at 3 epochs;
# 9 samples run that band and most of a second.
SMOKE_HYPERBAND = {**SMOKE, "num_samples": 9, "max_epochs": 3}


def _add_growth_flags(p: argparse.ArgumentParser) -> None:
    """Flags that continue or grow a search: --resume, --add-samples, --warm-start, --time-budget."""
    p.add_argument("--resume", metavar="DIR",
                   help="continue the unfinished experiment in this results dir (after a crash or Ctrl-C), "
                        "with the settings it was started with; with --add-samples, a finished one too")
    p.add_argument("--add-samples", type=int, metavar="N",
                   help="with --resume: N more trials under the same strategy and seed lineage (new random "
                        "draws, the grid's next points, BOHB's model as it stands); earlier trials are kept")
    p.add_argument("--warm-start", nargs="+", metavar="DIR",
                   help="start from earlier runs of the same space: BOHB's model is given their results; "
                        "random, ASHA and Hyperband evaluate their best configurations first")
    p.add_argument("--warm-start-top", type=int, metavar="K",
                   help="with --warm-start under random, ASHA or Hyperband: how many of the earlier best "
                        "configurations run first (default 3)")
    p.add_argument("--time-budget", metavar="DURATION", type=_duration,
                   help="stop once the run has run this long (90s, 30m, 2h; downtime between a stop and "
                        "--resume does not count): no trial starts after it, running trials pause at their "
                        "next epoch with their checkpoints; on --resume, the new total budget")


def build_parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m tuning.run", description=__doc__.split("\n\n")[0],
                epilog="Flags override what the space file declares.")
    p.add_argument("--space", help="search space: a module under search_spaces/ (e.g. cifar_asha); required "
                                   "unless --resume")
    _add_growth_flags(p)
    p.add_argument("--strategy", choices=spaces.STRATEGIES,
                   help="search strategy, overriding the space's: grid (grid search, FIFO), random "
                        "(random search, FIFO), asha (random search + ASHA), hyperband (random search + "
                        "synchronous Hyperband brackets), bohb (BOHB's model + the same brackets)")
    p.add_argument("--num-samples", type=int,
                   help="trials to sample (default: the space's); with grid, how often the grid is repeated")
    p.add_argument("--max-epochs", type=int, help="epochs of a full-budget trial (default: the space's)")
    p.add_argument("--seed", type=int, help="seeds the search and every trial's init and data order")
    p.add_argument("--cpus-per-trial", type=float, help="CPUs per trial; fractions allowed")
    p.add_argument("--gpus-per-trial", type=float,
                   help="GPUs per trial; fractions share a GPU (default: 1 where GPUs exist, else 0)")
    p.add_argument("--workers-per-trial", type=int,
                   help="CPU trials: train each trial as W DistributedDataParallel (gloo) ranks sharing "
                        "its CPUs (default: the space's, usually 1). GPU trials run one rank per GPU")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="CIFAR trainer: auto (default) trains under bf16 autocast on CUDA and in fp32 on CPU; "
                        "bf16 or fp32 force one (weights and checkpoints stay fp32); overrides the space's fixed")
    p.add_argument("--data", choices=["auto", "cifar10", "synthetic"],
                   help="auto (default): real CIFAR-10 if found or downloadable, else synthetic; "
                        "cifar10: require the real set; synthetic: always generate")
    p.add_argument("--data-dir", default="./data", help="where CIFAR-10 lives or is generated (default ./data)")
    p.add_argument("--results-dir", help="where results go (default results/<space>-<start time>)")
    p.add_argument("--address", metavar="auto|HOST:PORT",
                   help="run on the Ray cluster there (auto: the one started on this machine with `ray start`) "
                        "instead of starting a local Ray; see README, Running on a Ray cluster")
    p.add_argument("--storage-path", metavar="DIR|URI", type=cli.storage_path,
                   help="where Tune keeps the experiment and trial checkpoints: a folder every node reaches "
                        "(NFS) or a URI pyarrow opens (s3://bucket/path); default: RESULTS_DIR/tune. "
                        "Needed on a cluster of several machines")
    p.add_argument("--max-failures", type=int, default=2,
                   help="retry a trial whose training raises up to this many times, from its last "
                        "checkpoint, before marking it failed (default 2)")
    p.add_argument("--tune-logs", action="store_true",
                   help="also write Tune's own per-trial logs (TensorBoard events, progress.csv, result.json) "
                        "to each trial's folder; with many short trials they cost time (README: Performance)")
    p.add_argument("--worker-logs", action="store_true",
                   help="forward trial processes' output (Ray's INFO lines included) to this terminal")
    p.add_argument("--smoke", action="store_true",
                   help=f"CI-sized run: {SMOKE['num_samples']} samples, {SMOKE['max_epochs']} epochs, "
                        "a small data subset, synthetic data unless --data is given, a local Ray of "
                        f"{cli.SMOKE_CPUS} CPUs (trials run as on the 2-core machines it was sized on)")
    return p


def _duration(text: str) -> float:
    try:
        return growth.parse_duration(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[1]) from None


def _check_positive(name: str, value, minimum=1) -> None:
    if value is not None and value < minimum:
        raise UsageError(f"{name} must be at least {minimum}, got {value}")


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


def _resources(space: spaces.Space, args, cluster: dict) -> tuple[float, float, int]:
    """(cpus, gpus, workers) per trial, checked against what Ray sees: a trial runs on one node,
    so against the largest node's CPUs and GPUs."""
    workers = args.workers_per_trial if args.workers_per_trial is not None else space.workers_per_trial
    _check_positive("--workers-per-trial", workers)
    cpus = args.cpus_per_trial if args.cpus_per_trial is not None else space.cpus_per_trial * workers
    gpus = args.gpus_per_trial if args.gpus_per_trial is not None else space.gpus_per_trial
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
    return cpus, gpus, workers


def _precision(space: spaces.Space, flag: str | None) -> str | None:
    """The CIFAR trainer's precision: the flag, else the space's fixed setting, else auto; None
    for other trainers, which take no such argument."""
    if space.trainer != "cifar" or "precision" in space.params:
        if flag:
            why = f"trains {space.trainer}" if space.trainer != "cifar" else "searches precision"
            raise UsageError(f"--precision is for the cifar trainer's fixed setting; {space.name} {why}: drop it")
        return None
    value = flag or space.fixed.get("precision", "auto")
    if value not in PRECISIONS:
        raise spaces.SpaceError(f"{space.name}: fixed precision {value!r} unknown: use one of "
                                f"{', '.join(PRECISIONS)}")
    return value


def _data_banner(source: data.DataSource) -> str:
    if source.kind == "synthetic":
        return (f"DATA: SYNTHETIC CIFAR-10-shaped images ({source.root}); no real CIFAR-10 was used, "
                "so accuracies say nothing about CIFAR-10")
    return f"DATA: real CIFAR-10 ({source.root})"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    argv = sys.argv[1:] if argv is None else list(argv)
    with cli.sigterm_stops_like_ctrl_c():
        try:
            return _main(argv)
        except (UsageError, spaces.SpaceError, data.DataError, _ClusterError) as exc:
            print(f"tuning.run: error: {exc}", file=sys.stderr)
            return 2
        except results.WriteError as exc:  # a full disk, a file that cannot be written: not bad input
            print(f"tuning.run: error: {exc}; the experiment is saved up to the last result written: fix that, "
                  f"then continue with python -m tuning.run --resume {exc.path.parent}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # a second Ctrl-C or SIGTERM, while the first one's state was being saved
            print("tuning.run: interrupted twice; resume with --resume DIR (the last saved state is used)",
                  file=sys.stderr)
            return cli.interrupted_status()


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.warm_start_top is not None and not args.warm_start:
        raise UsageError("--warm-start-top needs --warm-start DIR...: it says how many of those runs' best "
                         "configurations run first")
    if args.resume:
        return _resume(args)
    if args.add_samples is not None:
        raise UsageError("--add-samples needs --resume DIR: it extends that run")
    if not args.space:
        raise UsageError("--space is required: name a space (e.g. --space cifar_asha) or --resume DIR")
    space = spaces.load(args.space)
    strategy = args.strategy or space.strategy
    smoke = (SMOKE_HYPERBAND if strategy in ("bohb", "hyperband") else SMOKE) if args.smoke else {}
    for flag in ("num_samples", "max_epochs", "workers_per_trial"):
        _check_positive("--" + flag.replace("_", "-"), getattr(args, flag))
    _check_positive("--seed", args.seed, minimum=0)
    _check_positive("--max-failures", args.max_failures, minimum=0)
    if strategy == "grid":  # tune.run's num_samples repeats the grid
        num_samples = args.num_samples or smoke.get("grid_repeats") or space.grid_repeats
        spaces.check_grid(space, num_samples)
    else:
        num_samples = args.num_samples or smoke.get("num_samples") or space.num_samples
    seed = space.seed if args.seed is None else args.seed
    plan = {
        "space": space.name, "strategy": strategy, "seed": seed, "argv": argv, "num_samples": num_samples,
        "max_epochs": args.max_epochs or smoke.get("max_epochs") or space.max_epochs,
        "max_failures": args.max_failures, "smoke": smoke, "storage_path": args.storage_path,
        "tune_logs": args.tune_logs, "precision": _precision(space, args.precision),
        "time_budget_s": args.time_budget, "warm_start": _warm_start(space, strategy, args),
        "data_args": {"kind": args.data or ("synthetic" if args.smoke else "auto"),
                      "data_dir": str(Path(args.data_dir).absolute()), "seed": seed,
                      "synthetic_train": smoke.get("synthetic_train", 50_000),
                      "synthetic_test": smoke.get("synthetic_test", 10_000)},
    }
    results_dir = Path(args.results_dir or f"results/{space.name}-{time.strftime('%Y%m%d-%H%M%S')}").absolute()
    created = _prepare_results_dir(results_dir)
    lock = _lock(results_dir)
    try:
        source, cluster = session.start(space, plan, address=args.address, worker_logs=args.worker_logs)
        cpus, gpus, workers = _resources(space, args, cluster)
    except BaseException:
        lock.release()
        if created and results_dir.exists() and not any(p.name != ".lock" for p in results_dir.iterdir()):
            (results_dir / ".lock").unlink(missing_ok=True)
            results_dir.rmdir()
        raise
    plan["resources_per_trial"] = {"cpu": cpus, "gpu": gpus}
    plan["workers_per_trial"] = workers
    if strategy == "grid":
        points = " x ".join(f"{len(p.grid_values())} {k}" for k, p in space.params.items())
        total = spaces.grid_size(space) * num_samples
        print(f"Grid search: {points} = {spaces.grid_size(space)} points x {num_samples} "
              f"repeat{'s' * (num_samples > 1)} = {total} trials", flush=True)
    return _execute(space, plan, source, results_dir, resume=False)


def _resume(args) -> int:
    results_dir = Path(args.resume).absolute()
    if not results_dir.is_dir():
        raise UsageError(f"--resume {results_dir}: no such folder; give the results dir of the run to continue")
    try:
        plan = json.loads((results_dir / "run.json").read_text())
    except (OSError, ValueError):
        raise UsageError(f"--resume {results_dir}: not a tuning.run results dir (no readable run.json); "
                         "give the folder a run was started in") from None
    if plan.get("status") == "finished" and not args.add_samples:
        raise UsageError(f"--resume {results_dir}: that experiment finished already; its results are there "
                         "(add --add-samples N to run N more trials in it)")
    if args.warm_start:
        raise UsageError("--warm-start starts a new run: it cannot be given with --resume")
    lock = _lock(results_dir)  # held to the end: filelock lets go of a lock nobody references
    try:
        space = spaces.load(plan["space"])
        more = _extension(space, plan, args.add_samples)
        if args.time_budget is not None:  # a new total; what earlier segments used still counts
            plan["time_budget_s"] = args.time_budget
        source, _ = session.start(space, plan, address=args.address, worker_logs=args.worker_logs)
        what = f"Adding {more} trials to" if more else "Resuming"
        print(f"{what} {plan['space']} ({plan['strategy']}) in {results_dir}", flush=True)
        return _execute(space, plan, source, results_dir, resume=True, add_samples=more)
    finally:
        lock.release()


def _extension(space: spaces.Space, plan: dict, add_samples: int | None) -> int:
    """Checks --add-samples and records it in the plan; the number of new trials (0: a plain resume)."""
    if add_samples is None:
        return 0
    _check_positive("--add-samples", add_samples)
    if plan["strategy"] == "grid":  # the grid walks on and never hands out a point twice
        left = spaces.grid_size(space) - plan.get("trials", 0)
        if add_samples > left:
            raise UsageError(f"--add-samples {add_samples}: the grid has {max(left, 0)} points not yet run "
                             "(grid search never repeats one); add at most that many, or tune on at random "
                             "with a new run (--strategy random)")
    growth.record_extension(plan, add_samples)
    return add_samples


def _warm_start(space: spaces.Space, strategy: str, args) -> dict | None:
    """What --warm-start DIR... brings: earlier results (BOHB) or best configurations (the others)."""
    if not args.warm_start:
        return None
    if strategy == "grid":
        raise UsageError("--warm-start: grid search walks its fixed points and has nothing to learn from earlier "
                         "runs; use random, asha, hyperband or bohb")
    top = 3 if args.warm_start_top is None else args.warm_start_top
    _check_positive("--warm-start-top", top)
    runs = growth.earlier_runs(args.warm_start, space)
    return {"dirs": [str(Path(d).absolute()) for d in args.warm_start], "top": top,
            "results": len(growth.all_rows(runs)),
            "configs": [] if strategy == "bohb" else growth.best_configs(runs, space, top)}


def _execute(space: spaces.Space, plan: dict, source, results_dir: Path, *, resume: bool,
             add_samples: int = 0) -> int:
    from tuning import runreport  # matplotlib, scipy: only for a run that goes ahead

    if source is not None:
        log.warning(_data_banner(source))
    page = results_dir / "report.html"
    outcome = session.execute(
        space, plan, source, results_dir, resume=resume, add_samples=add_samples,
        on_start=lambda: print(f"Live report: {page} (rewritten every {runreport.RELOAD_S} s while the run goes)",
                               flush=True))
    _print_summary(outcome.best, plan, source, results_dir, list(space.params))
    if outcome.status == "time budget spent":
        print(f"\nTime budget spent: {plan['time_used_s']:.0f} s of running time against {plan['time_budget_s']:.0f} s. "
              "Trials not finished are paused with their checkpoints. Go on with:\n"
              f"  python -m tuning.run --resume {results_dir} --time-budget LONGER\n"
              "(the budget is a total across resumes; add --add-samples N for trials beyond the plan)")
        return 0
    if outcome.status == "interrupted":
        print("\nInterrupted; the experiment's state is saved. Continue with:\n"
              f"  python -m tuning.run --resume {results_dir}")
        return cli.interrupted_status()
    return 0 if outcome.succeeded else 1  # non-zero only when no trial succeeded


def _metric_name(plan: dict) -> str:
    return "loss" if plan["data"]["kind"] in ("cifar10", "synthetic") else "objective"


def _print_summary(best, plan: dict, source, results_dir: Path, params: list[str]) -> None:
    print(f"\n{plan['trials']} trials: {plan['stopped_early']} stopped early by the scheduler, "
          f"{plan['failed']} failed, {plan['resumed_trials']} paused and resumed from a checkpoint, "
          f"{plan['recomputed_epochs']} epochs recomputed")
    print(f"  device time: {plan['cpu_hours']:.3g} CPU-hours, {plan['gpu_hours']:.3g} GPU-hours "
          "(each trial's resources times its running time)")
    if plan.get("memory_growing"):
        print(f"  {plan['memory_growing']} trial(s) grew in memory epoch after epoch: see memory_growing and "
              "peak_rss_mb in trials.csv; a tensor kept alive across steps is the usual cause")
    if best is None:
        print("No trial reported a result.")
    else:
        cfg = ", ".join(f"{p}={best[p]:.4g}" if isinstance(best[p], float) else f"{p}={best[p]}" for p in params)
        print(f"Best trial {best['trial_id']}: {cfg}")
        acc = f", accuracy {best['accuracy']:.4f}" if best.get("accuracy") is not None else ""
        print(f"  validation {_metric_name(plan)} {best['loss']:.4f}{acc} after {best['epochs']} epochs")
        if best.get("test_accuracy") is not None:
            print(f"  test loss {best['test_loss']:.4f}, accuracy {best['test_accuracy']:.4f} "
                  f"on {best['test_images']} test images")
    if source is not None:
        print(_data_banner(source))
    print(f"Results: {results_dir}  (report.html, report.md, trials.csv, epochs.csv, best_config.json, run.json)")
    print(f"Report: {results_dir / 'report.html'}")


if __name__ == "__main__":
    sys.exit(main())
