"""The trainables Tune runs: adapters from the project's trainers to Tune's report/checkpoint API.

Part of tuning.backend (every Ray call of the project lives in this package), imported lazily by
it when Tune is used. It imports Ray, and torch only where a trial needs it (the CIFAR trainer,
DDP, a GPU): a user's trainer without torch starts its trials without torch's import. A trial here
restores from its newest readable checkpoint, reports each epoch with a checkpoint, stops itself
when its metric diverges (reporting a finite worst case instead of NaN), and turns a CUDA
out-of-memory error into a message naming the configuration.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

import ray
from ray import tune

from tuning import contract, objectives, results, spaces
from tuning import params as param_types
from tuning.trial import forkserver, trialstate
from tuning.backend.tune_parts import SyntheticBenchmark
from tuning.compare.benchmarks import BENCHMARKS

if TYPE_CHECKING:
    from tuning.contract import DataSource

log = logging.getLogger(__name__)


class _Diverged(Exception):
    """Raised out of the trainer's on_epoch once a diverged epoch is reported: ends the trial."""


# A paused trial mostly resumes in the process that paused it (Tune reuses actors), so the last few
# checkpoints this process wrote stay in memory, named by a token written beside them: a resume
# takes the state from here instead of reading back what this process just wrote (tuning.bench,
# scheduler section). A few MB each for the CIFAR model.
_RECENT: OrderedDict[str, dict] = OrderedDict()
_RECENT_MAX = 4
TOKEN_FILE = "state.token"


def remember(state: dict, directory: str) -> None:
    """Keep a copy of the state just checkpointed to `directory`, so that a trial resumed in this
    process (a reused actor) recalls it instead of reading the file back."""
    token = uuid.uuid4().hex
    (Path(directory) / TOKEN_FILE).write_text(token)
    # A copy: training goes on updating the tensors (or a model object) the trainer handed over.
    _RECENT[token] = copy.deepcopy(state)
    while len(_RECENT) > _RECENT_MAX:
        _RECENT.popitem(last=False)


def recalled(directory: Path) -> dict | None:
    """The state remember() kept for the checkpoint in `directory`, or None: another process wrote it."""
    try:
        return _RECENT.get((directory / TOKEN_FILE).read_text())
    except OSError:
        return None


def restore(checkpoint) -> tuple[dict | None, int]:
    """(state, the epochs it holds): the newest checkpoint that loads, Tune's latest, or, when
    that one is unreadable, the one before it (Tune keeps two), or (None, 0) to start over."""
    with checkpoint_dirs(checkpoint) as directories:
        return trialstate.load_newest(directories, recall=recalled)


@contextlib.contextmanager
def checkpoint_dirs(checkpoint):
    """Local directories of Tune's checkpoints for this trial, newest first: on local storage the
    latest and the older ones beside it, on remote storage the latest, downloaded (for the
    context's duration)."""
    if checkpoint is None:
        yield []
        return
    latest = Path(checkpoint.path)
    if latest.is_dir():
        yield [latest, *sorted((p for p in latest.parent.glob("checkpoint_*") if p.name < latest.name), reverse=True)]
        return
    with checkpoint.as_directory() as d:
        yield [Path(d)]


def trainable(spec):
    """What each trial of spec (a backend.RunSpec) runs: a synthetic benchmark's class Trainable,
    or train_function around the space's trainer (a function travels to the workers with it:
    by value when defined in a script or notebook, by name from an importable module)."""
    from tuning.backend.replay import replay_trainable
    from tuning.compare.recorded import is_replay

    space = spec.space
    if is_replay(space.trainer):  # a finished run's recorded curves (tuning/replay.py)
        return replay_trainable(spec)
    if isinstance(space.trainer, str) and space.trainer in BENCHMARKS:
        return tune.with_parameters(SyntheticBenchmark, benchmark=space.trainer, max_t=spec.max_epochs,
                                    seed=spec.seed)
    return tune.with_parameters(
        train_function, trainer=space.trainer, source=spec.source, max_epochs=spec.trainer_epochs or spec.max_epochs,
        fixed=dict(space.fixed), seed=spec.seed, threads=max(1, int(spec.cpus_per_trial)),
        metric=space.metric, diverged_value=space.worst, workers=spec.workers_per_trial,
        max_train=spec.max_train, max_val=spec.max_val, others=tuple(objectives.required(space)[1:]),
        one_report=contract.one_report_refusal(spec.strategy, spec.max_epochs, spaces.trainer_name(space.trainer)))


class TrialName:
    """Tune's trial_name_creator: a trial is `<trainer>_<trial id>` in Tune's progress table and
    messages, after the user's function (or the benchmark, or cifar), where Tune would name it after
    this module's adapter, train_function. A class, not a closure: Tune keeps it in each trial's
    saved state, and a resume finds it by name."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, trial) -> str:
        return f"{self.name}_{trial.trial_id}"


def trial_name(space: spaces.Space) -> TrialName:
    trainer = space.trainer
    if callable(trainer):
        return TrialName(getattr(trainer, "__name__", type(trainer).__name__))
    if trainer.startswith("replay:"):  # a folder, not a name
        return TrialName("replay")
    return TrialName(trainer.rpartition(":")[2])


def train_function(config: dict, *, trainer, source, max_epochs: int,
                   fixed: dict, seed: int, threads: int, metric: str, diverged_value: float,
                   workers: int = 1, max_train: int | None = None, max_val: int | None = None,
                   one_report: str | None = None, others: tuple = ()) -> None:
    """Tune's view of a trainer (tuning.contract): report each epoch, checkpoint each epoch, and
    continue from Tune's checkpoint when a trial is resumed, retried or unpaused. A user's trainer
    that returns its metrics without calling on_epoch has them reported as its one result, unless
    the strategy cannot take that (`one_report`: why not), which stops the run as a metric error.

    A trial given several GPUs trains as one nccl rank per GPU; a CPU trial with workers > 1 as
    that many gloo ranks sharing its CPUs. Either way rank 0's epochs come back here. A trial
    given a fraction of a GPU sees that one GPU in ray.get_gpu_ids() and trains on it alone.
    `others`: the metrics besides `metric` that every result must hold (a space's other objectives
    and its constrained metrics, tuning.objectives)."""
    params = {k: param_types.plain(v) for k, v in config.items()}
    kwargs = dict(**params, **fixed, epochs=max_epochs)
    try:
        if trainer == "cifar" and workers == 1 and forkserver.enabled() and not _gpus():
            _train_cifar_forked(params, {**kwargs, "seed": seed}, source=source, max_train=max_train,
                                max_val=max_val, threads=threads, metric=metric, diverged_value=diverged_value,
                                others=others)
            return
        state, restored = restore(tune.get_checkpoint())
        report = _epoch_reporter(params, metric, diverged_value, restored_epoch=restored, others=others,
                                 taken={*params, *fixed})
        kwargs["state"] = state
        if trainer == "cifar":
            _train_cifar({**kwargs, "seed": seed}, source=source, max_train=max_train, max_val=max_val,
                         threads=threads, workers=workers, on_epoch=report)
        else:
            fn = contract.resolve(trainer)
            try:
                returned = _train_user(fn, kwargs, seed=seed, threads=threads, workers=workers, on_epoch=report)
            except DeprecationWarning as exc:  # Ray's refusal of ray.train.report in Tune points at tune.report
                if "ray.train.report" not in str(exc):
                    raise
                tune.report({**_stand_ins((metric, *others), {}, diverged_value),
                             results.METRIC_ERROR: contract.RAY_REPORT, "ended_at": time.time()})
                return
            if report.epochs[0] == 0:  # a fresh trial that never called on_epoch (a resumed one may have nothing left)
                _report_returned(report, returned, metric, diverged_value, spaces.trainer_name(fn), one_report, others)
    except _Diverged:
        return
    except Exception as exc:
        torch = sys.modules.get("torch")  # a CUDA error comes from a process that imported torch
        if torch is None or not isinstance(exc, torch.cuda.OutOfMemoryError):
            raise
        torch.cuda.empty_cache()  # give the memory back before the next trial in this process
        share = ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0)
        raise RuntimeError(oom_message(params, str(exc), share)) from None


def _epoch_reporter(params: dict, metric: str, diverged_value: float, *, restored_epoch: int, others: tuple = (),
                    taken: set = frozenset()):
    """The trainer's on_epoch: each epoch's metrics to Tune with a checkpoint; for a diverged
    epoch, a finite worst case and the end of the trial (_Diverged); for metrics without the
    space's metric as a number, a result that stops the run (tune_parts.stopper) and the end of
    the trial."""
    rss: list[float] = []
    # Tune's node_ip cannot tell apart nodes sharing a machine (or an IP behind NAT); the id can.
    node_id = ray.get_runtime_context().get_node_id()
    reported = [restored_epoch]

    def report(metrics: dict, state: dict | None = None, written: str | None = None, returned: bool = False) -> None:
        given_a_dict = isinstance(metrics, dict)
        metrics, wrong = contract.plain_metrics(metrics, metric)
        # The space's own metrics never clash (tuning.spaces refuses it); another one may (lr).
        metrics = {results.kept_as(k, taken): v for k, v in metrics.items()}
        if wrong is not None and given_a_dict:  # else the line already says to pass a dict
            wrong += (f": report {metric!r} as a number (to on_epoch, or in the dict the trainer returns), or set "
                      "the space's metric to one it reports")
        # This process's memory figures come with every result: a bound on peak_rss_mb needs no trainer's report.
        memory = trialstate.memory()
        lacking = metric
        for other in [o for o in others if o not in memory] if wrong is None else ():
            wrong, lacking = contract.plain_metrics(metrics, other)[1], other
            if wrong is not None:
                wrong += (f": report {other!r} as a number (to on_epoch, or in the dict the trainer returns), or "
                          "drop it from the space's objectives and constraints")
                break
        if wrong is not None:
            # Stand-in values keep Tune's metric check and the schedulers quiet for the one step
            # the stopper needs to end the run.
            tune.report({**metrics, **_stand_ins((metric, *others), metrics, diverged_value),
                         results.METRIC_ERROR: wrong, results.METRIC_LACKING: lacking, "ended_at": time.time()})
            raise _Diverged
        # restored_from: the epoch this trial's process resumed at (0 = fresh start), so the
        # tables can show pauses and prove no epoch was trained twice. A trainer's own memory
        # figures (a DDP rank's) win over this process's.
        # ended_at: when the epoch ended, to the microsecond; Tune's timestamp has whole seconds
        # (Ray's session overwrites a reported one), which made MLflow show trials of 0 ms.
        metrics = {**memory, **metrics, "restored_from": restored_epoch, "node_id": node_id,
                   "ended_at": time.time()}
        rss.append(metrics["rss_mb"])
        metrics["memory_growing"] = trialstate.memory_growing(rss)
        if metrics["memory_growing"] and not trialstate.memory_growing(rss[:-1]):
            log.warning("trial memory grew by %.0f MB since epoch 2 (%s): %s", rss[-1] - rss[1],
                        params, trialstate.LEAK_ADVICE)
        value = metrics.get(metric)
        if metrics.get("diverged") or not math.isfinite(value):
            # A finite worst case keeps NaN out of ASHA's rungs and BOHB's model; no checkpoint,
            # the weights are garbage; and no more epochs spent on it.
            tune.report({**metrics, metric: diverged_value, "diverged": True})
            raise _Diverged
        reported[0] += 1
        if returned:  # a trainer's return value: its one result, with nothing to go on from
            tune.report({**metrics, "diverged": False, "returned": True})
            return
        if written is not None:  # a forked trial's process wrote it (tuning.forkserver)
            _report_checkpoint(metrics, written, reported[0])
            return
        with tempfile.TemporaryDirectory() as d:
            try:
                trialstate.write_checkpoint(state, d)
            except Exception as exc:  # pickling errors come in many types
                raise TypeError(contract.unsaveable(exc)) from exc
            remember(state, d)
            _report_checkpoint(metrics, d, reported[0])

    report.epochs = reported  # epochs reported, restored ones included: 0 for a fresh trial yet to report
    return report


def _stand_ins(names: tuple, metrics: dict, diverged_value: float) -> dict:
    """`diverged_value` for each of `names` that `metrics` lacks as a number."""
    return {k: diverged_value for k in names if contract.plain_metrics(metrics, k)[1] is not None}


def _report_returned(report, returned, metric: str, diverged_value: float, name: str, refusal: str | None,
                     others: tuple = ()) -> None:
    """What a trainer returned without calling on_epoch, as the trial's one result; or, where that
    is nothing, or the strategy needs a result per epoch, a result that stops the run saying why."""
    metrics, wrong = contract.one_report(returned, metric, name, others)
    wrong = wrong or refusal
    if wrong is not None:
        tune.report({**_stand_ins((metric, *others), {}, diverged_value), results.METRIC_ERROR: wrong,
                     "ended_at": time.time()})
        return
    report(metrics, returned=True)


def _report_checkpoint(metrics: dict, directory: str, epochs: int) -> None:
    (Path(directory) / trialstate.EPOCH_FILE).write_text(str(epochs))
    tune.report({**metrics, "diverged": False}, checkpoint=tune.Checkpoint.from_directory(directory))


def _train_cifar_forked(params: dict, kwargs: dict, *, source: DataSource, max_train: int | None,
                        max_val: int | None, threads: int, metric: str, diverged_value: float,
                        others: tuple = ()) -> None:
    """train_cifar in a process forked from the node's fork server (tuning.forkserver): this
    process never imports torch. The child restores from Tune's checkpoints, and writes each
    epoch's checkpoint for this process to report."""
    reporter = []

    def on_message(kind: str, payload) -> None:
        if kind == "restored":
            reporter.append(_epoch_reporter(params, metric, diverged_value, restored_epoch=payload, others=others))
            return
        metrics, directory = payload
        try:
            reporter[0](metrics, written=directory)
        finally:  # reported (Tune has copied it) or not: either way nobody needs it any more
            shutil.rmtree(directory, ignore_errors=True)

    with checkpoint_dirs(tune.get_checkpoint()) as directories:
        job = functools.partial(forkserver.cifar_trial, kwargs=kwargs, checkpoints=[str(d) for d in directories],
                                source=source, max_train=max_train, max_val=max_val, threads=threads)
        # One server per job and node: another job on the cluster may bring other code (its working_dir).
        # The raylet is this worker's parent: when it ends (ray.shutdown, a dead node), so does the server.
        context = ray.get_runtime_context()
        forkserver.run(job, on_message, node_key=f"{context.get_job_id()}-{context.get_node_id()}",
                       watch_pid=os.getppid())


def _train_user(fn, kwargs: dict, *, seed: int, threads: int, workers: int, on_epoch):
    """A user's trainer on the trial's resources: one nccl rank per GPU or `workers` gloo ranks
    sharing the CPUs (the trainer takes rank, world_size and device), or this process alone. Returns
    what it returned (rank 0's)."""
    gpus = _gpus()
    ranks, backend, device = (len(gpus), "nccl", "cuda") if len(gpus) > 1 else (workers, "gloo", "cpu")
    if ranks > 1:
        from tuning.trial import distributed

        return distributed.run(fn, contract.call_kwargs(fn, kwargs, {"seed": seed}), world_size=ranks,
                               backend=backend, device_type=device, threads=max(1, threads // ranks),
                               on_epoch=on_epoch)
    _set_threads(threads)
    # epochs, state and on_epoch where it takes them: a trainer that returns its metrics may not
    params = {k: v for k, v in kwargs.items() if k not in ("epochs", "state")}
    return fn(**contract.call_kwargs(fn, params, {"epochs": kwargs["epochs"], "state": kwargs["state"],
                                                  "on_epoch": on_epoch, "seed": seed,
                                                  "device": "cuda" if gpus else "cpu", "rank": 0, "world_size": 1}))


def _train_cifar(kwargs: dict, *, source: DataSource, max_train: int | None, max_val: int | None,
                 threads: int, workers: int, on_epoch) -> None:
    """train_cifar on the trial's resources: one nccl rank per GPU, `workers` gloo ranks sharing
    the CPUs, or this process alone."""
    import torch

    from tuning.trial import distributed, trainer
    from tuning.trial.data import load_train_val

    train, val = load_train_val(source, max_train, max_val)  # cached across trials in this process
    kwargs = {**kwargs, "train": train, "val": val}
    gpus = _gpus()
    if len(gpus) > 1:
        distributed.run(trainer.train_cifar, kwargs, world_size=len(gpus), backend="nccl",
                        device_type="cuda", threads=max(1, threads // len(gpus)), on_epoch=on_epoch)
    elif workers > 1:
        distributed.run(trainer.train_cifar, kwargs, world_size=workers, backend="gloo",
                        device_type="cpu", threads=max(1, threads // workers), on_epoch=on_epoch)
    else:
        torch.set_num_threads(threads)
        trainer.train_cifar(**kwargs, device="cuda" if gpus else "cpu", on_epoch=on_epoch)


def _gpus() -> list:
    """The GPUs Ray gave this trial, where torch can use them (a GPU torch cannot see trains nothing)."""
    gpus = ray.get_gpu_ids()
    if not gpus:  # no torch import for a CPU trial
        return []
    import torch

    return gpus if torch.cuda.is_available() else []


def _set_threads(threads: int) -> None:
    """The trial's CPU share as torch's thread count: now, where the trainer's module imported torch,
    else through the environment, which torch reads when a trainer imports it later."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    else:
        os.environ["OMP_NUM_THREADS"] = str(threads)


def oom_message(params: dict, error: str, gpu_share: float) -> str:
    """What a trial that ran out of CUDA memory fails with: its config, the fix, and CUDA's own
    first line. A trial holding a fraction of a GPU (--gpus-per-trial 0.25: four per GPU) ran out
    because its neighbours hold the rest, so the fix is fewer trials per GPU."""
    first = error.splitlines()[0] if error else "CUDA out of memory"
    if 0 < gpu_share < 1:
        others = int(1 / gpu_share + 1e-9) - 1  # Ray packs floor(1 / share) trials on a GPU
        fix = (f"this trial shares its GPU with up to {others} other trial(s) (--gpus-per-trial {gpu_share:g}): "
               f"raise --gpus-per-trial (e.g. to {min(1.0, 2 * gpu_share):g}) so fewer trials share it, "
               "or lower batch_size")
    else:
        fix = "lower batch_size or give trials more GPU memory"
    return f"CUDA out of memory with config {params}: {fix} ({first})"
