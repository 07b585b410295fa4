"""A trial's state on disk and its process's memory, without importing torch.

A trial process that never imports torch starts seconds sooner (torch's import is about two
seconds here, more with several trial processes starting at once), and a user's trainer that
trains a scikit-learn model or a plain function has no use for it. So the checkpoint format
follows the state: a process that has imported torch may hold tensors and saves with torch.save;
one that has not holds none (a tensor cannot exist without its module) and saves with pickle.
"""

from __future__ import annotations

import logging
import os
import pickle
import resource
import sys
from pathlib import Path

import psutil

from tuning import atomic
from tuning.cli import TuningError

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "state.pt"  # torch.save, from a process that had imported torch
PICKLE_FILE = "state.pkl"  # pickle, from one that had not
EPOCH_FILE = "epoch.txt"  # beside the state: the epochs the trial had reported when it was written
LEAK_MIN_MB = 64  # growth below this is allocator noise, not a leak
LEAK_ADVICE = ("a tensor kept alive across steps is the usual cause: log losses with .item(), not the "
               "tensor; evaluate under torch.no_grad(); del large temporaries")


def write_checkpoint(state: dict, directory: str | os.PathLike) -> Path:
    """Atomically: a reader never sees a half-written file under the final name."""
    torch = sys.modules.get("torch")
    if torch is None:
        path = Path(directory) / PICKLE_FILE
        atomic.write_atomically(path, lambda p: Path(p).write_bytes(pickle.dumps(state)))
        return path
    path = Path(directory) / CHECKPOINT_FILE
    atomic.write_atomically(path, lambda p: torch.save(state, p))
    return path


def read_checkpoint(directory: str | os.PathLike) -> dict:
    """A state write_checkpoint wrote. Tensors and plain values load with torch's safe loader; a
    user's trainer may also hand over other objects (a fitted scikit-learn model), which only
    pickle brings back: the file is one this run wrote into its own results dir."""
    pickled = Path(directory) / PICKLE_FILE
    if pickled.exists():
        return pickle.loads(pickled.read_bytes())
    import torch

    path = Path(directory) / CHECKPOINT_FILE
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # what the safe loader raises for a class it does not know
        return torch.load(path, map_location="cpu", weights_only=False)


class CheckpointError(TuningError, FileNotFoundError):
    """No trial state where load_checkpoint was pointed (a FileNotFoundError too, as it was)."""


def load_checkpoint(path: str | os.PathLike) -> dict:
    """The `state` a trial last handed on_epoch, from its checkpoint folder: what
    `result.best.checkpoint` names (tuning.load_checkpoint). A URI (s3://..., from --storage-path)
    is copied here first. Tensors come back on the CPU: move them where you need them."""
    if not isinstance(path, (str, os.PathLike)):
        raise CheckpointError(f"load_checkpoint takes a trial's checkpoint folder, got {path!r}"
                              + (": result.best.checkpoint is None where the trial kept no state (a trainer that "
                                 "returns its metrics, or a benchmark)" if path is None else ""))
    text = os.fspath(path)
    if "://" not in text:
        if not Path(text).exists():  # best_config.json's "checkpoint" is relative to its results folder
            raise CheckpointError(f"no checkpoint folder at {Path(text).absolute()}: give result.best.checkpoint, or "
                                  "best_config.json's checkpoint joined to the results folder that holds it")
        if not (Path(text) / CHECKPOINT_FILE).exists() and not (Path(text) / PICKLE_FILE).exists():
            raise CheckpointError(f"{text} holds no {CHECKPOINT_FILE} or {PICKLE_FILE}: give a trial's checkpoint "
                                  "folder, such as result.best.checkpoint")
        return read_checkpoint(text)
    import tempfile

    import pyarrow.fs

    with tempfile.TemporaryDirectory() as d:
        pyarrow.fs.copy_files(text, d)
        return read_checkpoint(d)


def holds_state(path: str | None) -> bool:
    """Whether a checkpoint folder holds a trainer's state (a URI is taken on trust: asking the
    store costs a round trip); a synthetic benchmark's checkpoints hold Tune's own iteration only."""
    if path is None:
        return False
    return "://" in path or (Path(path) / CHECKPOINT_FILE).exists() or (Path(path) / PICKLE_FILE).exists()


def load_newest(directories: list, recall=None) -> tuple[dict | None, int]:
    """(state, the epochs it holds) from the first of `directories` (newest first) that loads, or,
    when one is truncated or corrupt (a crash mid-write on a non-atomic filesystem, a full disk),
    the one after it, or (None, 0) to start over. Each fallback is logged. `recall(directory)` may
    give the state without reading it (a copy this process kept)."""
    for i, directory in enumerate(map(Path, directories)):
        try:
            state = (recall(directory) if recall else None) or read_checkpoint(directory)
            epochs = _epochs_held(directory, state)
        except Exception as exc:  # any unreadable file means "try the one before"
            log.warning("checkpoint %s is unreadable (%s: %s)", directory, type(exc).__name__, exc)
            continue
        if i:
            log.warning("restored from the previous checkpoint %s instead", directory)
        return state, epochs
    if directories:
        log.warning("no readable checkpoint: the trial starts over from epoch 0")
    return None, 0


def _epochs_held(directory: Path, state) -> int:
    """As written beside the state, or, in a checkpoint written before that file existed, the
    CIFAR trainer's own count."""
    try:
        return int((directory / EPOCH_FILE).read_text())
    except (OSError, ValueError):
        return int(state.get("epoch", 0)) if isinstance(state, dict) else 0


def memory(device=None) -> dict[str, float]:
    """This process's memory now and at its peak (MB), and on CUDA what PyTorch allocated: the
    numbers a GPU troubleshooting checklist watches with GPUtil, as metrics of every epoch."""
    out = {"rss_mb": psutil.Process().memory_info().rss / 2**20,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10}  # KB on Linux
    torch = sys.modules.get("torch")
    if device is not None and torch is not None and torch.device(device).type == "cuda":
        out.update(cuda_max_allocated_mb=torch.cuda.max_memory_allocated(device) / 2**20,
                   cuda_reserved_mb=torch.cuda.memory_reserved(device) / 2**20)
    return out


def memory_growing(rss_mb: list[float]) -> bool:
    """Memory that grows epoch after epoch: from epoch 2 on (epoch 1 fills caches) at least three
    increases in a row, adding up to more than LEAK_MIN_MB and 10% of epoch 2's footprint."""
    if len(rss_mb) < 5:
        return False
    tail = rss_mb[1:]
    rising = all(b > a for a, b in zip(tail[-4:], tail[-3:]))
    return rising and tail[-1] - tail[0] > max(LEAK_MIN_MB, 0.1 * tail[0])
