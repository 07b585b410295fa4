"""``python -m tuning.run --space NAME``: tune a search space with Ray Tune.

The CLI parses and checks flags, then calls the library: data (tuning.data), Ray (tuning.backend),
tables (tuning.results). Bad input exits with code 2 and one line saying what to change.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from tuning import data, results, spaces

log = logging.getLogger("tuning.run")

# --smoke: CI-sized. 8 samples make it near-certain that ASHA stops one at its first rung.
SMOKE = {"num_samples": 8, "max_epochs": 2, "grid_repeats": 1, "synthetic_train": 5000,
         "synthetic_test": 1000, "max_train": 2000, "max_val": 500, "max_test": 1000}
# BOHB's Hyperband needs max_t >= eta for a rung (1 and 3 epochs at eta 3): 9 samples fill
# a bracket that pauses trials at epoch 1 and resumes the best at 3.
SMOKE_BOHB = {**SMOKE, "num_samples": 9, "max_epochs": 3}


class UsageError(Exception):
    """Bad input: exit 2 with this one-line message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage dump
        raise UsageError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m tuning.run", description=__doc__.split("\n\n")[0],
                epilog="Flags override what the space file declares.")
    p.add_argument("--space", required=True,
                   help="search space: a module under search_spaces/ (e.g. cifar_asha)")
    p.add_argument("--strategy", choices=spaces.STRATEGIES,
                   help="search strategy, overriding the space's: grid (grid search, FIFO), random "
                        "(random search, FIFO), asha (random search + ASHA), bohb (TuneBOHB + HyperBandForBOHB)")
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
    p.add_argument("--data", choices=["auto", "cifar10", "synthetic"],
                   help="auto (default): real CIFAR-10 if found or downloadable, else synthetic; "
                        "cifar10: require the real set; synthetic: always generate")
    p.add_argument("--data-dir", default="./data", help="where CIFAR-10 lives or is generated (default ./data)")
    p.add_argument("--results-dir", help="where results go (default results/<space>-<start time>)")
    p.add_argument("--worker-logs", action="store_true",
                   help="forward trial processes' output (Ray's INFO lines included) to this terminal")
    p.add_argument("--smoke", action="store_true",
                   help=f"CI-sized run: {SMOKE['num_samples']} samples, {SMOKE['max_epochs']} epochs, "
                        "a small data subset, synthetic data unless --data is given")
    return p


def _check_positive(name: str, value, minimum=1) -> None:
    if value is not None and value < minimum:
        raise UsageError(f"{name} must be at least {minimum}, got {value}")


def _prepare_results_dir(path: Path) -> bool:
    """Make sure results can be written there without touching anything already present.
    Returns whether the folder was created now (so a later refusal can remove it)."""
    created = not path.exists()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"results dir {path} already exists and is not empty: "
                         "choose a new --results-dir so no earlier result is overwritten")
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
    """(cpus, gpus, workers) per trial, checked against what Ray sees."""
    workers = args.workers_per_trial if args.workers_per_trial is not None else space.workers_per_trial
    _check_positive("--workers-per-trial", workers)
    cpus = args.cpus_per_trial if args.cpus_per_trial is not None else space.cpus_per_trial * workers
    gpus = args.gpus_per_trial if args.gpus_per_trial is not None else space.gpus_per_trial
    have_cpus, have_gpus = cluster.get("CPU", 0), cluster.get("GPU", 0)
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
        raise UsageError(f"--cpus-per-trial {cpus:g} is more than the {have_cpus:g} CPUs Ray sees: "
                         "lower it so a trial can start")
    if gpus > have_gpus:
        raise UsageError(f"--gpus-per-trial {gpus:g} is more than the {have_gpus:g} GPUs Ray sees: "
                         f"use --gpus-per-trial {have_gpus:g} or run where GPUs are available")
    ranks = int(gpus) if gpus > 1 else workers
    batch = space.params.get("batch_size")
    if ranks > 1 and isinstance(batch, spaces.Choice) and any(int(b) % ranks for b in batch.values):
        raise UsageError(f"batch_size choices {list(batch.values)} do not all split evenly over {ranks} "
                         "ranks (batch_size is the global batch): use a rank count that divides them")
    return cpus, gpus, workers


def _data_banner(source: data.DataSource) -> str:
    if source.kind == "synthetic":
        return (f"DATA: SYNTHETIC CIFAR-10-shaped images ({source.root}); no real CIFAR-10 was used, "
                "so accuracies say nothing about CIFAR-10")
    return f"DATA: real CIFAR-10 ({source.root})"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _main(argv)
    except (UsageError, spaces.SpaceError, data.DataError) as exc:
        print(f"tuning.run: error: {exc}", file=sys.stderr)
        return 2


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    space = spaces.load(args.space)
    strategy = args.strategy or space.strategy
    smoke = (SMOKE_BOHB if strategy == "bohb" else SMOKE) if args.smoke else {}
    for flag in ("num_samples", "max_epochs"):
        _check_positive("--" + flag.replace("_", "-"), getattr(args, flag))
    _check_positive("--seed", args.seed, minimum=0)
    _check_positive("--workers-per-trial", args.workers_per_trial)
    if strategy == "grid":  # tune.run's num_samples repeats the grid
        num_samples = args.num_samples or smoke.get("grid_repeats") or space.grid_repeats
    else:
        num_samples = args.num_samples or smoke.get("num_samples") or space.num_samples
    max_epochs = args.max_epochs or smoke.get("max_epochs") or space.max_epochs
    seed = space.seed if args.seed is None else args.seed
    kind = args.data or ("synthetic" if args.smoke else "auto")
    results_dir = Path(args.results_dir or f"results/{space.name}-{time.strftime('%Y%m%d-%H%M%S')}").absolute()

    created = _prepare_results_dir(results_dir)
    try:
        source = data.prepare(kind, args.data_dir, seed=seed,
                              synthetic_train=smoke.get("synthetic_train", 50_000),
                              synthetic_test=smoke.get("synthetic_test", 10_000))
        from tuning import backend  # importing Ray costs seconds: only once the flags are good

        cpus, gpus, workers = _resources(space, args, backend.start_ray(worker_logs=args.worker_logs))
    except BaseException:
        if created and results_dir.exists() and not any(results_dir.iterdir()):
            results_dir.rmdir()
        raise

    log.warning(_data_banner(source))
    if strategy == "grid":
        points = " x ".join(f"{len(p.grid_values())} {k}" for k, p in space.params.items())
        total = spaces.grid_size(space) * num_samples
        print(f"Grid search: {points} = {spaces.grid_size(space)} points x {num_samples} "
              f"repeat{'s' * (num_samples > 1)} = {total} trials", flush=True)
    started = time.time()
    run_info = {
        "space": space.name, "strategy": strategy, "seed": seed, "argv": argv,
        "num_samples": num_samples, "max_epochs": max_epochs,
        "resources_per_trial": {"cpu": cpus, "gpu": gpus}, "workers_per_trial": workers,
        "data": {"kind": source.kind, "root": source.root, "smoke_subset": bool(args.smoke)},
        "fixed": dict(space.fixed), "versions": results.versions(), "git_commit": results.git_commit(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)), "status": "running",
    }
    results.write_json(results_dir / "run.json", run_info)
    spec = backend.RunSpec(space=space, strategy=strategy, num_samples=num_samples,
                           max_epochs=max_epochs, seed=seed, cpus_per_trial=cpus, gpus_per_trial=gpus,
                           source=source, results_dir=results_dir, workers_per_trial=workers,
                           max_train=smoke.get("max_train"), max_val=smoke.get("max_val"))
    records = backend.run(spec)
    backend.stop_ray()

    params = list(space.params)
    trials = results.trials_table(records, params, strategy=strategy, max_epochs=max_epochs,
                                  metric=space.metric, mode=space.mode)
    epochs = results.epochs_table(records, params)
    results.write_tables(results_dir, trials, epochs)
    best = results.best_trial(trials, space.metric, space.mode)
    if best is not None:
        best.update(_test_best(best, records, space, source, smoke.get("max_test")))
        results.write_json(results_dir / "best_config.json", {
            "trial_id": best["trial_id"], "config": {p: best[p] for p in params}, "fixed": dict(space.fixed),
            **{k: best.get(k) for k in ("loss", "accuracy", "epochs", "test_loss", "test_accuracy")}})
    run_info.update(status="finished", wall_time_s=round(time.time() - started, 1), trials=len(trials),
                    stopped_early=int(trials["stopped_early"].sum()) if len(trials) else 0,
                    failed=int((trials["status"] == "ERROR").sum()) if len(trials) else 0,
                    resumed_trials=int((trials["resumed_at"] != "").sum()) if len(trials) else 0,
                    recomputed_epochs=int(trials["recomputed_epochs"].sum()) if len(trials) else 0,
                    best=best)
    results.write_json(results_dir / "run.json", run_info)
    _print_summary(best, run_info, source, results_dir, params)
    return 0 if best is not None else 1


def _test_best(best: dict, records: list[dict], space: spaces.Space, source: data.DataSource,
               max_test: int | None) -> dict:
    """Test-set accuracy of the best trial's final model: measured once, for the best config only."""
    from tuning import trainer

    ckpt = next((r["checkpoint"] for r in records if r["trial_id"] == best["trial_id"]), None)
    if ckpt is None:
        return {}
    state = trainer.read_checkpoint(ckpt)
    test = data.load_test(source, max_test)
    m = trainer.test_accuracy(state, test, width=space.fixed.get("width", 16))
    return {"test_loss": m["loss"], "test_accuracy": m["accuracy"], "test_images": len(test)}


def _print_summary(best, info: dict, source, results_dir: Path, params: list[str]) -> None:
    print(f"\n{info['trials']} trials: {info['stopped_early']} stopped early by the scheduler, "
          f"{info['failed']} failed, {info['resumed_trials']} paused and resumed from a checkpoint, "
          f"{info['recomputed_epochs']} epochs recomputed")
    if best is None:
        print("No trial reported a result.")
    else:
        cfg = ", ".join(f"{p}={best[p]:.4g}" if isinstance(best[p], float) else f"{p}={best[p]}" for p in params)
        print(f"Best trial {best['trial_id']}: {cfg}")
        print(f"  validation loss {best['loss']:.4f}, accuracy {best['accuracy']:.4f} after {best['epochs']} epochs")
        if best.get("test_accuracy") is not None:
            print(f"  test loss {best['test_loss']:.4f}, accuracy {best['test_accuracy']:.4f} "
                  f"on {best['test_images']} test images")
    print(_data_banner(source))
    print(f"Results: {results_dir}  (trials.csv, epochs.csv, best_config.json, run.json)")


if __name__ == "__main__":
    sys.exit(main())
