"""CIFAR-10 on disk and in memory: find or fetch the real set, or generate a synthetic one.

Both kinds live in the real on-disk layout (``cifar-10-batches-py/`` pickles) and are read by
torchvision's ``CIFAR10``, so the loading path that serves real data is the one tests exercise.
In memory a split is a few normalised float tensors, cached per process: with Ray's actor
reuse, later trials in the same worker get their data for free. Across processes, the training and
validation tensors are one file per node, mapped by every process that reads them (node_cache):
trials running at once on a node share one copy of the data instead of holding one each.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import multiprocessing.reduction
import os
import pickle
import re
import urllib.request
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from filelock import FileLock

from tuning import atomic, synthetic
from tuning.cli import TuningError
from tuning.contract import DataSource  # noqa: F401 (tuning.data.DataSource, as before)

log = logging.getLogger(__name__)

# Channel statistics of the CIFAR-10 training set; synthetic data is drawn to roughly match.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
# 5,000 of the 50,000 training images, the usual 45k/5k split.
VAL_FRACTION = 0.1
# The split must not change with the run's seed, or validation losses of two runs differ in meaning.
SPLIT_SEED = 20210820
DOWNLOAD_PROBE_TIMEOUT_S = 5.0
# Set to 1, nothing is downloaded and nothing is asked of the network: the test suite sets it, so
# it behaves the same with internet access and without; CI and air-gapped machines can too.
NO_DOWNLOAD_ENV = "TUNING_NO_DOWNLOAD"


def _cifar10():
    # torchvision costs 1.7 s to import here; DDP ranks, which get their data from the trial in
    # shared memory, never need it.
    from torchvision.datasets import CIFAR10

    return CIFAR10


class DataError(TuningError):
    """The requested data cannot be had; the message says how to get it."""


@dataclass(frozen=True)
class Split:
    """Normalised float32 NCHW images and int64 labels."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)


def cifar10_problems(data_dir: str | os.PathLike) -> list[str]:
    """What is wrong with the CIFAR-10 files under data_dir, file by file (empty: all good)."""
    from torchvision.datasets.utils import check_integrity

    CIFAR10 = _cifar10()
    folder = Path(data_dir) / CIFAR10.base_folder
    files = CIFAR10.train_list + CIFAR10.test_list + [[CIFAR10.meta["filename"], CIFAR10.meta["md5"]]]
    problems = []
    for name, md5 in files:
        path = folder / name
        if not path.exists():
            problems.append(f"{path} is missing")
        elif not check_integrity(str(path), md5):
            problems.append(f"{path} fails its md5 check (corrupt or partial download)")
    return problems


def has_cifar10(data_dir: str | os.PathLike) -> bool:
    return not cifar10_problems(data_dir)


def _reachable(url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    except Exception as exc:  # DNS, refused, timeout, HTTP error: all mean "no download"
        log.debug("CIFAR-10 download probe failed: %s", exc)
        return False


def downloads_refused() -> bool:
    return os.environ.get(NO_DOWNLOAD_ENV, "").strip() not in ("", "0")


def fetch_cifar10(data_dir: str | os.PathLike, timeout: float = DOWNLOAD_PROBE_TIMEOUT_S) -> bool:
    """Real CIFAR-10 under data_dir, downloading it if the network allows and TUNING_NO_DOWNLOAD
    does not forbid it. Never hangs offline: the server is probed with a short timeout before
    torchvision's (unbounded) download starts."""
    data_dir = Path(data_dir)
    if has_cifar10(data_dir):
        return True
    if downloads_refused():
        log.info("CIFAR-10 is not under %s and %s=1 forbids downloading it", data_dir, NO_DOWNLOAD_ENV)
        return False
    if not _reachable(_cifar10().url, timeout):
        return False
    data_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(data_dir / ".cifar10.lock")):  # parallel trials must not download twice
        _cifar10()(str(data_dir), train=True, download=True)
    return has_cifar10(data_dir)


def prepare(kind: str, data_dir: str | os.PathLike, *, seed: int = 0, synthetic_train: int = 50_000,
            synthetic_test: int = 10_000) -> DataSource:
    """Resolve --data {auto,cifar10,synthetic} to a DataSource whose files exist."""
    data_dir = Path(data_dir).absolute()
    if kind in ("auto", "cifar10"):
        problems = cifar10_problems(data_dir)
        if (data_dir / _cifar10().base_folder).exists() and problems:  # there, but damaged: never fall back quietly
            raise DataError(f"{problems[0]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}: "
                            "delete it and copy or download CIFAR-10 again (see README)")
        if fetch_cifar10(data_dir):
            return DataSource("cifar10", str(data_dir))
        if kind == "cifar10":
            why = f"downloads are off ({NO_DOWNLOAD_ENV}=1)" if downloads_refused() else "it cannot be downloaded"
            raise DataError(
                f"CIFAR-10 not found under {data_dir}/cifar-10-batches-py and {why}: "
                f"copy cifar-10-python.tar.gz there and unpack it (see README), or use --data synthetic")
    elif kind != "synthetic":
        raise DataError(f"unknown data kind {kind!r}: use auto, cifar10 or synthetic")
    root = synthetic_root(data_dir, seed=seed, n_train=synthetic_train, n_test=synthetic_test)
    try:
        ensure_synthetic(root, seed=seed, n_train=synthetic_train, n_test=synthetic_test)
    except OSError as exc:
        raise DataError(f"cannot write synthetic data under {data_dir} ({exc.strerror or exc}): "
                        "choose a writable --data-dir") from None
    return DataSource("synthetic", str(root))


# ---------------------------------------------------------------- synthetic data

def synthetic_root(data_dir: str | os.PathLike, *, seed: int, n_train: int, n_test: int) -> Path:
    """Where prepare() writes synthetic data. The generator's version is part of the name, so a
    folder written by an older generator is never read as this one's data."""
    return Path(data_dir) / "synthetic" / f"v{synthetic.VERSION}-seed{seed}-train{n_train}-test{n_test}"


_SYNTHETIC_NAME = re.compile(r"v(\d+)-seed(\d+)-train(\d+)-test(\d+)")


def _write_batch(path: Path, data: np.ndarray, labels: np.ndarray, name: str) -> str:
    entry = {"batch_label": name, "labels": labels.tolist(), "data": data.reshape(len(data), -1),
             "filenames": [f"synthetic_{i:06d}.png" for i in range(len(data))]}

    def dump(p: Path) -> None:
        with open(p, "wb") as f:
            pickle.dump(entry, f, protocol=2)

    atomic.write_atomically(path, dump)
    return hashlib.md5(path.read_bytes()).hexdigest()


def _synthetic_version(manifest: Path) -> int | None:
    try:
        return json.loads(manifest.read_text()).get("version", 1)  # version 1 wrote none
    except (OSError, ValueError):
        return None


def ensure_synthetic(root: str | os.PathLike, *, seed: int, n_train: int, n_test: int) -> None:
    """Write a deterministic synthetic CIFAR-10 under root/cifar-10-batches-py, once. Files that a
    different generator version wrote are replaced."""
    root = Path(root)
    folder = root / _cifar10().base_folder
    manifest = root / "synthetic.json"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".generate.lock")):  # several trials or runs may ask at once
        found = _synthetic_version(manifest) if manifest.exists() else None
        if found == synthetic.VERSION:
            return
        log.warning("generating synthetic CIFAR-10 v%d (%d train, %d test, seed %d) in %s%s",
                    synthetic.VERSION, n_train, n_test, seed, folder,
                    f", replacing version {found}" if found is not None else "")
        manifest.unlink(missing_ok=True)  # until the new files are complete, none is valid
        rng = np.random.default_rng(seed)
        templates, glyphs = synthetic.templates(rng), synthetic.glyphs()
        md5s, wrong = {}, 0
        sizes = [n_train // 5 + (1 if i < n_train % 5 else 0) for i in range(5)]
        names = [(f"data_batch_{i}", f"training batch {i} of 5") for i in range(1, 6)]
        for (name, label), size in zip(names + [("test_batch", "testing batch 1 of 1")], sizes + [n_test]):
            data, labels, clean = synthetic.images(rng, templates, size, glyphs)
            md5s[name] = _write_batch(folder / name, data, labels, label)
            wrong += int((labels != clean).sum())
        meta = folder / "batches.meta"
        with open(meta, "wb") as f:
            pickle.dump({"label_names": CLASSES, "num_cases_per_batch": sizes[0], "num_vis": 3072}, f)
        md5s["batches.meta"] = hashlib.md5(meta.read_bytes()).hexdigest()
        text = json.dumps({"version": synthetic.VERSION, "seed": seed, "n_train": n_train, "n_test": n_test,
                           "label_noise": synthetic.LABEL_NOISE, "wrong_labels": wrong, "md5": md5s}, indent=1)
        # The manifest is written last: its presence means "complete".
        atomic.write_atomically(manifest, lambda p: p.write_text(text))


def _regenerate_if_missing(source: DataSource) -> None:
    root = Path(source.root)
    spec = _SYNTHETIC_NAME.fullmatch(root.name)
    if (source.kind == "synthetic" and spec and int(spec[1]) == synthetic.VERSION
            and not (root / "synthetic.json").exists()):
        # Another node of a cluster, without the driver's disk: generated from the seed, the
        # files are the same bytes as the driver's.
        ensure_synthetic(root, seed=int(spec[2]), n_train=int(spec[3]), n_test=int(spec[4]))


def _dataset(source: DataSource, train: bool):
    CIFAR10 = _cifar10()
    if source.kind == "cifar10":
        return CIFAR10(source.root, train=train, download=False)
    _regenerate_if_missing(source)
    # torchvision checks every file against the real CIFAR-10's md5 sums, which synthetic files
    # cannot match. Rather than skip the check, point it at the sums recorded when they were written.
    md5 = json.loads((Path(source.root) / "synthetic.json").read_text())["md5"]
    cls = type("SyntheticCIFAR10", (CIFAR10,), {
        "train_list": [[f"data_batch_{i}", md5[f"data_batch_{i}"]] for i in range(1, 6)],
        "test_list": [["test_batch", md5["test_batch"]]],
        "meta": {**CIFAR10.meta, "md5": md5["batches.meta"]},
    })
    try:
        return cls(source.root, train=train, download=False)
    except RuntimeError as exc:
        raise DataError(f"synthetic data under {source.root} is corrupted ({exc}): delete that folder "
                        "and it is generated again") from exc


def _to_tensors(ds, index: np.ndarray | None = None) -> Split:
    data = ds.data if index is None else ds.data[index]
    y = np.asarray(ds.targets) if index is None else np.asarray(ds.targets)[index]
    x = torch.from_numpy(np.ascontiguousarray(data)).permute(0, 3, 1, 2).float().div_(255)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return Split(x.sub_(mean).div_(std).contiguous(), torch.from_numpy(y).long())


def read_train_val(source: DataSource, max_train: int | None = None, max_val: int | None = None,
                   shared: bool | None = None) -> tuple[Split, Split]:
    """The fixed, seeded train/validation split of the 50k training images, read afresh (load_train_val
    is the same, cached per process: what a trial calls). max_train/max_val take a prefix of each part (smoke runs), keeping the split itself fixed.

    shared (default: on, unless TUNING_SHARED_DATA=0): the images are mapped from the node's cache
    file (node_cache), written by the first process that needs it; every process on the node then
    reads the same pages. Where that file cannot be written or mapped (read-only data dir, disk
    full), the process decodes its own copy, as with shared=False, after one warning."""
    if shared is None:
        shared = sharing_on()
    if not shared:
        return _decode_train_val(source, max_train, max_val)
    return _shared_train_val(source, max_train, max_val)


# A trial reuses its process's split: a reused actor's next trial, and every epoch, skip the read.
load_train_val = functools.lru_cache(maxsize=2)(read_train_val)


def _decode_train_val(source: DataSource, max_train: int | None, max_val: int | None) -> tuple[Split, Split]:
    ds = _dataset(source, train=True)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(ds.data))
    n_val = int(round(len(order) * VAL_FRACTION))
    val_idx, train_idx = order[:n_val], order[n_val:]
    train_idx, val_idx = train_idx[:max_train], val_idx[:max_val]
    log.info("loaded %s: %d train, %d validation images", source.kind, len(train_idx), len(val_idx))
    return _to_tensors(ds, np.sort(train_idx)), _to_tensors(ds, np.sort(val_idx))


@functools.lru_cache(maxsize=1)
def load_test(source: DataSource, max_test: int | None = None) -> Split:
    ds = _dataset(source, train=False)
    return _to_tensors(ds, None if max_test is None else np.arange(min(max_test, len(ds.data))))


# ---------------------------------------------------------------- one copy per node
#
# Why a mapped file: a trial is a Ray actor process, and with N trials at once each decoded its own
# float32 split (553 MB for the 45,000 training images). Written once per node beside the data and
# mapped by every process, the pages sit once in the page cache whoever reads them: Tune trials,
# DDP ranks (tuning.distributed: they map the file too, rather than copying the split into shared
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


def _shared_train_val(source: DataSource, max_train: int | None, max_val: int | None) -> tuple[Split, Split]:
    _regenerate_if_missing(source)
    try:
        path = node_cache(source, max_train, max_val)
    except (OSError, KeyError, ValueError):  # missing or damaged files: decoding raises the DataError that says so
        return _decode_train_val(source, max_train, max_val)
    decoded, decoding = None, False
    try:
        found = _read_cache(path)
        if found is None:
            path.parent.mkdir(exist_ok=True)
            with FileLock(str(path.parent / f"{_prefix(max_train, max_val)}.lock")):
                found = _read_cache(path)  # the others wait for the one that decodes, then map its file
                if found is None:
                    decoding = True
                    decoded = _decode_train_val(source, max_train, max_val)
                    decoding = False
                    _write_cache(path, *decoded)
                    _remove_stale(path)
                    found = _read_cache(path)
            if found is None:
                raise OSError(f"{path} unreadable just after writing it")
    except (OSError, RuntimeError) as exc:  # RuntimeError: torch failing to map the file
        if decoding:  # the data's own error (torchvision raises RuntimeError for bad files): not ours to hide
            raise
        return _unshared(path, exc, decoded or _decode_train_val(source, max_train, max_val))
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


# A Split handed to a spawned process (tuning.distributed's ranks, through multiprocessing's
# pickler) maps the node's file there too. PyTorch's own sharing of a tensor cannot pass a
# from_file mapping (it fails with EBADF: the mapping keeps no descriptor to send), and would
# otherwise copy the split into shared memory once per trial. Plain pickle (Ray) is unaffected.
multiprocessing.reduction.ForkingPickler.register(Split, _reduce_split)
