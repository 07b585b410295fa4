"""Trainers a user might write, for the API tests: each follows tuning's trainer contract
(docs/your-trainer.md) with no CIFAR data, or breaks it the way a user's trainer can."""

import math
import time


def _epochs(state, epochs):
    return range(state["epoch"] if state else 0, epochs)


def scored(*, lr, epochs, state=None, on_epoch):
    """Reports `score`, higher is better, and no loss: it rises with every epoch and peaks at lr 0.3,
    so the best configuration at the full budget is the one nearest 0.3."""
    for e in _epochs(state, epochs):
        on_epoch({"score": 1 - abs(lr - 0.3) + 0.05 * (e + 1), "error_rate": abs(lr - 0.3)}, {"epoch": e + 1})


def fades(*, lr, epochs, state=None, on_epoch):
    """`score` for mode max that misleads: 1 - lr after the first epoch, at most 0.05 after any
    later one. A trial stopped after its first epoch ends above every full-budget trial."""
    for e in _epochs(state, epochs):
        on_epoch({"score": 0.01 * lr + 0.01 * (e + 1) if e else 1 - lr}, {"epoch": e + 1})


def no_on_epoch(*, lr, epochs, state=None):
    """The contract broken: it takes no on_epoch."""


def raises(*, lr, epochs, state=None, on_epoch):
    """A bug in the first epoch of every trial."""
    raise ValueError(f"shapes (32, 10) and (32, 3) do not match for lr={lr}")


def raises_above(*, lr, epochs, state=None, on_epoch):
    """The bug of `raises` where lr > 0.03 only: on LogUniform(1e-3, 1.0), about half the trials.
    The others take a moment an epoch: done at once, two of them could spend a small budget before
    a failed trial's error reached Tune, which then stopped that trial as if it had run."""
    if lr > 0.03:
        raises(lr=lr, epochs=epochs, on_epoch=on_epoch)
    for e in _epochs(state, epochs):
        time.sleep(0.5)
        on_epoch({"loss": lr}, {"epoch": e + 1})


def nan_forever(*, lr, epochs, state=None, on_epoch):
    for e in _epochs(state, epochs):
        on_epoch({"score": math.nan}, {"epoch": e + 1})


def text_metric(*, lr, epochs, state=None, on_epoch):
    for e in _epochs(state, epochs):
        on_epoch({"score": "high"}, {"epoch": e + 1})


def unsaveable_state(*, lr, epochs, state=None, on_epoch):
    for e in _epochs(state, epochs):
        on_epoch({"score": lr}, {"epoch": e + 1, "batches": (i for i in range(3))})  # a generator


def loss_only(*, lr, epochs, state=None, on_epoch):
    """Reports loss and accuracy, not the `score` a space asks for."""
    for e in _epochs(state, epochs):
        on_epoch({"loss": lr, "accuracy": 1 - lr}, {"epoch": e + 1})


def ranked(*, lr, epochs, state=None, on_epoch, rank, world_size, device):
    """A DDP trainer: each rank adds rank + 1 to an all_reduce, so 2 ranks report 3."""
    import torch
    import torch.distributed as dist

    for e in _epochs(state, epochs):
        total = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(total)
        on_epoch({"score": lr, "ranks_sum": total.item(), "ranks": world_size}, {"epoch": e + 1})


def branches(*, optimizer, lr, epochs, momentum=None, nesterov=None, width=8, state=None, on_epoch):
    """A conditional space's trainer: momentum and nesterov exist under sgd only, and a value for
    an inactive parameter (or a missing active one) is a bug it refuses, failing the trial."""
    if (optimizer == "sgd") != (momentum is not None) or (optimizer == "sgd") != (nesterov is not None):
        raise ValueError(f"optimizer {optimizer} with momentum {momentum} and nesterov {nesterov}")
    best = 0.2 if optimizer == "sgd" else 0.5
    for e in _epochs(state, epochs):
        loss = abs(lr - best) + (0.1 * (1 - momentum) if momentum is not None else 0.05) + 1 / (e + 1) + 0.01 * width
        on_epoch({"loss": loss}, {"epoch": e + 1})


def torch_free(*, lr, epochs, state=None, on_epoch):
    """`scored`, reporting whether its trial process has imported torch (1.0) or not (0.0)."""
    import sys

    for e in _epochs(state, epochs):
        on_epoch({"score": 1 - abs(lr - 0.3) + 0.05 * (e + 1), "torch_loaded": float("torch" in sys.modules)},
                 {"epoch": e + 1, "lr": lr})


def whereami(*, lr, epochs, state=None, on_epoch):
    """Reports the process it trains in and whether that process has PL_DISABLE_FORK=1 (what
    Tune gives every trial actor's environment)."""
    import os

    for e in _epochs(state, epochs):
        on_epoch({"score": lr, "pid": os.getpid(), "pl_disable_fork": int(os.environ.get("PL_DISABLE_FORK") == "1")},
                 {"epoch": e + 1})


def slow(*, lr, epochs, state=None, on_epoch):
    """A tenth of a second an epoch: enough that a short time budget stops a run on any machine."""
    import time

    for e in _epochs(state, epochs):
        time.sleep(0.1)
        on_epoch({"loss": lr}, {"epoch": e + 1})


def tradeoff(*, x, y, epochs, state=None, on_epoch):
    """Two objectives that trade off, and a memory figure to bound (tests/test_objectives.py): a
    larger x lowers loss but raises latency_ms and peak_mem_gb (8 GB at x = 1, so peak_mem_gb <= 4
    holds for x <= 0.5); y only makes both objectives worse, so a trial with a larger y than another
    of about its x is dominated by it. Each epoch lowers the loss a little."""
    for e in _epochs(state, epochs):
        on_epoch({"loss": (1 - x) ** 2 + 0.2 * y + 0.1 / (e + 1), "latency_ms": 1 + 10 * x + 2 * y,
                  "peak_mem_gb": 8 * x}, {"epoch": e + 1})


def tradeoff_no_latency(*, x, y, epochs, state=None, on_epoch):
    """tradeoff without latency_ms: an objective the trainer never reports."""
    for e in _epochs(state, epochs):
        on_epoch({"loss": (1 - x) ** 2 + 0.5 * y, "peak_mem_gb": 8 * x}, {"epoch": e + 1})


def logs_its_epochs(*, lr, log, epochs, state=None, on_epoch, pause=0.2):
    """`slow` at `pause` seconds an epoch, appending "lr start end" for each epoch to the file `log`
    (a fixed parameter): when each trial trained, for tests of how many run at once."""
    import time

    for e in _epochs(state, epochs):
        start = time.time()
        time.sleep(pause)
        with open(log, "a") as f:
            f.write(f"{lr!r} {start} {time.time()}\n")
        on_epoch({"loss": lr}, {"epoch": e + 1})


def reports_its_lr(*, lr, epochs, state=None, on_epoch):
    """Reports the learning rate it trains at now (decayed each epoch) as `lr`, a parameter's name,
    and a `status` of its own, as trainers do: columns the tables already have."""
    for e in _epochs(state, epochs):
        on_epoch({"loss": abs(lr - 0.3) + 1 / (e + 1), "lr": lr * 0.5 ** (e + 1), "status": 1.0}, {"epoch": e + 1})


def scheduled(*, arch, lr, epochs, state=None, on_epoch, sched="none given"):
    """sched exists for the deep arch only, where None (no schedule) is one of its choices, and the best."""
    if (sched == "none given") != (arch == "shallow"):
        raise TypeError(f"arch {arch!r} with sched {sched!r}")
    for e in _epochs(state, epochs):
        on_epoch({"loss": lr + (0.0 if sched is None else 0.1) + 1 / (e + 1)}, {"epoch": e + 1})


def sgd_forgets_the_metric(*, optimizer, lr, epochs, state=None, on_epoch, momentum=None):
    """Reports `loss` under adamw; the sgd branch reports `val_loss` instead, as a branch written
    later can."""
    key = "loss" if optimizer == "adamw" else "val_loss"
    for e in _epochs(state, epochs):
        on_epoch({key: lr + 1 / (e + 1)}, {"epoch": e + 1})


def slow_unless_it_fails(*, lr, epochs, state=None, on_epoch):
    """slow's tenth of a second an epoch, where lr <= 0.5; above, a bug in the first epoch."""
    if lr > 0.5:
        raise ValueError(f"diverged at lr={lr}")
    slow(lr=lr, epochs=epochs, state=state, on_epoch=on_epoch)


def reports_tunes_own_keys(*, lr, epochs, state=None, on_epoch):
    """Ray-style habits: done=True on every report, a 0-based training_iteration."""
    for e in _epochs(state, epochs):
        on_epoch({"loss": lr / (e + 1), "done": True, "training_iteration": e}, {"epoch": e + 1})


def reports_a_number(*, lr, epochs, state=None, on_epoch):
    """Optuna's habit: trial.report(value, step)."""
    for e in _epochs(state, epochs):
        on_epoch(lr, e)


def reports_to_ray(*, lr, epochs, state=None, on_epoch, how="tune"):
    """Ported from Ray Tune with its signature changed but Ray's report kept: on_epoch never called."""
    import ray.train
    from ray import tune

    for e in _epochs(state, epochs):
        (tune.report if how == "tune" else ray.train.report)({"loss": (lr - 0.3) ** 2 + 1 / (e + 1)})


def ends_itself(*, lr, epochs, state=None, on_epoch):
    """Its own early stopping after epoch 1 where lr > 0.5; a loss that turns NaN at epoch 1 where
    lr < 0.1; the full budget otherwise."""
    for e in _epochs(state, epochs):
        on_epoch({"loss": math.nan if lr < 0.1 else lr + 1 / (e + 1)}, {"epoch": e + 1})
        if lr > 0.5:
            return


def returns_a_tuple(*, x, y):
    """Several objectives returned as Optuna's multi-objective functions return them: values in order."""
    return (1 - x) ** 2, 1 + 10 * x
