"""Trainers that misbehave on purpose, for the reliability tests. A space names one as
trainer="faulty:<function>"; they follow the trainer contract of tuning.trial.trainer.train_cifar
(keyword hyperparameters, epochs, state, on_epoch) without the data."""

import math
import os
import signal
import time
from pathlib import Path


def _train(*, lr, epochs, state=None, on_epoch=None, seed=0, loss_at=None, sleep_s=0.0, gate=None, **_):
    """gate: a file; while it exists, no epoch starts (a test holds a run mid-way with it), and the
    file `<gate>.held-<lr>` says this trainer waits there, so the test knows which trial it holds."""
    start = int(state["epoch"]) if state else 0
    metrics = {}
    held = Path(f"{gate}.held-{lr!r}") if gate else None
    for epoch in range(start, epochs):
        while gate and Path(gate).exists():
            held.touch()
            time.sleep(0.05)
        if held:
            held.unlink(missing_ok=True)
        time.sleep(sleep_s)
        loss = loss_at(epoch) if loss_at else 1.0 / (1 + epoch) + lr
        metrics = {"loss": loss, "epoch": epoch + 1}
        if on_epoch:
            on_epoch(metrics, {"epoch": epoch + 1})
    return metrics


def steady(*, lr, epochs, sleep_s=0.0, **kw):
    """Well behaved: loss falls with every epoch."""
    return _train(lr=lr, epochs=epochs, sleep_s=sleep_s, **kw)


def flaky(*, lr, epochs, marker_dir, **kw):
    """Raises the first time each configuration runs, then trains normally."""
    marker = Path(marker_dir) / f"attempted-{lr!r}"
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        raise RuntimeError(f"transient failure for lr={lr!r}")
    return _train(lr=lr, epochs=epochs, **kw)


def killed_once(*, lr, epochs, marker_dir, on_epoch, **kw):
    """The first time, its process (the trial's ray:: actor) is SIGKILLed a second into epoch 3,
    as the OOM killer kills it; the file `killed` in marker_dir holds that process's pid."""
    marker = Path(marker_dir) / "killed"

    def report(metrics, state):
        on_epoch(metrics, state)
        if metrics["epoch"] == 2 and not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGKILL)

    return _train(lr=lr, epochs=epochs, on_epoch=report, **kw)


def broken_when_large(*, lr, epochs, **kw):
    """Always raises for lr above 0.5: one bad corner of the space, the rest fine."""
    if lr > 0.5:
        raise ValueError(f"lr={lr:g} breaks this model")
    return _train(lr=lr, epochs=epochs, **kw)


def diverges_when_large(*, lr, epochs, **kw):
    """Loss becomes NaN at epoch 2 for lr above 0.5, as a too-large learning rate does."""
    return _train(lr=lr, epochs=epochs, loss_at=lambda e: math.nan if (lr > 0.5 and e >= 1) else 1.0 / (1 + e), **kw)


def out_of_memory(*, lr, epochs, **kw):
    import torch

    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def misbehave(*, mode, lr=0.1, epochs, marker_dir=".", **kw):
    """One trainer per way a trial can go wrong, chosen by the searched `mode`, so one run
    exercises them all."""
    behaviour = {"steady": steady, "flaky": flaky, "killed": killed_once,
                 "broken": lambda **k: broken_when_large(**{**k, "lr": 0.9}),
                 "diverges": lambda **k: diverges_when_large(**{**k, "lr": 0.9}), "oom": out_of_memory}[mode]
    return behaviour(lr=lr, epochs=epochs, marker_dir=marker_dir, **kw)


_KEPT = []


def leaky(*, lr, epochs, state=None, on_epoch=None, mb_per_epoch=40, **kw):
    """Keeps a tensor per epoch alive, as logging `loss` instead of `loss.item()` does."""
    import torch

    start = int(state["epoch"]) if state else 0
    for epoch in range(start, epochs):
        _KEPT.append(torch.ones(mb_per_epoch * 2**18))  # float32: 4 bytes each
        on_epoch({"loss": 1.0 / (1 + epoch) + lr, "epoch": epoch + 1}, {"epoch": epoch + 1})
