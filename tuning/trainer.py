"""The CIFAR-10 trainer: a plain function of keyword hyperparameters. It knows nothing about Ray.

Shape after the Ray/PyTorch CIFAR tutorial's ``train_cifar(config, data_dir)``, with airbench's
data path: the whole split is one tensor and augmentation (translate, flip) runs per batch on
tensors, not per sample through PIL. Whoever drives it gets a callback per epoch with the metrics
and the state to checkpoint, and hands a loaded checkpoint back in to continue.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tuning.data import Split

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "state.pt"
# BatchNorm running statistics follow training faster than PyTorch's default 0.1 (airbench uses
# 0.4): with the default, validation after a short first epoch used stale statistics and every
# trial looked alike at ASHA's first rung.
BN_MOMENTUM = 0.4
EVAL_BATCH = 256  # larger batches ran slower on CPU here (cache); a GPU does not care much


def make_model(width: int = 16, num_classes: int = 10) -> nn.Module:
    """A small VGG-style net (airbench's layout, narrower): fast enough to tune on CPUs."""

    def conv_bn(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout, momentum=BN_MOMENTUM), nn.GELU()]

    def block(cin: int, cout: int) -> nn.Sequential:
        # Pool straight after the first conv, as airbench does: the second conv runs at a
        # quarter of the pixels, which halves the compute for little accuracy.
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.MaxPool2d(2),
                             nn.BatchNorm2d(cout, momentum=BN_MOMENTUM), nn.GELU(), *conv_bn(cout, cout))

    w = width
    return nn.Sequential(
        *conv_bn(3, w), block(w, 2 * w), block(2 * w, 4 * w), block(4 * w, 4 * w),
        nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(4 * w, num_classes),
    )


def check_input(x: torch.Tensor) -> None:
    if x.dim() != 4 or tuple(x.shape[1:]) != (3, 32, 32):
        raise ValueError(f"the CIFAR model expects images of shape (N, 3, 32, 32), got {tuple(x.shape)}")


def augment(x: torch.Tensor, generator: torch.Generator, pad: int = 2) -> torch.Tensor:
    """Random translation by up to `pad` pixels and horizontal flip, batched on tensors."""
    n = x.shape[0]
    flip = (torch.rand(n, generator=generator) < 0.5).to(x.device)
    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
    padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    shifts = torch.randint(0, 2 * pad + 1, (n, 2), generator=generator)
    out = torch.empty_like(x)
    for dy in range(2 * pad + 1):  # one slice per offset pair, not one per image
        for dx in range(2 * pad + 1):
            sel = ((shifts[:, 0] == dy) & (shifts[:, 1] == dx)).nonzero().squeeze(1)
            if len(sel):
                out[sel] = padded[sel, :, dy:dy + 32, dx:dx + 32]
    return out


def _to_device(x: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    # channels_last measured 30% faster for this net on CPU, and is what cuDNN prefers too.
    return x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)


@torch.no_grad()
def evaluate(model: nn.Module, split: Split, device: torch.device | str) -> dict[str, float]:
    """Mean cross-entropy and accuracy over the whole split, as Python floats."""
    model.eval()
    total_loss, correct = 0.0, 0
    for i in range(0, len(split), EVAL_BATCH):
        x = _to_device(split.x[i:i + EVAL_BATCH], device)
        y = split.y[i:i + EVAL_BATCH].to(device, non_blocking=True)
        logits = model(x)
        total_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
    return {"loss": total_loss / len(split), "accuracy": correct / len(split)}


def write_checkpoint(state: dict, directory: str | os.PathLike) -> Path:
    """Atomically: a reader never sees a half-written file under the final name."""
    path = Path(directory) / CHECKPOINT_FILE
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def read_checkpoint(directory: str | os.PathLike) -> dict:
    return torch.load(Path(directory) / CHECKPOINT_FILE, map_location="cpu", weights_only=True)


EpochCallback = Callable[[dict, dict], None]


def train_cifar(*, lr: float, batch_size: int, epochs: int, train: Split, val: Split,
                weight_decay: float = 5e-4, width: int = 16, seed: int = 0,
                device: str | torch.device = "cpu", state: dict | None = None,
                on_epoch: EpochCallback | None = None) -> dict[str, float]:
    """Train for `epochs` epochs in all (a restored `state` counts its own), evaluating on `val`
    after each. `on_epoch(metrics, state)` receives Python floats and the checkpointable state.
    Returns the last epoch's metrics."""
    device = torch.device(device)
    torch.manual_seed(seed)
    model = make_model(width).to(device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    start = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["epoch"])
        log.info("resuming at epoch %d of %d", start + 1, epochs)
    check_input(train.x[:1])
    if device.type == "cuda":  # keep the whole split on the GPU, as airbench does: no per-batch copies
        train, val = Split(train.x.to(device), train.y.to(device)), Split(val.x.to(device), val.y.to(device))
    metrics: dict[str, float] = {}
    for epoch in range(start, epochs):
        # Shuffle order and augmentation derive from (seed, epoch) alone, so a run resumed from a
        # checkpoint sees the same batches an uninterrupted one would.
        gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
        t0 = time.perf_counter()
        model.train()
        order = torch.randperm(len(train), generator=gen).to(train.x.device)
        loss_sum, seen = 0.0, 0
        for i in range(0, len(order) - batch_size + 1, batch_size):  # drop the ragged last batch
            idx = order[i:i + batch_size]
            x = _to_device(augment(train.x[idx], gen), device)
            y = train.y[idx].to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)  # .item(): never keep the graph alive for logging
            seen += len(idx)
        t1 = time.perf_counter()
        metrics = evaluate(model, val, device)
        t2 = time.perf_counter()
        metrics.update(epoch=epoch + 1, train_loss=loss_sum / max(seen, 1),
                       train_time_s=t1 - t0, eval_time_s=t2 - t1,
                       images_per_s=seen / (t1 - t0) if t1 > t0 else math.nan)
        log.debug("epoch %d: %s", epoch + 1, metrics)
        if on_epoch is not None:
            on_epoch(metrics, {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch + 1})
    return metrics


def test_accuracy(state: dict, test: Split, *, width: int = 16, device: str = "cpu") -> dict[str, float]:
    """Evaluate a checkpointed model on the held-out test images."""
    model = make_model(width).to(device, memory_format=torch.channels_last)
    model.load_state_dict(state["model"])
    return evaluate(model, test, device)
