import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT
from tuning.trial import data, trainer, trialstate


@pytest.fixture(scope="module")
def splits(synthetic_source):
    torch.set_num_threads(2)
    return data.load_train_val(synthetic_source)


@pytest.fixture(scope="module")
def easy_splits():
    """Learnable within two epochs of 2,250 images: each class one fixed random pattern under
    noise. The synthetic CIFAR-10 is built to need many epochs on 45,000 images (see
    docs/synthetic-data.md): a unit test about learning cannot wait for it."""
    g = torch.Generator().manual_seed(0)
    patterns = torch.randn(10, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (2500,), generator=g)
    x = patterns[y] + 1.5 * torch.randn(2500, 3, 32, 32, generator=g)
    return data.Split(x[:2250], y[:2250]), data.Split(x[2250:], y[2250:])


def test_validation_loss_falls_over_two_epochs(easy_splits):
    train, val = easy_splits
    seen = []
    final = trainer.train_cifar(lr=3e-3, batch_size=128, epochs=2, train=train, val=val,
                                on_epoch=lambda m, s: seen.append(m))
    assert [m["epoch"] for m in seen] == [1, 2]
    assert seen[1]["loss"] < seen[0]["loss"]
    assert final == seen[-1]
    for m in seen:  # logged values are plain Python numbers, never tensors kept alive
        assert all(isinstance(v, (int, float)) for v in m.values())


def test_max_steps_caps_the_optimizer_steps_of_each_epoch(easy_splits):
    train, val = easy_splits
    steps = []  # AdamW's step count, read when each epoch ends (the state holds live tensors)
    trainer.train_cifar(lr=1e-3, batch_size=128, epochs=2, train=train, val=val, max_steps=3,
                        on_epoch=lambda m, s: steps.append(s["optimizer"]["state"][0]["step"].item()))
    assert steps == [3, 6]
    trainer.train_cifar(lr=1e-3, batch_size=128, epochs=1, train=train, val=val,
                        on_epoch=lambda m, s: steps.append(s["optimizer"]["state"][0]["step"].item()))
    assert steps[-1] == len(train) // 128  # uncapped: every full batch


@pytest.mark.slow  # make test-all; default suite: the loss falls over two epochs
def test_a_well_tuned_run_beats_a_badly_tuned_one(easy_splits):
    train, val = easy_splits
    good = trainer.train_cifar(lr=3e-3, batch_size=128, epochs=2, train=train, val=val)
    bad = trainer.train_cifar(lr=1e-5, batch_size=128, epochs=2, train=train, val=val)
    assert good["accuracy"] > bad["accuracy"] + 0.2
    assert good["loss"] < bad["loss"]


@pytest.mark.slow  # minutes: make test-all
def test_checkpoint_restore_continues_where_it_stopped(splits, tmp_path):
    train, val = splits
    kw = dict(lr=2e-3, batch_size=256, train=train, val=val, seed=7)
    straight = []
    trainer.train_cifar(epochs=3, on_epoch=lambda m, s: straight.append((m, _clone(s))), **kw)

    # Stop after epoch 1, checkpoint to disk, restore, and train on to epoch 3.
    trialstate.write_checkpoint(straight[0][1], tmp_path)
    state = trialstate.read_checkpoint(tmp_path)
    assert state["epoch"] == 1
    _assert_same_state(state, straight[0][1])
    resumed = []
    trainer.train_cifar(epochs=3, state=state, on_epoch=lambda m, s: resumed.append((m, _clone(s))), **kw)
    assert [m["epoch"] for m, _ in resumed] == [2, 3]  # no epoch trained twice
    # Same batches, same augmentation, same weights: the restored run is the uninterrupted one.
    _assert_same_state(resumed[-1][1], straight[-1][1])
    assert resumed[-1][0]["loss"] == pytest.approx(straight[-1][0]["loss"], rel=1e-4)


# A process that overwrites a checkpoint and is SIGKILLed mid-write: an object in its state stops
# the pickler once the file is open, and says so, until the kill comes.
KILLED_MID_WRITE = """
import sys, time
from pathlib import Path
import torch
from tuning.trial import trialstate

class Stall:
    def __reduce__(self):
        Path(sys.argv[2]).touch()
        time.sleep(600)

trialstate.write_checkpoint({"epoch": 2, "w": torch.full((1 << 20,), 2.0), "stall": Stall()}, sys.argv[1])
"""


def test_checkpoints_are_written_atomically(tmp_path):
    model = trainer.make_model(4)
    trialstate.write_checkpoint({"model": model.state_dict(), "epoch": 1}, tmp_path)
    before = (tmp_path / trialstate.CHECKPOINT_FILE).read_bytes()
    writing = tmp_path / "writing"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_MID_WRITE, str(tmp_path), str(writing)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not writing.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the writer never got mid-write"
            time.sleep(0.05)
        # Mid-write: a reader finds the previous checkpoint, whole, under the name.
        assert (tmp_path / trialstate.CHECKPOINT_FILE).read_bytes() == before
    finally:
        proc.kill()  # SIGKILL
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / trialstate.CHECKPOINT_FILE).read_bytes() == before  # a torch.save in place would be cut short
    state = trialstate.read_checkpoint(tmp_path)
    assert state["epoch"] == 1 and state["model"].keys() == model.state_dict().keys()


def test_wrong_input_size_names_both_shapes_and_the_split():
    good, bad = data.Split(torch.zeros(8, 3, 32, 32), torch.zeros(8, dtype=torch.long)), \
        data.Split(torch.zeros(6, 3, 28, 28), torch.zeros(6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(N, 3, 32, 32\), got \(6, 3, 28, 28\) in the training split"):
        trainer.train_cifar(lr=0.01, batch_size=4, epochs=1, train=bad, val=good)
    with pytest.raises(ValueError, match=r"\(N, 3, 32, 32\), got \(6, 3, 28, 28\) in the validation split"):
        trainer.train_cifar(lr=0.01, batch_size=4, epochs=1, train=good, val=bad)


def _clone(state):
    return {"model": {k: v.clone() for k, v in state["model"].items()},
            "optimizer": torch.utils._pytree.tree_map(
                lambda v: v.clone() if isinstance(v, torch.Tensor) else v, state["optimizer"]),
            "epoch": state["epoch"]}


def _assert_same_state(a, b):
    assert a["epoch"] == b["epoch"]
    for k in b["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], rtol=1e-5, atol=1e-6)
    for pid, st in b["optimizer"]["state"].items():
        for k, v in st.items():
            torch.testing.assert_close(a["optimizer"]["state"][pid][k], v, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- precision

@pytest.fixture(scope="module")
def small(splits):
    """256 training and 128 validation images: bf16 runs several times slower than fp32 on a CPU."""
    train, val = splits
    return data.Split(train.x[:256], train.y[:256]), data.Split(val.x[:128], val.y[:128])


@pytest.fixture(scope="module")
def fp32_and_bf16(small):
    """The same 4 steps (batch 64, narrow net) in fp32 and under bf16 autocast, with the states."""
    train, val = small
    runs = {}
    for precision in ("fp32", "bf16"):
        seen = []
        trainer.train_cifar(lr=2e-3, batch_size=64, epochs=1, train=train, val=val, width=8, seed=1,
                            precision=precision, on_epoch=lambda m, s: seen.append((m, s)))
        runs[precision] = seen[-1]
    return runs


# Over seeds 0-2 the two precisions' losses after these 4 steps differed by at most 0.007
# (0.3% of a ~2.4 loss); 0.03 leaves room for other CPUs' kernels and still catches a wrong path.
BF16_LOSS_TOLERANCE = 0.03


def test_bf16_on_cpu_trains_to_the_fp32_loss_within_tolerance(fp32_and_bf16):
    fp32, bf16 = fp32_and_bf16["fp32"][0], fp32_and_bf16["bf16"][0]
    assert bf16["bf16"] is True and fp32["bf16"] is False
    for key in ("train_loss", "loss"):
        assert abs(bf16[key] - fp32[key]) < BF16_LOSS_TOLERANCE, (key, bf16[key], fp32[key])
    # ... and it was another computation, not fp32 under another name: bf16 rounds differently.
    assert bf16["train_loss"] != fp32["train_loss"]


def test_bf16_autocast_runs_the_forward_pass_in_bf16_and_keeps_fp32_weights():
    model = trainer.make_model(4).to(memory_format=torch.channels_last)
    with trainer.autocast(trainer.autocast_dtype("bf16", "cpu"), "cpu"):
        out = model(torch.randn(2, 3, 32, 32))
    assert out.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_checkpoints_after_bf16_training_hold_fp32_tensors(fp32_and_bf16, tmp_path):
    trialstate.write_checkpoint(fp32_and_bf16["bf16"][1], tmp_path)
    state = trialstate.read_checkpoint(tmp_path)
    floats = [v for v in state["model"].values() if v.is_floating_point()]
    floats += [v for st in state["optimizer"]["state"].values() for v in st.values()
               if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 0]
    assert len(floats) > 20 and all(v.dtype == torch.float32 for v in floats)


def test_precision_auto_is_fp32_on_cpu_and_unknown_values_are_refused():
    assert trainer.autocast_dtype("auto", "cpu") is None
    assert trainer.autocast_dtype("fp32", "cpu") is None
    assert trainer.autocast_dtype("bf16", "cpu") is torch.bfloat16
    with pytest.raises(ValueError, match=r"precision 'fp16' unknown: use one of auto, bf16, fp32"):
        trainer.autocast_dtype("fp16", "cpu")
