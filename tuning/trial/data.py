"""CIFAR-10 on disk and in memory: find or fetch the real set, or generate a synthetic one.

Both kinds live in the real on-disk layout (``cifar-10-batches-py/`` pickles) and are read by
torchvision's ``CIFAR10``, so the loading path that serves real data is the one tests exercise.
In memory a split is a few normalised float tensors (tuning.trial.datasplit), cached per process: with Ray's
actor reuse, later trials in the same worker get their data for free. Across processes, the
training and validation tensors are one file per node, mapped by every process that reads them
(datasplit.node_cache): trials running at once on a node share one copy of the data.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import pickle
import re
import urllib.request
from pathlib import Path

import numpy as np
import torch
from filelock import FileLock

from tuning import atomic
from tuning.trial import datasplit, synthetic
from tuning.contract import DataError, DataSource
from tuning.trial.datasplit import MEAN, SPLIT_SEED, STD, VAL_FRACTION, Split

log = logging.getLogger(__name__)

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
DOWNLOAD_PROBE_TIMEOUT_S = 5.0
# Set to 1, nothing is downloaded and nothing is asked of the network: the test suite sets it, so
# it behaves the same with internet access and without; CI and air-gapped machines can too.
NO_DOWNLOAD_ENV = "TUNING_NO_DOWNLOAD"


def _cifar10():
    # torchvision costs 1.7 s to import here; DDP ranks, which get their data from the trial in
    # shared memory, never need it.
    from torchvision.datasets import CIFAR10

    return CIFAR10


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


def damaged(problems: list[str]) -> str:
    """CIFAR-10's problems (cifar10_problems) in one line, every file named."""
    missing = [Path(p.split(" is missing")[0]).name for p in problems if p.endswith(" is missing")]
    corrupt = [Path(p.split(" fails its md5")[0]).name for p in problems if " fails its md5" in p]
    folder = Path(problems[0].split(" is missing")[0].split(" fails its md5")[0]).parent  # a path may hold spaces
    parts = ([f"{', '.join(missing)} missing"] if missing else []) + (
        [f"{', '.join(corrupt)} {'fails its' if len(corrupt) == 1 else 'fail their'} md5 check (corrupt or partial)"]
        if corrupt else [])
    return f"CIFAR-10 in {folder} is damaged: {'; '.join(parts)}"


def data_root(data_dir: str | os.PathLike) -> Path:
    """The --data-dir meant: its parent where it is the cifar-10-batches-py folder itself (torchvision
    and every guide name the folder above it), else itself, absolute."""
    data_dir = Path(data_dir).absolute()
    base = _cifar10().base_folder
    names = ("batches.meta", "test_batch", *(f"data_batch_{i}" for i in range(1, 6)))
    if data_dir.name == base and any((data_dir / n).exists() for n in names) and not (data_dir / base).exists():
        log.info("%s is CIFAR-10's own folder: using the one above it, %s, as torchvision does", data_dir,
                 data_dir.parent)
        return data_dir.parent
    return data_dir


def _unpack_tarball(data_dir: Path) -> bool:
    """CIFAR-10's own tarball, copied into data_dir and not unpacked yet: unpacked, once its md5
    is verified (a damaged one stays as it is). Whether it was."""
    from torchvision.datasets.utils import check_integrity, extract_archive

    CIFAR10 = _cifar10()
    tarball = data_dir / CIFAR10.filename
    if not tarball.is_file() or (data_dir / CIFAR10.base_folder).exists():
        return False
    if not check_integrity(str(tarball), CIFAR10.tgz_md5):
        raise DataError(f"{tarball} fails its md5 check (corrupt or partial download): copy or download it again")
    log.info("unpacking %s", tarball)
    with FileLock(str(data_dir / ".cifar10.lock")):
        extract_archive(str(tarball), str(data_dir))
    return True


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
    if _unpack_tarball(data_dir):
        problems = cifar10_problems(data_dir)
        if problems:
            raise DataError(f"{damaged(problems)}, unpacked from {_cifar10().filename}: copy or download it again")
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
    if data_dir.exists() and not data_dir.is_dir():
        raise DataError(f"--data-dir {data_dir} is a file: give the folder that holds (or is to hold) "
                        "cifar-10-batches-py")
    data_dir = data_root(data_dir)  # synthetic too: it was written inside CIFAR-10's own folder
    if kind in ("auto", "cifar10"):
        problems = cifar10_problems(data_dir)
        if (data_dir / _cifar10().base_folder).exists() and problems:  # there, but damaged: never fall back quietly
            raise DataError(f"{damaged(problems)}: copy or download CIFAR-10 again (docs/data.md)")
        if fetch_cifar10(data_dir):
            return DataSource("cifar10", str(data_dir))
        if kind == "cifar10":
            why = f"downloads are off ({NO_DOWNLOAD_ENV}=1)" if downloads_refused() else "it cannot be downloaded"
            raise DataError(
                f"CIFAR-10 not found under {data_dir}/cifar-10-batches-py and {why}: "
                f"copy cifar-10-python.tar.gz into {data_dir} and unpack it there (docs/data.md), or use --data "
                "synthetic")
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
    """The generator version synthetic.json says wrote the files; None where it cannot say (unreadable,
    or not the manifest ensure_synthetic writes: the files are then made again)."""
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("md5"), dict):
        return None
    return data.get("version", 1)  # version 1 wrote none


def ensure_synthetic(root: str | os.PathLike, *, seed: int, n_train: int, n_test: int) -> None:
    """Write a deterministic synthetic CIFAR-10 under root/cifar-10-batches-py, once. Files that a
    different generator version wrote are replaced."""
    root = Path(root)
    folder = root / _cifar10().base_folder
    manifest = root / "synthetic.json"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".generate.lock")):  # several trials or runs may ask at once
        found = _synthetic_version(manifest) if manifest.exists() else None
        broken = _broken_files(root) if found == synthetic.VERSION else []
        if found == synthetic.VERSION and not broken:
            return
        log.warning("generating synthetic CIFAR-10 v%d (%d train, %d test, seed %d) in %s%s",
                    synthetic.VERSION, n_train, n_test, seed, folder,
                    f", replacing {', '.join(broken)} (damaged: they fail their md5 check)" if broken else
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


def _broken_files(root: Path) -> list[str]:
    """The synthetic files under root that are gone or differ from what was written (synthetic.json)."""
    folder = root / _cifar10().base_folder
    md5 = json.loads((root / "synthetic.json").read_text())["md5"]
    return [name for name, digest in md5.items()
            if not (folder / name).is_file() or hashlib.md5((folder / name).read_bytes()).hexdigest() != digest]


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
    file (datasplit.node_cache), written by the first process that needs it; every process on the node then
    reads the same pages. Where that file cannot be written or mapped (read-only data dir, disk
    full), the process decodes its own copy, as with shared=False, after one warning."""
    if shared is None:
        shared = datasplit.sharing_on()
    if not shared:
        return _decode_train_val(source, max_train, max_val)
    _regenerate_if_missing(source)
    return datasplit.shared_train_val(source, max_train, max_val, lambda: _decode_train_val(source, max_train, max_val))


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
