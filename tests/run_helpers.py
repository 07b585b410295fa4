"""Shared by the reliability and cluster tests: a steady test trainer's space, and reading a run's
state (results.jsonl, Tune's experiment snapshot, the tables) to check what a kill and a resume
did."""

import json
import time
from pathlib import Path

import pandas as pd

TESTS = Path(__file__).resolve().parent  # Ray's workers import the test trainers (faulty.py) from here


def logged_epochs(results: Path) -> dict[str, int]:
    """Epochs each trial has reported so far, from the run's results.jsonl."""
    out = {}
    rows = results / "results.jsonl"
    for line in rows.read_text().splitlines() if rows.exists() else []:
        if line.endswith("}"):  # not a line cut short by the kill
            t = json.loads(line)["trial_id"]
            out[t] = out.get(t, 0) + 1
    return out


def _snapshot_trials(results: Path) -> list[tuple[dict, int]]:
    """Each trial's state and the epoch of its latest checkpoint in Tune's latest experiment
    snapshot on storage."""
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    snapshots = sorted((results / "tune").glob("experiment_state-*.json"))
    if not snapshots:
        return []
    try:
        data = json.loads(snapshots[-1].read_text())
    except ValueError:  # caught mid-write; the next poll reads it whole
        return []
    out = []
    for trial, meta in data["trial_data"]:
        checkpoints = _TrainingRunMetadata.from_json_state(meta).checkpoint_manager
        latest = checkpoints.latest_checkpoint_result if checkpoints else None
        out.append((json.loads(trial), int(latest.metrics["training_iteration"]) if latest else 0))
    return out


def snapshot(results: Path) -> dict[str, tuple[str, int]]:
    """Each trial's (status, epoch of its latest checkpoint) in Tune's latest experiment snapshot
    on storage: what a resume starts from. Not its last result: Tune registers a checkpoint one
    event after the result it came with, so a snapshot can be one epoch ahead in results."""
    return {trial["trial_id"]: (trial["status"], k) for trial, k in _snapshot_trials(results)}


def check_resumed(results: Path, before: dict[str, int], known: dict[str, tuple[str, int]]) -> int:
    """After a SIGKILL and a resume: trials finished in the snapshot got no new results, and the
    others went on from the checkpoint the snapshot holds. The only epochs trained again are the
    ones `results.jsonl` had logged past that checkpoint (a result is logged as it arrives; its
    checkpoint is registered an event later, and the snapshot is copied to storage in the
    background). Returns how many trials continued from a checkpoint."""
    trials = pd.read_csv(results / "trials.csv", keep_default_na=False).set_index("trial_id")
    epochs = pd.read_csv(results / "epochs.csv")
    after, continued = logged_epochs(results), 0
    for t, (status, k) in known.items():
        if status == "TERMINATED":
            assert after[t] == before[t] and trials.loc[t, "recomputed_epochs"] == 0
            continue
        logged_past_checkpoint = max(0, before.get(t, 0) - k)
        assert trials.loc[t, "recomputed_epochs"] <= logged_past_checkpoint, (t, k, before.get(t))
        curve = epochs[epochs["trial_id"] == t]
        if k > 0 and len(curve) > k:  # ASHA may also have stopped it at the rung it had reached
            assert curve["restored_from"].iloc[k] == k, curve[["training_iteration", "restored_from"]]
            continued += 1
    return continued


def wait_until_mid_run(proc, results: Path, timeout=300) -> None:
    """Until the snapshot has a trial finished and another running with epochs behind it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        known = snapshot(results)
        mid = [t for t, (st, k) in known.items() if st == "RUNNING" and k > 0]
        if any(st == "TERMINATED" for st, _ in known.values()) and mid:
            return
        time.sleep(0.2)
    raise AssertionError(f"no mid-run state within {timeout} s: {logged_epochs(results)}")


def hold_mid_run(proc, results: Path, gate: Path, timeout=300) -> None:
    """wait_until_mid_run, then hold the run there with the gate (faulty._train) until a trial
    with a checkpoint behind it waits at the gate: no epoch starts while the gate exists, so that
    trial is still mid-way whenever the test stops the run. Without the hold, a trial caught
    mid-way could reach its last epoch before a slow stop, and the resume had nothing to continue
    (seen once in CI). If every trial caught mid-way ends its epoch in flight as its last, the gate
    opens and the wait starts again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        wait_until_mid_run(proc, results, timeout=deadline - time.monotonic())
        gate.touch()
        give_up = min(deadline, time.monotonic() + 20)  # an epoch is 0.4 s; a snapshot comes per step
        while time.monotonic() < give_up:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            held = {float(f.name.rpartition("held-")[2]) for f in gate.parent.glob(f"{gate.name}.held-*")}
            if any(trial["config"]["lr"] in held and trial["status"] == "RUNNING" and k > 0
                   for trial, k in _snapshot_trials(results)):
                return
            time.sleep(0.2)
        gate.unlink()
    raise AssertionError(f"no trial held mid-way within {timeout} s: {logged_epochs(results)}")


def write_space(tmp_path: Path, body: str) -> Path:
    f = tmp_path / "space.py"
    f.write_text("from tuning.spaces import Choice, LogUniform, Space, Uniform\n" + body)
    return f


def check_tables(results: Path, trials_expected: int, max_epochs: int):
    trials = pd.read_csv(results / "trials.csv", keep_default_na=False)
    epochs = pd.read_csv(results / "epochs.csv")
    assert len(trials) == trials_expected and trials["trial_id"].is_unique  # every trial once
    for _, curve in epochs.groupby("trial_id"):  # no duplicated epoch in any curve
        assert curve["training_iteration"].tolist() == list(range(1, len(curve) + 1))
        assert curve["epoch"].tolist() == curve["training_iteration"].tolist()
    assert (trials["status"] == "TERMINATED").all()
    return trials, epochs


STEADY = ("SPACE = Space(params={{'lr': Uniform(0.0, 1.0)}}, trainer='faulty:steady', strategy={strategy!r},"
          " max_epochs={epochs}, num_samples=6, reduction_factor={rf}, gpus_per_trial=0,"
          " fixed={{'sleep_s': 0.4, 'gate': {gate!r}}})\n")
