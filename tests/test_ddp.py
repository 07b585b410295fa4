"""DDP inside a trial: world-size equivalence, checkpoints across world sizes, and rank lifetime."""

import threading
import time

import psutil
import pytest
import torch

import ddp_helpers
from tuning.trial import data, distributed, trainer, trialstate


@pytest.fixture(scope="module")
def splits(synthetic_source):
    torch.set_num_threads(1)
    train, val = data.load_train_val(synthetic_source)
    # 128 images at batch 128: one optimizer step per epoch. Max-pool near-ties turn float noise
    # (1e-3 of a gradient) into a diverging trajectory over many steps, so compare a few.
    return data.Split(train.x[:128], train.y[:128]), val


def _update_gap(a: dict, b: dict, init: dict) -> float:
    """|a - b| over all parameters, relative to how far training moved them: scale-free."""
    diff = sum(((a[k] - b[k]).double() ** 2).sum() for k in init if init[k].dtype.is_floating_point)
    moved = sum(((a[k] - init[k]).double() ** 2).sum() for k in init if init[k].dtype.is_floating_point)
    return (diff / moved).sqrt().item()


def _single_and_ddp(splits, **kw):
    train, val = splits
    kw = dict(lr=1e-2, batch_size=128, train=train, val=val, seed=3, **kw)
    single, ddp = [], []
    trainer.train_cifar(**kw, on_epoch=lambda m, s: single.append(
        (m, {k: v.clone() for k, v in s["model"].items()}, s)))
    distributed.run(trainer.train_cifar, kw, world_size=2, threads=1, on_epoch=lambda m, s: ddp.append((m, s["model"], s)))
    return single, ddp


def test_two_gloo_ranks_train_what_one_process_trains(splits):
    # SGD: AdamW's first steps are sign(gradient), which turns float noise in near-zero
    # gradients into full-size updates and would blur the comparison.
    torch.manual_seed(3)
    init = trainer.make_model(16).state_dict()
    single, ddp = _single_and_ddp(splits, epochs=3, optimizer="sgd")
    assert [m["epoch"] for m, _, _ in ddp] == [1, 2, 3] and all(m["world_size"] == 2 for m, _, _ in ddp)
    # Same global batches, same augmentation, BatchNorm over the global batch: the same training.
    # (Reordering one process's batch alone moves gradients by ~1e-3 of their size, through
    # max-pool near-ties; normalising each rank's half on its own moved them by ~0.4.)
    assert _update_gap(single[-1][1], ddp[-1][1], init) < 1e-2
    for (m1, _, _), (m2, _, _) in zip(single, ddp):
        assert m2["loss"] == pytest.approx(m1["loss"], rel=1e-3)
        assert m2["train_loss"] == pytest.approx(m1["train_loss"], rel=1e-3)


@pytest.mark.slow  # make test-all; default suite: the fp32 DDP test and the bf16 trainer tests
def test_two_gloo_ranks_train_under_bf16_autocast(splits):
    """precision reaches every rank with the trainer's other arguments, and the global-batch
    BatchNorm keeps fp32 statistics and buffers under autocast."""
    train, val = splits
    kw = dict(lr=1e-2, batch_size=128, epochs=1, train=train, val=data.Split(val.x[:64], val.y[:64]), seed=3,
              width=8, precision="bf16")
    single = trainer.train_cifar(**kw)
    ddp = []
    distributed.run(trainer.train_cifar, kw, world_size=2, threads=1, on_epoch=lambda m, s: ddp.append((m, s)))
    metrics, state = ddp[-1]
    assert metrics["bf16"] is True and metrics["world_size"] == 2
    assert metrics["loss"] == pytest.approx(single["loss"], abs=0.03)  # the bf16 tolerance of test_trainer.py
    assert all(v.dtype == torch.float32 for v in state["model"].values() if v.is_floating_point())


def test_ddp_validation_equals_one_process_on_the_same_weights(splits):
    train, val = splits
    ddp = []
    distributed.run(trainer.train_cifar, dict(lr=3e-3, batch_size=128, epochs=1, train=train, val=val),
                    world_size=2, threads=1, on_epoch=lambda m, s: ddp.append((m, s)))
    metrics, state = ddp[0]
    model = trainer.make_model(16).to(memory_format=torch.channels_last)
    model.load_state_dict(state["model"])
    alone = trainer.evaluate(model, val, "cpu")
    assert metrics["loss"] == pytest.approx(alone["loss"], rel=1e-6)
    assert metrics["accuracy"] == alone["accuracy"]


@pytest.mark.slow  # two minutes: make test-all
@pytest.mark.timeout(600)
def test_finished_ranks_exit_cleanly_job_after_job(splits):
    """About one finished job in 20 failed its trial (4 of 80 here): a rank aborted in the
    interpreter's teardown ("terminate called without an active exception", exit -6) after the
    work was done. Without the fix 40 jobs all pass about one time in 8 (0.95 ** 40)."""
    train, val = splits
    for _ in range(40):
        metrics = distributed.run(trainer.train_cifar, dict(lr=3e-3, batch_size=128, epochs=1, train=train,
                                                            val=data.Split(val.x[:64], val.y[:64])),
                                  world_size=2, threads=1)
        assert metrics["epoch"] == 1


@pytest.mark.slow  # make test-all; default suite: a killed trial resumes from its checkpoint (test_reliability)
def test_restore_at_a_different_world_size(splits, tmp_path):
    train, val = splits
    torch.manual_seed(3)
    init = trainer.make_model(16).state_dict()
    kw = dict(lr=1e-2, batch_size=128, train=train, val=val, seed=3, optimizer="sgd", epochs=3)
    straight = []
    trainer.train_cifar(**kw, on_epoch=lambda m, s: straight.append((m, _clone(s))))
    # Checkpoint after epoch 2 of the single process, continue with 2 ranks.
    trialstate.write_checkpoint(straight[1][1], tmp_path)
    resumed = []
    distributed.run(trainer.train_cifar, {**kw, "state": trialstate.read_checkpoint(tmp_path)}, world_size=2,
                    threads=1, on_epoch=lambda m, s: resumed.append((m, s)))
    assert [m["epoch"] for m, _ in resumed] == [3]  # continued, nothing trained twice
    assert _update_gap(straight[-1][1]["model"], resumed[-1][1]["model"], init) < 1e-3
    # ... and back: the 2-rank checkpoint loads into a single process.
    trialstate.write_checkpoint(resumed[-1][1], tmp_path)
    again = []
    trainer.train_cifar(**{**kw, "epochs": 4}, state=trialstate.read_checkpoint(tmp_path),
                        on_epoch=lambda m, s: again.append(m))
    assert [m["epoch"] for m in again] == [4]


def _clone(state: dict) -> dict:
    return torch.utils._pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, state)


def _dead(pids) -> bool:
    return all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in pids)


def test_a_stopped_trial_leaves_no_rank_behind():
    pids = []

    def tune_stops_the_trial(metrics, state):  # what tune.report does when ASHA stops a trial
        pids.extend(int(p) for p in metrics["rank_pids"].split(";"))
        sizes.append(metrics["world_size"])  # a trainer that reports none gets it (trials.csv said 1)
        raise SystemExit(0)

    sizes = []
    with pytest.raises(SystemExit):
        distributed.run(ddp_helpers.sum_ranks, {}, world_size=2, on_epoch=tune_stops_the_trial)
    assert len(pids) == 2 and _dead(pids) and sizes == [2]


@pytest.mark.timeout(120)
def test_a_failing_rank_fails_the_trial_with_its_error():
    with pytest.raises(distributed.RankFailed, match="rank 1 failed: ValueError: boom on rank 1"):
        distributed.run(ddp_helpers.fail_on_rank_1, {}, world_size=2)


@pytest.mark.slow  # make test-all; default suite: a failing rank fails its trial
@pytest.mark.timeout(60)  # the ranks' 5 s timeout ends it; without it the stalled rank hangs the test
def test_a_stalled_rank_times_out_instead_of_hanging():
    with pytest.raises(distributed.RankFailed, match="rank 0 failed"):
        distributed.run(ddp_helpers.stall_rank_1, {}, world_size=2, timeout_s=5)


@pytest.mark.slow  # make test-all; default suite: the two-rank tests
def test_several_trials_starting_at_once_get_their_own_ports():
    results, errors = {}, []

    def one(i):
        try:
            results[i] = distributed.run(ddp_helpers.sum_ranks, {"value": float(i)}, world_size=2)
        except Exception as exc:  # collected, so the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(1, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert {i: r["sum"] for i, r in results.items()} == {i: 3.0 * i for i in range(1, 4)}


def _rank_processes(root: psutil.Process) -> set[int]:
    found = set()
    for p in root.children(recursive=True):
        try:
            if "spawn_main" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.add(p.pid)
        except psutil.Error:
            pass
    return found


@pytest.mark.slow  # minutes: make test-all
@pytest.mark.timeout(900)
def test_smoke_run_with_two_ranks_per_trial_leaves_nothing_behind(tmp_path):
    import subprocess
    import sys

    import pandas as pd

    from conftest import ROOT

    cmd = [sys.executable, "-m", "tuning.run", "--space", "cifar_asha", "--smoke", "--workers-per-trial", "2",
           "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "results")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    root, seen, most = psutil.Process(proc.pid), set(), 0
    while proc.poll() is None:  # watch the process tree while trials start and ASHA stops them
        alive = _rank_processes(root)
        seen |= alive
        most = max(most, len(alive))
        time.sleep(0.2)
    out = proc.stdout.read()
    assert proc.returncode == 0, out[-3000:]

    trials = pd.read_csv(tmp_path / "results" / "trials.csv")
    epochs = pd.read_csv(tmp_path / "results" / "epochs.csv")
    assert (trials["world_size"] == 2).all() and (epochs["world_size"] == 2).all()
    assert trials["stopped_early"].any()  # ASHA stopped trials mid-run ...
    # ... and their ranks went with them: 2 CPUs hold one 2-rank trial at a time, so a stopped
    # trial's ranks still alive next to the next trial's would have shown as more than 2.
    pids = {int(p) for cell in epochs["rank_pids"] for p in str(cell).split(";")}
    assert len(pids) == 2 * len(trials) and pids <= seen
    assert 0 < most <= 2
    assert _dead(pids)
