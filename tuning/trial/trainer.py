"""The CIFAR-10 trainer: a plain function of keyword hyperparameters. It knows nothing about Ray.

Shape after the Ray/PyTorch CIFAR tutorial's ``train_cifar(config, data_dir)``, with airbench's
data path: the whole split is one tensor and augmentation (translate, flip) runs per batch on
tensors, not per sample through PIL. Whoever drives it gets a callback per epoch with the metrics
and the state to checkpoint, and hands a loaded checkpoint back in to continue.

The same function is one rank of a DistributedDataParallel run when called with rank and
world_size inside a process group (tuning.trial.distributed sets that up). ``batch_size`` is the
global batch: each rank takes batch_size / world_size of it, and sampling, augmentation and
BatchNorm statistics are arranged so that a run computes the same thing at any world size.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import statistics
import time
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from tuning.contract import PRECISIONS
from tuning.trial.trialstate import memory
from tuning.trial.data import Split

log = logging.getLogger(__name__)

# BatchNorm running statistics follow training faster than PyTorch's default 0.1 (airbench uses
# 0.4): with the default, validation after a short first epoch used stale statistics and every
# trial looked alike at ASHA's first rung.
BN_MOMENTUM = 0.4
EVAL_BATCH = 256  # larger batches ran slower on CPU here (cache); a GPU does not care much
PAD = 2  # augmentation: random translation by up to 2 pixels, as airbench
# Inference latency (latency_ms): a serving-sized batch of validation images, timed after warm-up
# passes (allocator, cuDNN's algorithm search, CPU caches); the median of the timed repeats, so one
# pass slowed by a neighbour on a shared machine does not move it.
LATENCY_BATCH, LATENCY_WARMUP, LATENCY_REPEATS = 32, 2, 5


def autocast_dtype(precision: str, device: torch.device | str) -> torch.dtype | None:
    """The dtype forward passes run in: bfloat16, or None for plain fp32.

    "auto" is bf16 on a CUDA device that supports it (Ampere and newer: tensor cores at twice
    the fp32 rate, and bf16's fp32-sized exponent needs no loss scaling) and fp32 elsewhere:
    CPUs without native bf16 run this net several times slower in bf16 (make gpu-check's
    cpu_bf16_vs_fp32_speed measures it)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} unknown: use one of {', '.join(PRECISIONS)}")
    device = torch.device(device)
    if precision == "auto":
        # Compute capability 8 (Ampere) is where bf16 gets tensor cores; below it is emulated.
        use = device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8
        return torch.bfloat16 if use else None
    return torch.bfloat16 if precision == "bf16" else None


def autocast(dtype: torch.dtype | None, device: torch.device | str):
    """Forward and loss under autocast to `dtype`; weights, gradients and the optimizer stay fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


class SyncBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm whose training statistics cover the global batch of all ranks.

    torch.nn.SyncBatchNorm does this with CUDA-only kernels; gloo ranks on CPU need it too, or the
    model would normalise each rank's slice of the batch on its own and a 2-rank run would train
    a different function than a 1-process run with the same batch. Outside a process group (or
    in eval mode) this is plain BatchNorm2d. The all_reduce is autograd-aware, so the backward
    pass sums the statistics' gradients across ranks exactly as SyncBatchNorm does; a test checks
    that 2 ranks and 1 process take the same steps."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        # The autograd-aware all_reduce (torch.distributed.nn.functional's is deprecated for it).
        import torch.distributed._functional_collectives as funcol

        def all_reduce(t: torch.Tensor) -> torch.Tensor:
            return funcol.all_reduce(t, "sum", dist.group.WORLD)

        # One all_reduce of per-channel sums and sums of squares (one more in backward), in
        # float64: E[x^2] - E[x]^2 cancels in float32 (1e-5 output errors measured at
        # mean/std = 3). A two-pass version cost twice the collectives for no measurable gain.
        c = x.shape[1]
        f64 = torch.float64
        local = torch.cat([x.sum((0, 2, 3), dtype=f64), (x * x).sum((0, 2, 3), dtype=f64),
                           torch.full((1,), x.numel() / c, dtype=f64, device=x.device)])
        total = all_reduce(local)
        n = total[-1]
        mean64 = total[:c] / n
        # float32 statistics whatever x is: under bf16 autocast the fp32 running buffers and
        # affine weights need them in fp32, and the output goes back to x's dtype.
        var = (total[c:2 * c] / n - mean64 * mean64).clamp_min(0).float()
        mean = mean64.float()
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * n / (n - 1), self.momentum)  # unbiased, as BatchNorm2d
            self.num_batches_tracked.add_(1)
        scale = self.weight * torch.rsqrt(var + self.eps)
        return (x * scale.view(1, c, 1, 1) + (self.bias - mean * scale).view(1, c, 1, 1)).to(x.dtype)


def make_model(width: int = 16, num_classes: int = 10, depth: int = 1) -> nn.Module:
    """A small VGG-style net (airbench's layout, narrower): fast enough to tune on CPUs. `depth`:
    the 3x3 convolutions after each block's pooling (1, airbench's, adds none to its layout)."""
    if depth < 1:
        raise ValueError(f"depth {depth}: a block needs at least one convolution after its pooling")

    def bn(c: int) -> nn.Module:
        return SyncBatchNorm2d(c, momentum=BN_MOMENTUM)

    def conv_bn(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), bn(cout), nn.GELU()]

    def block(cin: int, cout: int) -> nn.Sequential:
        # Pool straight after the first conv, as airbench does: the second conv runs at a
        # quarter of the pixels, which halves the compute for little accuracy.
        extra = [layer for _ in range(depth) for layer in conv_bn(cout, cout)]
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.MaxPool2d(2),
                             bn(cout), nn.GELU(), *extra)

    w = width
    return nn.Sequential(
        *conv_bn(3, w), block(w, 2 * w), block(2 * w, 4 * w), block(4 * w, 4 * w),
        nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(4 * w, num_classes),
    )


def make_optimizer(name: str, params, *, lr: float, weight_decay: float, momentum: float = 0.9,
                   nesterov: bool = True) -> torch.optim.Optimizer:
    """AdamW, or SGD with `momentum` and `nesterov`; AdamW ignores those two, so a space can
    declare them only under SGD and leave them out of AdamW's configs."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":  # Nesterov momentum 0.9 by default: the usual CIFAR recipe (wants lr ~10x AdamW's)
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
    raise ValueError(f"optimizer {name!r} unknown: use 'adamw' or 'sgd'")


def check_input(x: torch.Tensor, split: str = "") -> None:
    if x.dim() != 4 or tuple(x.shape[1:]) != (3, 32, 32):
        where = f" in the {split} split" if split else ""
        raise ValueError(f"the CIFAR model expects images of shape (N, 3, 32, 32), got {tuple(x.shape)}{where}")


def augment(x: torch.Tensor, flip: torch.Tensor, shifts: torch.Tensor, pad: int = PAD) -> torch.Tensor:
    """Flip where `flip`, then translate each image by its `shifts` (in 0..2*pad), on tensors."""
    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
    padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")
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


def _all_sum(values: list[float], world_size: int, device: torch.device) -> list[float]:
    if world_size == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


@torch.no_grad()
def evaluate(model: nn.Module, split: Split, device: torch.device | str, rank: int = 0,
             world_size: int = 1, precision: str = "auto") -> dict[str, float]:
    """Mean cross-entropy and accuracy over the whole split, as Python floats, under the same
    autocast as training. Under DDP each rank takes every world_size-th image and the sums are
    added up: the full split, each image once."""
    dtype = autocast_dtype(precision, device)
    model.eval()
    total_loss, correct = 0.0, 0
    idx = torch.arange(rank, len(split), world_size, device=split.x.device)
    for i in range(0, len(idx), EVAL_BATCH):
        x = _to_device(split.x[idx[i:i + EVAL_BATCH]], device)
        y = split.y[idx[i:i + EVAL_BATCH]].to(device, non_blocking=True)
        with autocast(dtype, device):
            logits = model(x)
            total_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
    total_loss, correct = _all_sum([total_loss, correct], world_size, torch.device(device))
    return {"loss": total_loss / len(split), "accuracy": correct / len(split)}


@torch.no_grad()
def latency_ms(model: nn.Module, x: torch.Tensor, device: torch.device | str, precision: str = "auto") -> float:
    """Inference time per image (ms) of one forward pass of the batch `x`, in eval mode, without
    gradients, under the autocast evaluation uses: the median of LATENCY_REPEATS timed passes after
    LATENCY_WARMUP untimed ones. On CUDA the clock is read only after the device has finished."""
    dtype = autocast_dtype(precision, device)
    cuda = torch.device(device).type == "cuda"
    model.eval()
    x = _to_device(x, device)
    times = []
    for i in range(LATENCY_WARMUP + LATENCY_REPEATS):
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with autocast(dtype, device):
            model(x)
        if cuda:
            torch.cuda.synchronize(device)
        if i >= LATENCY_WARMUP:
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000 / len(x)


EpochCallback = Callable[[dict, dict], None]


def train_cifar(*, lr: float, batch_size: int, epochs: int, train: Split, val: Split,
                weight_decay: float = 5e-4, width: int = 16, depth: int = 1, seed: int = 0, optimizer: str = "adamw",
                momentum: float = 0.9, nesterov: bool = True, label_smoothing: float = 0.0,
                augment: bool = True, device: str | torch.device = "cpu", state: dict | None = None,
                on_epoch: EpochCallback | None = None, rank: int = 0, world_size: int = 1,
                precision: str = "auto", max_steps: int | None = None) -> dict[str, float]:
    """Train for `epochs` epochs in all (a restored `state` counts its own), evaluating on `val`
    after each. `on_epoch(metrics, state)` receives Python floats and the checkpointable state;
    under DDP it is called on rank 0 only. Returns the last epoch's metrics.

    `precision` (PRECISIONS): "bf16" runs forward and loss under bf16 autocast, "fp32" does not,
    "auto" picks bf16 on CUDA. Either way weights, optimizer and checkpoints are fp32.

    `momentum` and `nesterov` are SGD's (make_optimizer). `label_smoothing` applies to the
    training loss only: validation stays plain cross-entropy, so runs that smooth differently
    report comparable losses. `augment=False` trains on the images as they are (no flip, no
    translation). `max_steps` caps the optimizer steps per epoch (memory and speed probes that need
    the whole split loaded but not a whole epoch trained); None trains every full batch.

    Every epoch's metrics hold the model's `num_params` and `latency_ms` (latency_ms()), measured
    once per call, before the first epoch it trains, on the device it trains on: the architecture
    fixes the compute, so each epoch would measure the same thing again at a cost (docs/trainer.md)."""
    device = torch.device(device)
    dtype = autocast_dtype(precision, device)
    if batch_size % world_size:
        raise ValueError(f"batch_size {batch_size} does not split evenly over {world_size} ranks")
    local_batch = batch_size // world_size
    check_input(train.x, "training")
    check_input(val.x, "validation")  # the latency and every evaluation run on it
    model, net, opt, start = _model(width, depth, optimizer, lr=lr, weight_decay=weight_decay, momentum=momentum,
                                    nesterov=nesterov, seed=seed, device=device, state=state, epochs=epochs,
                                    world_size=world_size)
    if device.type == "cuda":  # keep the whole split on the GPU, as airbench does: no per-batch copies
        train, val = Split(train.x.to(device), train.y.to(device)), Split(val.x.to(device), val.y.to(device))
    # The shuffle is the same permutation at every world size (seeded by seed + epoch); each rank
    # takes every world_size-th index, so the ranks' slices of global batch i together are
    # exactly the images a single process would put in batch i.
    sampler = DistributedSampler(range(len(train)), num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed, drop_last=True)
    size = {"num_params": sum(p.numel() for p in model.parameters())}
    if start < epochs and rank == 0:  # the reporting rank; the others wait at their first all-reduce
        size["latency_ms"] = latency_ms(model, val.x[:LATENCY_BATCH], device, precision)
    metrics: dict[str, float] = {}
    for epoch in range(start, epochs):
        order = _epoch_order(sampler, epoch, seed, len(train))
        t0 = time.perf_counter()
        loss_sum, seen = _train_epoch(net, opt, train, order, local_batch=local_batch, device=device, dtype=dtype,
                                      world_size=world_size, label_smoothing=label_smoothing, augmented=augment,
                                      max_steps=max_steps)
        t1 = time.perf_counter()
        if not math.isfinite(loss_sum):  # the summed loss is NaN/inf on every rank alike
            metrics = {"loss": math.nan, "accuracy": math.nan, "diverged": True, "epoch": epoch + 1,
                       "world_size": world_size, **size}
            log.warning("training diverged in epoch %d (lr=%g): stopping", epoch + 1, lr)
            if on_epoch is not None and rank == 0:
                on_epoch(metrics, {})
            return metrics
        metrics = evaluate(model, val, device, rank, world_size, precision)
        t2 = time.perf_counter()
        metrics.update(epoch=epoch + 1, train_loss=loss_sum / max(seen, 1), world_size=world_size,
                       train_time_s=t1 - t0, eval_time_s=t2 - t1,
                       images_per_s=seen / (t1 - t0) if t1 > t0 else math.nan, bf16=dtype is not None,
                       **size, **memory(device))
        log.debug("epoch %d: %s", epoch + 1, metrics)
        if on_epoch is not None and rank == 0:
            on_epoch(metrics, {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch + 1,
                               "depth": depth})
    return metrics


def _model(width: int, depth: int, optimizer: str, *, lr: float, weight_decay: float, momentum: float, nesterov: bool,
           seed: int, device: torch.device, state: dict | None, epochs: int, world_size: int):
    """(model, net, optimizer, first epoch): the seeded model, restored from `state` if given, and
    `net`, the model as training steps it (wrapped in DDP when world_size > 1)."""
    torch.manual_seed(seed)
    model = make_model(width, depth=depth).to(device, memory_format=torch.channels_last)
    opt = make_optimizer(optimizer, model.parameters(), lr=lr, weight_decay=weight_decay, momentum=momentum,
                         nesterov=nesterov)
    start = 0
    if state is not None:  # a checkpoint from any world size: the state is the unwrapped model's
        model.load_state_dict(state["model"])
        # A copy: load_state_dict keeps the given tensors where it can, and under DDP those sit in
        # shared memory, so every rank would step the same momentum buffers.
        opt.load_state_dict(copy.deepcopy(state["optimizer"]))
        start = int(state["epoch"])
        log.info("resuming at epoch %d of %d", start + 1, epochs)
    net = model
    if world_size > 1:
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True)
    return model, net, opt, start


def _epoch_order(sampler: DistributedSampler, epoch: int, seed: int, n: int):
    """(this rank's image indices, every image's flip, every image's shift) for one epoch."""
    sampler.set_epoch(epoch)
    mine = torch.tensor(list(sampler), dtype=torch.long)
    # Augmentation is drawn per image, from (seed, epoch) alone: the same at any world size,
    # and a run resumed from a checkpoint sees the batches an uninterrupted one would.
    gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
    flips = torch.rand(n, generator=gen) < 0.5
    shifts = torch.randint(0, 2 * PAD + 1, (n, 2), generator=gen)
    return mine, flips, shifts


def _train_epoch(net: nn.Module, opt: torch.optim.Optimizer, train: Split, order, *, local_batch: int,
                 device: torch.device, dtype, world_size: int, label_smoothing: float = 0.0,
                 augmented: bool = True, max_steps: int | None = None) -> list[float]:
    """One epoch of steps; [summed (smoothed) training loss, images seen] over all ranks."""
    mine, flips, shifts = order
    net.train()
    loss_sum, seen = 0.0, 0
    starts = range(0, len(mine) - local_batch + 1, local_batch)  # drop the ragged last batch
    for i in starts[:max_steps]:  # every rank takes the same count, so DDP's all-reduces pair up
        idx = mine[i:i + local_batch]
        didx = idx.to(train.x.device)
        x = train.x[didx]
        if augmented:
            x = augment(x, flips[idx].to(train.x.device), shifts[idx])
        x = _to_device(x, device)
        y = train.y[didx].to(device, non_blocking=True)
        with autocast(dtype, device):
            loss = F.cross_entropy(net(x), y, label_smoothing=label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step_loss = loss.item()  # .item(): never keep the graph alive for logging
        loss_sum += step_loss * len(idx)
        seen += len(idx)
        if world_size == 1 and not math.isfinite(step_loss):
            break  # diverged: the rest of the epoch would be NaN too (ranks decide together below)
    return _all_sum([loss_sum, seen], world_size, device)


def evaluate_test(state: dict, test: Split, *, width: int = 16, device: str = "cpu",
                  precision: str = "auto") -> dict[str, float]:
    """Evaluate a checkpointed model on the held-out test images. Its depth is the checkpoint's
    (1 in one written before the trainer had depth)."""
    model = make_model(width, depth=state.get("depth", 1)).to(device, memory_format=torch.channels_last)
    model.load_state_dict(state["model"])
    return evaluate(model, test, device, precision=precision)
