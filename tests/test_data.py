import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import CIFAR10

from tuning import data


def test_synthetic_round_trips_through_the_real_loader(synthetic_source):
    folder = Path(synthetic_source.root) / "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["batches.meta", "test_batch"] + [f"data_batch_{i}" for i in range(1, 6)])
    with open(folder / "data_batch_1", "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    assert entry["data"].dtype == np.uint8 and entry["data"].shape[1] == 3072
    train, val = data.load_train_val(synthetic_source)
    assert len(train) + len(val) == 2500 and len(val) == 250
    assert train.x.shape[1:] == (3, 32, 32) and train.x.dtype == torch.float32
    assert set(train.y.unique().tolist()) == set(range(10))
    # Normalised with CIFAR statistics: roughly zero mean, unit spread.
    assert abs(train.x.mean().item()) < 0.5 and 0.5 < train.x.std().item() < 2
    assert len(data.load_test(synthetic_source)) == 500


def test_real_cifar_checksums_reject_synthetic_files(synthetic_source):
    # The synthetic set is in CIFAR-10's layout, but it is not CIFAR-10 and must never pass as it.
    assert not data.has_cifar10(synthetic_source.root)
    with pytest.raises(RuntimeError):
        CIFAR10(synthetic_source.root, train=True, download=False)


def test_synthetic_is_deterministic_for_a_seed(tmp_path):
    a = data.prepare("synthetic", tmp_path / "a", seed=3, synthetic_train=500, synthetic_test=100)
    b = data.prepare("synthetic", tmp_path / "b", seed=3, synthetic_train=500, synthetic_test=100)
    c = data.prepare("synthetic", tmp_path / "c", seed=4, synthetic_train=500, synthetic_test=100)
    batch = "cifar-10-batches-py/data_batch_1"
    assert (Path(a.root) / batch).read_bytes() == (Path(b.root) / batch).read_bytes()
    assert (Path(a.root) / batch).read_bytes() != (Path(c.root) / batch).read_bytes()


def test_corrupted_synthetic_data_is_detected(tmp_path):
    src = data.prepare("synthetic", tmp_path, seed=0, synthetic_train=500, synthetic_test=100)
    path = Path(src.root) / "cifar-10-batches-py" / "data_batch_2"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(data.DataError, match="corrupted"):
        data.load_train_val.__wrapped__(src)


def test_split_is_fixed_and_disjoint(synthetic_source):
    train, val = data.load_train_val.__wrapped__(synthetic_source)
    train2, val2 = data.load_train_val.__wrapped__(synthetic_source)
    assert torch.equal(val.x, val2.x) and torch.equal(train.y, train2.y)
    # No validation image also sits in the training part.
    flat_t = {hash(x.numpy().tobytes()) for x in train.x[:, 0]}
    assert not any(hash(x.numpy().tobytes()) in flat_t for x in val.x[:, 0])


def test_split_is_cached_per_process(synthetic_source):
    assert data.load_train_val(synthetic_source) is data.load_train_val(synthetic_source)


def test_cifar10_required_but_missing_is_a_clear_error(tmp_path):
    with pytest.raises(data.DataError, match="--data synthetic"):
        data.prepare("cifar10", tmp_path)


def test_auto_falls_back_to_synthetic_offline(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "_reachable", lambda url, timeout: False)
    src = data.prepare("auto", tmp_path, synthetic_train=500, synthetic_test=100)
    assert src.kind == "synthetic"
