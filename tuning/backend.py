"""Every Ray call of the project: starting Ray, the Tune trainable, search algorithms and
schedulers, ``tune.run`` with a CLIReporter, and reading back what the trials did.

What leaves this module is plain data (dicts, lists, paths), so tables, reports and the CLI
never touch Ray objects.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tuning import spaces, trainer
from tuning.data import DataSource

log = logging.getLogger(__name__)

# tune.run's default output engine ignores a passed CLIReporter (Ray 2.60); the old one prints it.
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
# num_to_keep forces an experiment snapshot after checkpoints; its "may become a bottleneck"
# warning fires every few epochs of a fast trial and buries the table. The snapshot is tiny.
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")

REPORTED = ["loss", "accuracy", "training_iteration"]
EXPERIMENT_NAME = "tune"  # Ray's experiment folder inside the results dir


class _DropNoise(logging.Filter):
    """Ray messages that say nothing a tuning user can act on, and bury the progress table."""

    NOISE = ("Token authentication is enabled", "Generated new authentication token",
             "Checkpoint successfully created", "Started a local Ray instance",
             "Wrote the latest version of all result files")

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in self.NOISE)


def quiet_ray_logging() -> None:
    """Called by CLIs only: library code leaves logging alone."""
    noise = _DropNoise()
    for name in ("ray", "ray.tune", "ray.train", "ray._private.worker", "ray.air"):
        logger = logging.getLogger(name)
        logger.addFilter(noise)
        for handler in logger.handlers:
            handler.addFilter(noise)


def start_ray(num_cpus: int | None = None, address: str | None = None,
              worker_logs: bool = False) -> dict:
    """Start (or join) Ray and return its resources as {"CPU": n, "GPU": n, ...}.

    Trial processes' output is not forwarded unless worker_logs: it is mostly Ray's own INFO
    lines and SIGTERM tracebacks of actors shut down at the end, and it buried the progress
    table. Trial errors still reach the driver through Tune, and every line is in Ray's logs."""
    import ray

    if not ray.is_initialized():
        quiet_ray_logging()  # the token-auth banner is logged during init
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False,
                 log_to_driver=worker_logs)
        quiet_ray_logging()
    return dict(ray.cluster_resources())


def stop_ray() -> None:
    import ray

    ray.shutdown()


# ---------------------------------------------------------------- the trainable

def train_cifar(config: dict, *, source: DataSource, max_epochs: int, fixed: dict, seed: int,
                threads: int, workers: int = 1, max_train: int | None = None,
                max_val: int | None = None) -> None:
    """Tune's view of trainer.train_cifar: report each epoch, checkpoint each epoch, and
    continue from Tune's checkpoint when a trial is resumed or restarted.

    A trial given several GPUs trains as one nccl rank per GPU; a CPU trial with workers > 1 as
    that many gloo ranks sharing its CPUs. Either way rank 0's epochs come back here."""
    import ray
    import torch
    from ray import tune

    from tuning import distributed
    from tuning.data import load_train_val

    params = {k: spaces.plain(v) for k, v in config.items()}
    train, val = load_train_val(source, max_train, max_val)  # cached across trials in this process
    state, restored_epoch = None, 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = trainer.read_checkpoint(d)
        restored_epoch = int(state["epoch"])

    def report(metrics: dict, state: dict) -> None:
        with tempfile.TemporaryDirectory() as d:
            trainer.write_checkpoint(state, d)
            # restored_from: the epoch this trial's process resumed at (0 = fresh start), so the
            # tables can show pauses and prove no epoch was trained twice.
            tune.report({**metrics, "restored_from": restored_epoch},
                        checkpoint=tune.Checkpoint.from_directory(d))

    kwargs = dict(**params, **fixed, epochs=max_epochs, train=train, val=val, seed=seed, state=state)
    gpus = ray.get_gpu_ids() if torch.cuda.is_available() else []
    if len(gpus) > 1:
        distributed.run(trainer.train_cifar, kwargs, world_size=len(gpus), backend="nccl",
                        device_type="cuda", threads=max(1, threads // len(gpus)), on_epoch=report)
    elif workers > 1:
        distributed.run(trainer.train_cifar, kwargs, world_size=workers, backend="gloo",
                        device_type="cpu", threads=max(1, threads // workers), on_epoch=report)
    else:
        torch.set_num_threads(threads)
        trainer.train_cifar(**kwargs, device="cuda" if gpus else "cpu", on_epoch=report)


# ---------------------------------------------------------------- search strategies

def _search(space: spaces.Space, strategy: str, max_epochs: int, seed: int):
    """(config, search_alg, scheduler) for a strategy over the space's one declaration."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search import BasicVariantGenerator

    metric, mode = space.metric, space.mode
    if strategy == "grid":
        return spaces.to_grid(space), BasicVariantGenerator(random_state=seed), FIFOScheduler()
    if strategy == "random":
        return spaces.to_tune(space), BasicVariantGenerator(random_state=seed), FIFOScheduler()
    if strategy == "asha":
        scheduler = ASHAScheduler(metric=metric, mode=mode, max_t=max_epochs,
                                  grace_period=min(space.grace_period, max_epochs),
                                  reduction_factor=space.reduction_factor)
        return spaces.to_tune(space), BasicVariantGenerator(random_state=seed), scheduler
    if strategy == "bohb":
        import numpy as np
        from ray.tune.schedulers import HyperBandForBOHB

        np.random.seed(seed)  # HpBandSter draws its random fraction from numpy's global generator
        search = _tune_bohb()(space=spaces.to_configspace(space, seed), metric=metric, mode=mode, seed=seed)
        scheduler = HyperBandForBOHB(time_attr="training_iteration", metric=metric, mode=mode,
                                     max_t=max_epochs, reduction_factor=space.reduction_factor)
        return {}, search, scheduler
    raise spaces.SpaceError(f"strategy {strategy!r} unknown: use one of {', '.join(spaces.STRATEGIES)}")


def _tune_bohb():
    """TuneBOHB whose proposals are plain Python values.

    With ConfigSpace 1.x, TuneBOHB proposes numpy scalars (np.int64 batch sizes, np.str_
    choices); they would reach the trainer, the progress table and result files. BOHB's own
    bookkeeping (trial_to_params, which feeds its KDE) keeps what ConfigSpace gave it."""
    from ray.tune.search.bohb import TuneBOHB

    class PlainTuneBOHB(TuneBOHB):
        def suggest(self, trial_id: str):
            config = super().suggest(trial_id)
            return None if config is None else {k: spaces.plain(v) for k, v in config.items()}

    return PlainTuneBOHB


def _reporter(space: spaces.Space):
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

    return Reporter(metric_columns=REPORTED, parameter_columns=list(space.params),
                    metric=space.metric, mode=space.mode, sort_by_metric=True)


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
    callbacks: list = field(default_factory=list)


def run(spec: RunSpec) -> list[dict]:
    """Run the experiment through ``tune.run`` and return one plain record per trial."""
    from ray import tune
    from ray.tune import CheckpointConfig

    space = spec.space
    config, search_alg, scheduler = _search(space, spec.strategy, spec.max_epochs, spec.seed)
    trainable = tune.with_parameters(
        train_cifar, source=spec.source, max_epochs=spec.max_epochs, fixed=dict(space.fixed),
        seed=spec.seed, threads=max(1, int(spec.cpus_per_trial)), workers=spec.workers_per_trial,
        max_train=spec.max_train, max_val=spec.max_val)
    reporter = _reporter(space)
    analysis = tune.run(
        trainable,
        name=EXPERIMENT_NAME,
        storage_path=str(spec.results_dir.absolute()),
        config=config,
        num_samples=spec.num_samples,
        search_alg=search_alg,
        scheduler=scheduler,
        stop={"training_iteration": spec.max_epochs},
        resources_per_trial={"cpu": spec.cpus_per_trial, "gpu": spec.gpus_per_trial},
        progress_reporter=reporter,
        verbose=1,
        # Measured here: 100 no-op trials took 101 s without actor reuse and 4.4 s with it.
        reuse_actors=True,
        checkpoint_config=CheckpointConfig(num_to_keep=2),
        trial_dirname_creator=_trial_dirname,
        raise_on_failed_trial=False,
        callbacks=spec.callbacks,
    )
    return [_record(t) for t in analysis.trials]


def _record(trial) -> dict:
    """What the tables need to know of a trial, read from its own files."""
    path = Path(trial.path)
    rows = []
    result_file = path / "result.json"
    if result_file.exists():
        for line in result_file.read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
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
        "checkpoint": checkpoint.path if checkpoint is not None else None,
        "path": str(path),
    }
