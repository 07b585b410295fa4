import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import CIFAR10

from conftest import ROOT
from tuning.trial import data, synthetic
from tuning.bench import calibration


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
    # The suite runs with TUNING_NO_DOWNLOAD=1 (conftest): the refusal, not a failed download.
    with pytest.raises(data.DataError, match=r"downloads are off \(TUNING_NO_DOWNLOAD=1\).*--data synthetic"):
        data.prepare("cifar10", tmp_path)


def test_auto_falls_back_to_synthetic_when_the_server_does_not_answer(tmp_path, monkeypatch):
    monkeypatch.delenv("TUNING_NO_DOWNLOAD")
    monkeypatch.setattr(data, "_reachable", lambda url, timeout: False)  # offline, without asking the network
    src = data.prepare("auto", tmp_path, synthetic_train=500, synthetic_test=100)
    assert src.kind == "synthetic"


# ---------------------------------------------------------------- the generator itself

def _generated(seed: int, n: int):
    rng = np.random.default_rng(seed)
    t = synthetic.templates(rng)
    return t, synthetic.images(rng, t, n)


def test_generator_is_deterministic_for_a_seed_and_differs_between_seeds():
    _, (x1, y1, c1) = _generated(5, 1500)
    _, (x2, y2, c2) = _generated(5, 1500)
    _, (x3, _, _) = _generated(6, 1500)
    assert x1.dtype == np.uint8 and x1.shape == (1500, 3, 32, 32)
    assert x1.tobytes() == x2.tobytes() and np.array_equal(y1, y2) and np.array_equal(c1, c2)
    assert (x1 != x3).mean() > 0.5  # another seed: other images, not a shifted copy


def test_labels_are_wrong_at_the_configured_rate_and_never_by_accident():
    _, (_, labels, clean) = _generated(0, 20_000)
    wrong = labels != clean
    # Binomial standard error at 20,000 draws is 0.0017: 0.01 is 6 of them.
    assert abs(wrong.mean() - synthetic.LABEL_NOISE) < 0.01
    # A wrong label is any other class, uniformly: every (true, written) pair off the diagonal occurs.
    pairs = set(zip(clean[wrong].tolist(), labels[wrong].tolist()))
    assert len(pairs) == 90
    for y in (labels, clean):  # every class, in roughly equal shares
        counts = np.bincount(y, minlength=10)
        assert counts.min() > 0.9 * len(y) / 10 and counts.max() < 1.1 * len(y) / 10


def test_look_alike_classes_share_modes_that_differ_in_one_detail():
    t = synthetic.templates(np.random.default_rng(0))
    assert t.parts.shape == (10, synthetic.MODES, synthetic.PARTS, 3) and synthetic.MODES >= 3
    for a, b in synthetic.PAIRS:
        for m in range(synthetic.SHARED_MODES):
            assert np.array_equal(t.parts[a, m, :, 1:], t.parts[b, m, :, 1:])  # same layout
            same_glyph = t.parts[a, m, :, 0] == t.parts[b, m, :, 0]
            if m % 2 == 0:  # one glyph swapped
                assert same_glyph.sum() == synthetic.PARTS - 1
            else:  # the same glyphs, in other places
                assert sorted(t.parts[a, m, :, 0]) == sorted(t.parts[b, m, :, 0]) and not same_glyph.all()
        # The other modes are the class's own.
        assert not np.array_equal(t.parts[a, -1], t.parts[b, -1])


def test_a_linear_model_on_pixels_stays_near_chance():
    # The class is in local shapes and their layout, not in where colour sits: on version 1's
    # colour templates the same probe reached 97 % on held-out images.
    _, (x, y, _) = _generated(1, 5000)
    fit, held_out = calibration.linear_probe(x, y, n_fit=4000)
    assert fit > 0.4  # it did fit: it memorised its training images
    assert held_out < 0.16  # ... and learned nothing that carries over (chance: 0.10)


# ---------------------------------------------------------------- the data version

def test_manifest_names_the_generator_version_and_its_wrong_labels(tmp_path):
    src = data.prepare("synthetic", tmp_path, seed=0, synthetic_train=2000, synthetic_test=500)
    assert Path(src.root).name == f"v{synthetic.VERSION}-seed0-train2000-test500"
    manifest = json.loads((Path(src.root) / "synthetic.json").read_text())
    assert manifest["version"] == synthetic.VERSION and manifest["label_noise"] == synthetic.LABEL_NOISE
    assert abs(manifest["wrong_labels"] / 2500 - synthetic.LABEL_NOISE) < 0.03


def test_a_folder_of_the_old_generator_is_not_reused(tmp_path):
    # What version 1 wrote: seed{S}-train{N}-test{M}, a manifest without a version.
    old = tmp_path / "synthetic" / "seed0-train500-test100"
    (old / "cifar-10-batches-py").mkdir(parents=True)
    (old / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"old")
    (old / "synthetic.json").write_text(json.dumps({"seed": 0, "n_train": 500, "n_test": 100, "md5": {}}))
    src = data.prepare("synthetic", tmp_path, seed=0, synthetic_train=500, synthetic_test=100)
    assert Path(src.root) != old and Path(src.root).parent == old.parent
    assert (old / "cifar-10-batches-py" / "data_batch_1").read_bytes() == b"old"  # left alone
    train, val = data.load_train_val.__wrapped__(src)
    assert len(train) + len(val) == 500


def test_files_of_another_version_under_the_same_name_are_regenerated(tmp_path):
    root = tmp_path / "same-name"
    data.ensure_synthetic(root, seed=2, n_train=500, n_test=100)
    batch = root / "cifar-10-batches-py" / "data_batch_3"
    original = batch.read_bytes()
    manifest = root / "synthetic.json"
    stale = json.loads(manifest.read_text())
    stale["version"] = synthetic.VERSION - 1
    manifest.write_text(json.dumps(stale))
    batch.write_bytes(b"written by another generator")
    data.ensure_synthetic(root, seed=2, n_train=500, n_test=100)
    assert batch.read_bytes() == original
    assert json.loads(manifest.read_text())["version"] == synthetic.VERSION


@pytest.mark.parametrize("damaged", ['{"version": 2}', "[]"])
def test_a_manifest_that_is_not_ensure_synthetics_is_made_again(tmp_path, damaged):
    """Valid JSON without the md5 table was a traceback (KeyError: 'md5', or a list's AttributeError)."""
    root = tmp_path / "damaged"
    data.ensure_synthetic(root, seed=2, n_train=500, n_test=100)
    manifest = root / "synthetic.json"
    good = manifest.read_text()
    manifest.write_text(damaged)
    data.ensure_synthetic(root, seed=2, n_train=500, n_test=100)
    assert json.loads(manifest.read_text()) == json.loads(good)


def test_a_node_without_the_folder_regenerates_it_from_its_name(tmp_path):
    # A cluster node that lacks the driver's disk gets the DataSource's path and nothing else.
    driver = data.prepare("synthetic", tmp_path / "driver", seed=4, synthetic_train=500, synthetic_test=100)
    node_root = tmp_path / "node" / "synthetic" / Path(driver.root).name
    train, _ = data.load_train_val.__wrapped__(data.DataSource("synthetic", str(node_root)))
    batch = "cifar-10-batches-py/data_batch_1"
    assert (node_root / batch).read_bytes() == (Path(driver.root) / batch).read_bytes()
    assert len(train) == 450


# A data prepare in a fresh interpreter whose audit hook refuses, and reports, every socket lookup
# or connection that does not stay on this machine (before any DNS query leaves it).
GUARDED_PREPARE = """
import ipaddress, sys

def local(host):
    if host is None or isinstance(host, bytes) or host in ("", "localhost") or host.startswith("/"):
        return True  # unix sockets, the default host
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False

def guard(event, args):
    if event in ("socket.getaddrinfo", "socket.connect"):
        host = args[0] if event == "socket.getaddrinfo" else args[1]
        host = host[0] if isinstance(host, tuple) else host
        if not local(host):
            print(f"NETWORK {event} {host}", file=sys.stderr, flush=True)
            raise OSError(f"network refused by the test: {host}")

sys.addaudithook(guard)
from tuning.trial import data
print(data.prepare("auto", sys.argv[1], synthetic_train=500, synthetic_test=100).kind)
try:
    data.prepare("cifar10", sys.argv[1])
except data.DataError as exc:
    print(exc)
"""


def _guarded_prepare(tmp_path, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", GUARDED_PREPARE, str(tmp_path / "data")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_data_prepare_opens_no_network_connection(tmp_path):
    done = _guarded_prepare(tmp_path, os.environ)  # the suite's environment: TUNING_NO_DOWNLOAD=1
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NETWORK" not in done.stderr
    kind, refusal = done.stdout.splitlines()
    assert kind == "synthetic" and "downloads are off (TUNING_NO_DOWNLOAD=1)" in refusal


def test_the_network_guard_catches_a_download_attempt(tmp_path):
    # Without TUNING_NO_DOWNLOAD, --data auto and cifar10 try the CIFAR-10 server, as a user's
    # machine with internet does: the guard sees it (and refuses it), so the test above can fail.
    env = {k: v for k, v in os.environ.items() if k != "TUNING_NO_DOWNLOAD"}
    done = _guarded_prepare(tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NETWORK socket.getaddrinfo www.cs.toronto.edu" in done.stderr
    kind, refusal = done.stdout.splitlines()
    assert kind == "synthetic" and "it cannot be downloaded" in refusal


def _as_cifar10(monkeypatch, root: Path) -> None:
    """torchvision's CIFAR10 told the md5 sums of synthetic files in the real layout: the real set's
    whole path (its tarball, its checks) on data that installs with nothing."""
    md5 = json.loads((root / "synthetic.json").read_text())["md5"]
    monkeypatch.setattr(CIFAR10, "train_list", [[f"data_batch_{i}", md5[f"data_batch_{i}"]] for i in range(1, 6)])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5["test_batch"]]])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5["batches.meta"]})


def test_a_tarball_copied_into_the_data_dir_is_unpacked_once_its_md5_holds(tmp_path, monkeypatch):
    import hashlib
    import tarfile

    src = Path(data.prepare("synthetic", tmp_path / "gen", seed=0, synthetic_train=500, synthetic_test=100).root)
    _as_cifar10(monkeypatch, src)
    mine = tmp_path / "data"
    mine.mkdir()
    tarball = mine / "cifar-10-python.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    monkeypatch.setattr(CIFAR10, "tgz_md5", "0" * 32)  # a partial download
    with pytest.raises(data.DataError, match="cifar-10-python.tar.gz fails its md5 check"):
        data.prepare("cifar10", mine)
    assert not (mine / "cifar-10-batches-py").exists()
    monkeypatch.setattr(CIFAR10, "tgz_md5", hashlib.md5(tarball.read_bytes()).hexdigest())
    got = data.prepare("cifar10", mine)
    assert got.kind == "cifar10" and (mine / "cifar-10-batches-py" / "test_batch").is_file()
    # and given the batches folder itself, the folder above it is the data dir, for synthetic data too
    assert data.prepare("cifar10", mine / "cifar-10-batches-py").root == str(mine)
    made = data.prepare("synthetic", mine / "cifar-10-batches-py", seed=0, synthetic_train=500, synthetic_test=100)
    assert Path(made.root).parent == mine / "synthetic" and not (mine / "cifar-10-batches-py" / "synthetic").exists()


def test_a_damaged_synthetic_file_is_written_again_before_a_run(tmp_path, caplog):
    src = Path(data.prepare("synthetic", tmp_path, seed=0, synthetic_train=500, synthetic_test=100).root)
    batch = src / "cifar-10-batches-py" / "data_batch_2"
    original = batch.read_bytes()
    batch.write_bytes(original[:1000])  # a disk that filled up, a copy cut short
    with caplog.at_level("WARNING", logger="tuning.trial.data"):
        data.prepare("synthetic", tmp_path, seed=0, synthetic_train=500, synthetic_test=100)
    assert batch.read_bytes() == original
    assert "replacing data_batch_2 (damaged: they fail their md5 check)" in caplog.text


@pytest.mark.parametrize("kind", ["auto", "cifar10"])
def test_a_batches_folder_without_batches_meta_is_refused_naming_it(tmp_path, kind, monkeypatch):
    """Without batches.meta the folder was not taken for CIFAR-10's: auto wrote synthetic images inside
    it, and cifar10 looked for cifar-10-batches-py/cifar-10-batches-py."""
    monkeypatch.setenv("TUNING_NO_DOWNLOAD", "1")
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "data_batch_1").write_bytes(b"x")
    with pytest.raises(data.DataError, match=rf"CIFAR-10 in {folder} is damaged: .*batches.meta missing"):
        data.prepare(kind, folder, seed=0)
    assert sorted(p.name for p in folder.iterdir()) == ["data_batch_1"]


def test_the_damaged_line_names_a_folder_whose_path_holds_spaces():
    # It cut the first problem at its first space: "CIFAR-10 in /tmp/probe2 is damaged" for "/tmp/probe2/my data".
    folder = Path("/data sets/my cifar/cifar-10-batches-py")
    line = data.damaged([f"{folder / 'data_batch_1'} is missing",
                         f"{folder / 'test_batch'} fails its md5 check (corrupt or partial download)"])
    assert line == (f"CIFAR-10 in {folder} is damaged: data_batch_1 missing; test_batch fails its md5 check "
                    "(corrupt or partial)")
