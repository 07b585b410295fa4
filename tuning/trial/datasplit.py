"""The training/validation split a CIFAR trial holds: how it is cut and normalised, its tensors, and
one copy of them per node (a mapped file) that every process on the node shares. tuning.trial.data
decodes the images; this module keeps what they decode to.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing.reduction
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import torch
from filelock import FileLock

from tuning import atomic
from tuning.contract import DataError, DataSource

log = logging.getLogger(__name__)

# Channel statistics of the CIFAR-10 training set; synthetic data is drawn to roughly match.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
# 5,000 of the 50,000 training images, the usual 45k/5k split.
VAL_FRACTION = 0.1
# The split must not change with the run's seed, or validation losses of two runs differ in meaning.
SPLIT_SEED = 20210820


@dataclass(frozen=True)
class Split:
    """Normalised float32 NCHW images and int64 labels."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)


# ---------------------------------------------------------------- one copy per node
#
# Why a mapped file: a trial is a Ray actor process, and with N trials at once each decoded its own
# float32 split (553 MB for the 45,000 training images). Written once per node beside the data and
# mapped by every process, the pages sit once in the page cache whoever reads them: Tune trials,
# DDP ranks (tuning.trial.distributed: they map the file too, rather than copying the split into shared
# memory per trial), tuning.bench.calibration's workers; and a later run on the node skips the decoding.
# Ray's object store (tune.with_parameters) would share it within one Ray job only, not with the
# DDP ranks a trial spawns (they would get a copy in shared memory per trial), and would count it
# against the store's fixed size; it also needs the backend to pass it, where this needs nothing.
#
# The mapping is torch.from_file(shared=False): MAP_PRIVATE, copy-on-write. Pages nobody writes
# are the page cache's, one copy for all processes; a stray in-place write would give the writer
# a private copy of that page and never reach the file or another trial. (shared=True maps the
# file writable for everyone: one such write would change every trial's data. np.load's
# mmap_mode="r" is read-only, and torch.from_numpy warns on it and crashes the process on a write.)
# The trainer only reads the split: batches are gathered by index (a copy of the batch) and
# augmented into new tensors, so it never writes (tests/test_data_shared.py checks the mapping
# holds no private page after an epoch).

SHARED_ENV = "TUNING_SHARED_DATA"  # 0: every process decodes its own copy (as before; tuning.bench compares)
CACHE_DIR = ".tensors"  # under the source's root, beside cifar-10-batches-py/
_FORMAT = 1  # the cache file's layout; part of its name, so a file of another layout is never read
_HEADER = 16  # float32 values before the images: format, n_train, n_val, zeros (64 bytes: aligned images)
_PIXELS = 3 * 32 * 32
_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["batches.meta"]  # what the training split is read from
_FOLDER = "cifar-10-batches-py"  # torchvision's CIFAR10.base_folder, without importing torchvision (1.7 s)


def sharing_on() -> bool:
    return os.environ.get(SHARED_ENV, "").strip() != "0"


def node_cache(source: DataSource, max_train: int | None = None, max_val: int | None = None) -> Path:
    """The node's cache file of this split: `<root>/.tensors/train{N}-val{M}-<identity>.f32`. The
    identity hashes what the tensors were decoded from (each file's size and modification time; the
    md5 sums the generator recorded, for synthetic data) and how (the split and normalisation
    constants, the layout): data written again, or changed code, makes another name, never a
    stale read. OSError when the files are not there (the decoding path says what is wrong)."""
    root = Path(source.root)
    files = {name: [(st := (root / _FOLDER / name).stat()).st_size, st.st_mtime_ns] for name in _FILES}
    identity = {"kind": source.kind, "files": files, "format": _FORMAT, "mean": MEAN, "std": STD,
                "val_fraction": VAL_FRACTION, "split_seed": SPLIT_SEED}
    if source.kind == "synthetic":
        manifest = json.loads((root / "synthetic.json").read_text())
        identity["synthetic"] = {"version": manifest.get("version"), "md5": manifest["md5"]}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return root / CACHE_DIR / f"{_prefix(max_train, max_val)}-{digest}.f32"


def _prefix(max_train: int | None, max_val: int | None) -> str:
    return f"train{'all' if max_train is None else max_train}-val{'all' if max_val is None else max_val}"


def shared_train_val(source: DataSource, max_train: int | None, max_val: int | None,
                     decode: Callable[[], tuple[Split, Split]]) -> tuple[Split, Split]:
    """The split mapped from the node's cache file, which the first process to need it writes with
    `decode()` (tuning.trial.data's decoding); that process's own copy where the file cannot be had."""
    try:
        path = node_cache(source, max_train, max_val)
    except (OSError, KeyError, ValueError):  # missing or damaged files: decoding raises the DataError that says so
        return decode()
    decoded, decoding = None, False
    try:
        found = _read_cache(path)
        if found is None:
            path.parent.mkdir(exist_ok=True)
            with FileLock(str(path.parent / f"{_prefix(max_train, max_val)}.lock")):
                found = _read_cache(path)  # the others wait for the one that decodes, then map its file
                if found is None:
                    decoding = True
                    decoded = decode()
                    decoding = False
                    _write_cache(path, *decoded)
                    _remove_stale(path)
                    found = _read_cache(path)
            if found is None:
                raise OSError(f"{path} unreadable just after writing it")
    except (OSError, RuntimeError) as exc:  # RuntimeError: torch failing to map the file
        if decoding:  # the data's own error (torchvision raises RuntimeError for bad files): not ours to hide
            raise
        return _unshared(path, exc, decoded or decode())
    log.info("mapped %s: %d train, %d validation images from %s", source.kind, len(found[0]), len(found[1]), path)
    return found


def _unshared(path: Path, why, splits: tuple[Split, Split]) -> tuple[Split, Split]:
    """The fallback: this process's own copy, with one warning. Never a failed trial."""
    log.warning("data not shared between processes: cannot write or map %s (%s); this process keeps its own "
                "copy", path, getattr(why, "strerror", None) or why)
    return splits


def _write_cache(path: Path, train: Split, val: Split) -> None:
    head = np.zeros(_HEADER, dtype=np.float32)
    head[:3] = (_FORMAT, len(train), len(val))

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            # Labels 0-9 are exact in float32: one file of one dtype, mapped by one call.
            for part in (head, train.x.numpy(), val.x.numpy(), train.y.numpy().astype(np.float32),
                         val.y.numpy().astype(np.float32)):
                part.tofile(f)
            f.flush()
            os.fsync(f.fileno())  # the name must never hold a file a crash left unwritten

    atomic.write_atomically(path, write)
    log.info("wrote the node's copy of the split to %s (%.0f MB)", path, path.stat().st_size / 2**20)


def _remove_stale(path: Path) -> None:
    """Cache files of the same sizes made from data since replaced: they would only take disk
    space. Processes still mapping one keep their pages until they let go."""
    for old in path.parent.glob(f"{path.name.rsplit('-', 1)[0]}-*.f32"):
        if old != path:
            old.unlink(missing_ok=True)


def _read_cache(path: Path) -> tuple[Split, Split] | None:
    """The mapped split, or None where the file is not there or is not a whole cache file."""
    try:
        size = path.stat().st_size
        head = np.fromfile(path, dtype=np.float32, count=_HEADER)
    except FileNotFoundError:
        return None
    n_train, n_val = (int(v) for v in head[1:3]) if len(head) == _HEADER else (0, 0)
    if len(head) < _HEADER or head[0] != _FORMAT or size != 4 * (_HEADER + (n_train + n_val) * (_PIXELS + 1)):
        log.warning("%s is not a whole cache file: writing it again", path)
        return None
    flat = _mapped(path)
    x_end = _HEADER + (n_train + n_val) * _PIXELS
    xs = flat[_HEADER:x_end].view(n_train + n_val, 3, 32, 32)
    ys = flat[x_end:].long()  # 360 KB for the full set: each process's own
    return Split(xs[:n_train], ys[:n_train]), Split(xs[n_train:], ys[n_train:])


# Every mapping this process holds, by file: a file is mapped once however many splits or ranks'
# arguments refer to it, and unmapped when the last tensor viewing it is gone.
_MAPS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _mapped(path: Path) -> torch.Tensor:
    st = path.stat()
    key = (str(path), st.st_ino, st.st_size)
    flat = _MAPS.get(key)
    if flat is None:
        flat = torch.from_file(str(path), shared=False, size=st.st_size // 4, dtype=torch.float32)
        _MAPS[key] = flat
    return flat


class _FileView(NamedTuple):
    """A tensor viewing a mapped cache file, as a DDP rank gets it: where to map, and which part."""
    path: str
    nbytes: int
    offset: int
    shape: tuple
    stride: tuple


def _file_view(t: torch.Tensor) -> _FileView | torch.Tensor:
    ptr = t.untyped_storage().data_ptr()
    for (path, _, nbytes), flat in list(_MAPS.items()):
        if t.device.type == "cpu" and flat.untyped_storage().data_ptr() == ptr:
            return _FileView(path, nbytes, t.storage_offset(), tuple(t.shape), t.stride())
    return t


def _from_file_view(v: _FileView | torch.Tensor) -> torch.Tensor:
    if not isinstance(v, _FileView):
        return v
    flat = _mapped(Path(v.path))
    if flat.untyped_storage().nbytes() != v.nbytes:
        raise DataError(f"{v.path} changed while a run was using it: run again")
    return torch.as_strided(flat, v.shape, v.stride, v.offset)


def _reduce_split(split: Split):
    return _rebuild_split, (_file_view(split.x), _file_view(split.y))


def _rebuild_split(x, y) -> Split:
    return Split(_from_file_view(x), _from_file_view(y))


# A Split handed to a spawned process (tuning.trial.distributed's ranks, through multiprocessing's
# pickler) maps the node's file there too. PyTorch's own sharing of a tensor cannot pass a
# from_file mapping (it fails with EBADF: the mapping keeps no descriptor to send), and would
# otherwise copy the split into shared memory once per trial. Plain pickle (Ray) is unaffected.
multiprocessing.reduction.ForkingPickler.register(Split, _reduce_split)
