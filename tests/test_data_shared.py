"""One copy of the data per node (tuning/trial/data.py, node_cache): processes on a node map one file,
the values are those of decoding, a cache of other data is never read, and where the file cannot
be written a trial still gets its data."""

import errno
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch

from tuning.trial import data, datasplit, distributed, trainer

# Holds the split, every page of it read, until the test has measured its memory.
CHILD = """
import sys
from tuning.trial import data
train, val = data.load_train_val(data.DataSource("synthetic", sys.argv[1]))
print(float(train.x.sum()) + float(val.x.sum()) + float(train.y.sum()), flush=True)
sys.stdin.read()
"""


def _source(root: Path, seed: int = 0, n: int = 500) -> data.DataSource:
    return data.prepare("synthetic", root, seed=seed, synthetic_train=n, synthetic_test=100)


def _mapping(pid: int, path: Path):
    """This process's memory in the mapping of `path` (psutil's smaps fields, bytes)."""
    return next(m for m in psutil.Process(pid).memory_maps(grouped=True) if m.path == str(path))


def _same(a: tuple, b: tuple) -> bool:
    return all(torch.equal(s.x, t.x) and torch.equal(s.y, t.y) for s, t in zip(a, b))


@pytest.mark.timeout(180)  # two interpreters importing torch: seconds alone, a minute on a loaded machine
def test_two_processes_loading_a_split_hold_one_copy_between_them(tmp_path):
    src = _source(tmp_path, n=3000)  # 35 MB as float32: far above page-granular noise
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, src.root], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        sums = [p.stdout.readline() for p in procs]  # both raced to the empty cache: one wrote, one waited
        assert all(sums) and sums[0] == sums[1]
        path = datasplit.node_cache(src)
        size = path.stat().st_size
        maps = [_mapping(p.pid, path) for p in procs]
        assert all(m.rss > 0.95 * size for m in maps)  # each reads all of it...
        assert 0.95 * size < sum(m.pss for m in maps) < 1.05 * size  # ...and between them they hold one copy
        assert sum(m.private_clean + m.private_dirty for m in maps) < 0.05 * size  # USS: nothing of their own
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=30)


def test_mapped_values_are_bit_identical_to_decoding(tmp_path):
    src = _source(tmp_path)
    decoded = data.read_train_val(src, shared=False)
    written = data.read_train_val(src)  # decodes, writes the file, maps it
    mapped = data.read_train_val(src)  # maps the file another process wrote
    assert _same(written, decoded) and _same(mapped, decoded)
    assert mapped[0].x.untyped_storage().data_ptr() == written[0].x.untyped_storage().data_ptr()  # one mapping
    cache = datasplit.node_cache(src)
    assert cache.exists() and datasplit._file_view(mapped[1].x).path == str(cache)
    small = data.read_train_val(src, 100, 20)  # smaller sizes: their own file, the same prefix
    assert _same(small, data.read_train_val(src, 100, 20, shared=False))
    assert datasplit.node_cache(src, 100, 20) != datasplit.node_cache(src)


def test_a_cache_of_data_since_replaced_is_not_read_and_goes(tmp_path):
    src = _source(tmp_path / "a")
    old = data.read_train_val(src)
    stale = datasplit.node_cache(src)
    # The data is written again with other content under the same name (as a regeneration would).
    other = _source(tmp_path / "b", seed=1)
    shutil.copytree(other.root, src.root, dirs_exist_ok=True)
    new = data.read_train_val(src)
    assert _same(new, data.read_train_val(src, shared=False)) and not _same(new, old)
    assert datasplit.node_cache(src) != stale and not stale.exists()


def test_a_cache_that_cannot_be_written_leaves_each_process_its_own_copy(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="tuning.trial.data")  # whatever an earlier CLI main in this process set
    src = _source(tmp_path)
    decoded = data.read_train_val(src, shared=False)
    caplog.clear()

    def full(path, write):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(data.atomic, "write_atomically", full)
    got = data.read_train_val(src)
    assert _same(got, decoded) and datasplit._file_view(got[0].x) is got[0].x  # not mapped
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and "No space left on device" in caplog.text
    monkeypatch.undo()
    caplog.clear()
    shutil.rmtree(Path(src.root) / datasplit.CACHE_DIR)  # the first attempt left its folder (and lock file)
    (Path(src.root) / datasplit.CACHE_DIR).write_text("")  # no folder can be made there (as on a read-only disk)
    assert _same(data.read_train_val(src), decoded)
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and "Not a directory" in caplog.text


def test_sharing_off_decodes_as_before(tmp_path, monkeypatch):
    src = _source(tmp_path)
    monkeypatch.setenv(datasplit.SHARED_ENV, "0")
    train, _ = data.read_train_val(src)
    assert datasplit._file_view(train.x) is train.x and not (Path(src.root) / datasplit.CACHE_DIR).exists()


def _smaps(path: Path) -> dict:
    """This process's smaps fields (kB) summed over the mappings of `path`."""
    out, inside = {}, False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and len(head) >= 5:  # a mapping's first line: address range, perms, ..., path
            inside = line.rstrip().endswith(str(path))
        elif inside and head[0].endswith(":") and len(head) == 3:
            out[head[0][:-1]] = out.get(head[0][:-1], 0) + int(head[1])
    return out


def test_training_with_augmentation_never_writes_into_the_shared_split(tmp_path):
    src = _source(tmp_path)
    shared = data.read_train_val(src)
    own = data.read_train_val(src, shared=False)
    torch.set_num_threads(1)
    runs = []
    for train, val in (shared, own):
        runs.append(trainer.train_cifar(lr=3e-3, batch_size=64, epochs=1, train=train, val=val, width=8, seed=1,
                                        augment=True))
    same = ("loss", "accuracy", "train_loss")  # same seed, same data: the same metrics, whatever holds it
    assert [runs[0][k] for k in same] == [runs[1][k] for k in same]
    # Copy-on-write: a write into the split would have made a private dirty page of the mapping.
    assert _smaps(datasplit.node_cache(src)).get("Private_Dirty", -1) == 0


def _rank_view(*, split, rank, world_size, device, on_epoch):
    view = datasplit._file_view(split.x)
    return {"file": view.path if view is not split.x else None, "x": float(split.x.double().sum()),
            "y": split.y.tolist()}


@pytest.mark.slow  # spawns DDP ranks; tests/test_ddp.py trains through them in the default suite
@pytest.mark.timeout(180)
def test_ddp_ranks_map_the_file_rather_than_receive_a_copy(tmp_path):
    src = _source(tmp_path)
    train, _ = data.load_train_val(src)
    part = data.Split(train.x[10:50], train.y[10:50])  # a view, as tests/test_ddp.py hands ranks
    got = distributed.run(_rank_view, {"split": part}, world_size=2)
    assert got == {"file": str(datasplit.node_cache(src)), "x": float(part.x.double().sum()), "y": part.y.tolist()}
