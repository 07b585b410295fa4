"""Reliability with real processes and real signals: crash and resume, Ctrl-C and SIGTERM, a
resume holding its dir, failing, killed, diverging and out-of-memory trials, truncated
checkpoints, a results file that cannot be written, damaged result rows, atomic tables."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tuning.results import read_rows

from conftest import ROOT
from run_helpers import (STEADY, TESTS, check_resumed, check_tables, hold_mid_run, logged_epochs, snapshot,
                         wait_until_mid_run, write_space)


def _env():
    # Ray's workers import the misbehaving trainers from tests/faulty.py.
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def _start(*args) -> subprocess.Popen:
    # Its own session: a SIGKILL of the group takes the driver and the Ray it started down at
    # once, as a crash of the machine or the job would.
    return subprocess.Popen([sys.executable, "-m", "tuning.run", *args], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _run(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning.run", *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def _wait_for(proc, condition, timeout=300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            proc.kill()
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(0.2)


@pytest.mark.timeout(600)
# Both in make test-all; the default suite resumes after SIGTERM (below), from the same snapshots.
@pytest.mark.parametrize("strategy", [pytest.param(s, marks=pytest.mark.slow) for s in ("asha", "bohb")])
def test_sigkill_mid_run_then_resume(tmp_path, strategy):
    # A trainer whose epochs take 0.4 s, through the same trainable, checkpoints and resume path
    # as the CIFAR trainer: it leaves time to catch trials finished and mid-way.
    results, gate, max_epochs = tmp_path / "results", tmp_path / "gate", 4 if strategy == "asha" else 3
    space = write_space(tmp_path, STEADY.format(strategy=strategy, epochs=max_epochs,
                                                rf=2 if strategy == "asha" else 3, gate=str(gate)))
    proc = _start("--space", str(space), "--results-dir", str(results))
    hold_mid_run(proc, results, gate)
    os.killpg(proc.pid, signal.SIGKILL)
    killed_at = time.time()
    proc.wait()
    time.sleep(2)
    progress, known = logged_epochs(results), snapshot(results)
    assert known, "no readable experiment snapshot after the kill: a resume would have nothing to start from"
    assert any(st == "TERMINATED" for st, _ in known.values())
    assert any(st in ("RUNNING", "PAUSED") and 0 < k < max_epochs for st, k in known.values())

    gate.unlink()
    done = _run("--resume", str(results))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials, _ = check_tables(results, 6, max_epochs)
    run = json.loads((results / "run.json").read_text())
    assert run["status"] == "finished" and run["resumes"] == 1
    assert run["recomputed_epochs"] == trials["recomputed_epochs"].sum()
    assert check_resumed(results, progress, known)
    check_time_and_device_hours(results, run, killed_at)


def check_time_and_device_hours(results: Path, run: dict, killed_at: float) -> None:
    """The killed segment counts in wall_time_s up to its last result, and its epochs in the
    device-hours, as every segment's do."""
    killed, resumed = run["segments"]
    assert killed["ended"] == "killed" and resumed["ended"] == "finished", run["segments"]
    rows = [r for rs in read_rows(results / "results.jsonl").values() for r in rs]
    last_before_kill = max(r["timestamp"] for r in rows if r["timestamp"] <= killed_at)
    # Tune's timestamp is whole seconds; the files are written just after the result arrives.
    assert last_before_kill - 1 - killed["started"] <= killed["wall_s"] <= killed_at - killed["started"] + 1
    assert run["wall_time_s"] == pytest.approx(killed["wall_s"] + resumed["wall_s"], abs=0.2)
    cpus = run["resources_per_trial"]["cpu"]
    assert run["cpu_hours"] == pytest.approx(cpus * sum(r["time_this_iter_s"] for r in rows) / 3600, rel=1e-6)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGINT, marks=pytest.mark.slow), signal.SIGTERM],
                         ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_saves_state_and_a_held_resume_finishes(tmp_path, sig):
    # SIGTERM is how timeout, kill, Kubernetes, Slurm and `ray job stop` stop a process: it must
    # stop the run as Ctrl-C does, not crash it.
    results, gate = tmp_path / "results", tmp_path / "gate"
    space = write_space(tmp_path, STEADY.format(strategy="asha", epochs=4, rf=2, gate=str(gate)))
    proc = _start("--space", str(space), "--results-dir", str(results))
    hold_mid_run(proc, results, gate)
    os.kill(proc.pid, sig)  # the driver only, as Ctrl-C in its terminal, or `kill PID`
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, out[-3000:]  # 130, 143: as a shell reports a process the signal ended
    assert f"python -m tuning.run --resume {results}" in out
    assert "tune.run(..., resume=True)" not in out  # Ray's hint, which names what a tuning user never calls
    assert "SIGTERM received" not in out and "Traceback" not in out, out[-3000:]  # no Ray crash dump
    assert json.loads((results / "run.json").read_text())["status"] == "interrupted"
    progress, known = logged_epochs(results), snapshot(results)
    assert any(st != "TERMINATED" and 0 < k < 4 for st, k in known.values()), known  # the held trial
    # The tables so far, each trial's status as the saved experiment has it: Tune's cleanup calls the
    # trials it was running TERMINATED, which under ASHA read as stopped early by the scheduler.
    trials = pd.read_csv(results / "trials.csv").set_index("trial_id")
    assert len(trials) == 6
    assert {t: trials.at[t, "status"] == "TERMINATED" for t in known} == {t: st == "TERMINATED" for t, (st, _) in
                                                                          known.items()}, (trials["status"], known)
    assert not trials.loc[trials["status"] != "TERMINATED", "stopped_early"].any()

    # The resumed trials wait at their next epoch while the gate still exists: the resume is held mid-run.
    resume = _start("--resume", str(results))
    _wait_for(resume, lambda: json.loads((results / "run.json").read_text())["status"] == "running")
    second = _run("--resume", str(results), timeout=300)
    assert second.returncode == 2, second.stderr[-3000:]
    assert second.stderr.strip().splitlines() == [
        f"tuning.run: error: results dir {results} is in use by another tuning.run: wait for it to finish or "
        "choose another --results-dir"]
    gate.unlink()
    out, _ = resume.communicate(timeout=300)
    assert resume.returncode == 0, out[-3000:]
    check_tables(results, 6, 4)
    run = json.loads((results / "run.json").read_text())
    assert run["status"] == "finished"
    assert [s["ended"] for s in run["segments"]] == ["interrupted", "finished"]
    assert run["wall_time_s"] == pytest.approx(sum(s["wall_s"] for s in run["segments"]), abs=0.2)
    # Finished trials ran no epoch again; the others went on from the checkpoint the stop saved.
    assert check_resumed(results, progress, known)


def test_a_cut_short_run_keeps_finished_only_the_trials_tune_ended_itself():
    """Tune's cleanup after a Ctrl-C calls every trial TERMINATED. Kept so: those ended before the
    segment (a resume), those Tune completed, and those a stopper ended with the whole run; the
    others are PAUSED (an epoch trained) or PENDING, as the saved experiment has them."""
    from types import SimpleNamespace

    from tuning.backend.interrupted import Endings
    from tuning.results import TrialRecord

    class Stopper:
        whole = False

        def stop_all(self):
            return self.whole

    stopper = Stopper()
    endings = Endings(stopper)
    trial = {t: SimpleNamespace(trial_id=t, status=s) for t, s in
             [("before", "TERMINATED"), ("done", "PENDING"), ("swept", "PENDING"), ("mid", "PENDING"),
              ("waiting", "PENDING"), ("held", "PAUSED")]}
    trials = list(trial.values())
    endings.on_step_begin(0, trials)  # a resume's trials are restored before the first step
    trial["done"].status = "TERMINATED"
    endings.on_trial_complete(1, trials, trial["done"])
    endings.on_step_end(1, trials)
    trained = [{"training_iteration": 1}]
    assert endings.status(TrialRecord("done", "TERMINATED", {}, trained)) == "TERMINATED"
    assert endings.status(TrialRecord("swept", "TERMINATED", {}, trained)) == "PAUSED"  # not yet swept
    trial["swept"].status = "TERMINATED"  # the step a stopper ended the whole run in
    stopper.whole = True
    endings.on_step_end(2, trials)
    records = [TrialRecord(t, "TERMINATED", {}, trained) for t in ("before", "done", "swept", "mid")]
    records += [TrialRecord("waiting", "TERMINATED", {}), TrialRecord("held", "PAUSED", {})]
    assert {r.trial_id: r.status for r in endings.corrected(records)} == {
        "before": "TERMINATED", "done": "TERMINATED", "swept": "TERMINATED", "mid": "PAUSED",
        "waiting": "PENDING", "held": "PENDING"}  # held: a spent time budget's gate, never started


@pytest.mark.slow  # make test-all; default suite: unwritable results dirs are refused (test_cli)
@pytest.mark.timeout(600)
def test_a_results_file_that_cannot_be_written_stops_the_run_and_resume_continues(tmp_path):
    results = tmp_path / "results"
    space = write_space(tmp_path, STEADY.format(strategy="asha", epochs=4, rf=2, gate=None))
    proc = _start("--space", str(space), "--results-dir", str(results))
    wait_until_mid_run(proc, results)
    run_json = (results / "run.json").read_bytes()
    # Unwritable mid-run. chmod stops no write by root (tests may run as root) and a full disk
    # needs privileges to stage, so a folder takes the file's place: every append fails, for any user.
    rows, kept = results / "results.jsonl", tmp_path / "results.jsonl"
    rows.rename(kept)
    rows.mkdir()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert [line for line in out.splitlines() if line.startswith("tuning.run: error:")] == [
        f"tuning.run: error: cannot write {rows} (Is a directory); the experiment is saved up to the last result "
        f"written: fix that, then continue with python -m tuning.run --resume {results}"]
    assert (results / "run.json").read_bytes() == run_json  # earlier files whole
    assert all(json.loads(line)["trial_id"] for line in kept.read_text().splitlines())

    rows.rmdir()
    kept.rename(rows)
    with open(rows, "a") as f:  # and the row a full disk cut short, left without its newline
        f.write('{"loss": 0.5, "trial_id": "')
    damaged = len(rows.read_text().splitlines())
    progress, known = logged_epochs(results), snapshot(results)
    done = _run("--resume", str(results))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{rows} line {damaged} is damaged" in done.stderr
    assert len(rows.read_text().splitlines()) > damaged  # the damaged line now sits in the middle
    check_tables(results, 6, 4)  # built from the other lines: every trial, every epoch once
    assert json.loads((results / "run.json").read_text())["status"] == "finished"
    check_resumed(results, progress, known)


def test_a_damaged_row_in_the_middle_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    from tuning.results import read_rows

    rows = tmp_path / "results.jsonl"
    rows.write_text('{"trial_id": "a", "loss": 1}\n{"trial_id": "a", "lo\n{"loss": 3}\n\n'
                    '{"trial_id": "b", "loss": 2}\n')
    assert read_rows(rows) == {"a": [{"trial_id": "a", "loss": 1}], "b": [{"trial_id": "b", "loss": 2}]}
    assert f"{rows} line 2 is damaged" in caplog.text and f"{rows} line 3 is damaged" in caplog.text
    assert "line 4" not in caplog.text  # an empty line is no damage


@pytest.fixture(scope="module")
def misbehaving(tmp_path_factory):
    """One grid run over the ways a trial goes wrong, with one retry allowed."""
    tmp = tmp_path_factory.mktemp("misbehaving")
    space = write_space(tmp, "SPACE = Space(params={'mode': Choice(['steady', 'flaky', 'killed', 'broken', 'diverges', "
                        "'oom'])},"
                        " trainer='faulty:misbehave', strategy='grid', max_epochs=5, gpus_per_trial=0,"
                        f" diverged_value=99.0, fixed={{'marker_dir': {str(tmp)!r}}})\n")
    proc = _run("--space", str(space), "--max-failures", "1", "--results-dir", str(tmp / "r"))
    trials = pd.read_csv(tmp / "r" / "trials.csv").set_index("mode")
    return proc, trials, tmp / "r", tmp


def test_failing_trials_are_contained_and_the_run_succeeds(misbehaving):
    proc, trials, results, _ = misbehaving
    assert proc.returncode == 0, proc.stderr[-3000:]  # non-zero only when no trial succeeded
    assert trials.loc["steady", "status"] == "TERMINATED" and trials.loc["steady", "failures"] == 0
    assert "2 failed" in proc.stdout
    assert json.loads((results / "run.json").read_text())["failed"] == 2


def test_a_trial_that_fails_once_is_retried_and_succeeds(misbehaving):
    trials = misbehaving[1]
    assert trials.loc["flaky", "status"] == "TERMINATED" and trials.loc["flaky", "epochs"] == 5
    assert trials.loc["flaky", "failures"] == 1  # failed once, retried, then trained to the end


def test_a_trial_whose_process_is_killed_is_retried_from_its_checkpoint(misbehaving):
    # Its ray:: actor process was SIGKILLed a second into epoch 3, as the OOM killer kills one.
    trials, results, marker_dir = misbehaving[1], misbehaving[2], misbehaving[3]
    killed = trials.loc["killed"]
    assert killed["status"] == "TERMINATED" and killed["epochs"] == 5 and killed["failures"] == 1
    pid = int((marker_dir / "killed").read_text())
    rows = [json.loads(line) for line in (results / "results.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["trial_id"] == killed["trial_id"]]
    assert [(r["epoch"], r["pid"]) for r in rows[:2]] == [(1, pid), (2, pid)]
    retried = rows[2:]
    k = retried[0]["restored_from"]  # the checkpoint Tune had registered when the process died
    assert k in (1, 2) and all(r["pid"] != pid and r["restored_from"] == k for r in retried)
    assert [r["epoch"] for r in retried] == list(range(k + 1, 6))  # from that checkpoint, not from scratch
    assert killed["recomputed_epochs"] == 2 - k


def test_a_trial_that_always_fails_is_marked_failed_with_its_error(misbehaving):
    trials = misbehaving[1]
    assert trials.loc["broken", "status"] == "ERROR" and trials.loc["broken", "failures"] == 2
    assert "ValueError: lr=0.9 breaks this model" in trials.loc["broken", "error"]


def test_a_diverging_trial_stops_itself_with_a_finite_worst_case(misbehaving):
    trials, results = misbehaving[1], misbehaving[2]
    assert bool(trials.loc["diverges", "diverged"]) and trials.loc["diverges", "loss"] == 99.0
    assert trials.loc["diverges", "epochs"] == 2 and trials.loc["diverges", "status"] == "TERMINATED"
    assert not bool(trials.loc["steady", "diverged"]) and trials.loc["steady", "epochs"] == 5
    assert pd.read_csv(results / "epochs.csv")["loss"].notna().all()  # no NaN reached Tune or the tables


def test_cuda_out_of_memory_names_the_config(misbehaving):
    trials = misbehaving[1]
    assert trials.loc["oom", "status"] == "ERROR"
    assert "CUDA out of memory with config {'mode': 'oom'}" in trials.loc["oom", "error"]


@pytest.mark.slow  # minutes: make test-all
def test_when_every_trial_fails_the_exit_code_says_so(tmp_path):
    space = write_space(tmp_path, "SPACE = Space(params={'lr': Choice([0.8, 0.9])}, trainer='faulty:broken_when_large',"
                                  " max_epochs=2, strategy='grid', gpus_per_trial=0)\n")
    proc = _run("--space", str(space), "--max-failures", "0", "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 1
    assert (pd.read_csv(tmp_path / "r" / "trials.csv")["status"] == "ERROR").all()


def test_a_truncated_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog):
    import torch
    from ray.tune import Checkpoint

    from tuning.trial import trialstate
    from tuning.backend.trainables import restore

    for epoch in (1, 2):
        d = tmp_path / f"checkpoint_{epoch - 1:06d}"
        d.mkdir()
        trialstate.write_checkpoint({"epoch": epoch, "w": torch.ones(3) * epoch}, d)
    latest = tmp_path / "checkpoint_000001" / trialstate.CHECKPOINT_FILE
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])  # a crash mid-write
    state, epochs = restore(Checkpoint.from_directory(str(tmp_path / "checkpoint_000001")))
    assert state["epoch"] == 1 and epochs == 1
    assert "checkpoint_000001 is unreadable" in caplog.text and "previous checkpoint" in caplog.text
    (tmp_path / "checkpoint_000000" / trialstate.CHECKPOINT_FILE).write_bytes(b"")
    assert restore(Checkpoint.from_directory(str(tmp_path / "checkpoint_000001"))) == (None, 0)
    assert "starts over" in caplog.text


def test_tables_are_written_atomically(tmp_path, monkeypatch):
    from tuning import results

    good = pd.DataFrame({"trial_id": ["a"], "loss": [1.0]})
    results.write_tables(tmp_path, good, good)
    before = (tmp_path / "trials.csv").read_text()

    def crash(self, path, **kw):
        Path(path).write_text("trial_id,lo")  # half a file, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", crash)
    with pytest.raises(KeyboardInterrupt):
        results.write_tables(tmp_path, good, good)
    assert (tmp_path / "trials.csv").read_text() == before


@pytest.mark.slow  # minutes: make test-all
def test_a_planted_leak_is_flagged(tmp_path):
    space = write_space(tmp_path, "SPACE = Space(params={'lr': Choice([0.1])}, trainer='faulty:leaky', strategy='grid',"
                                  " max_epochs=7, gpus_per_trial=0)\n")
    proc = _run("--space", str(space), "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = pd.read_csv(tmp_path / "r" / "trials.csv")
    assert bool(trials.loc[0, "memory_growing"]) and trials.loc[0, "peak_rss_mb"] > 0
    assert "grew in memory epoch after epoch" in proc.stdout
    epochs = pd.read_csv(tmp_path / "r" / "epochs.csv")
    assert epochs["rss_mb"].iloc[-1] - epochs["rss_mb"].iloc[1] > 150  # 40 MB kept per epoch


def test_steady_memory_is_not_flagged(misbehaving):
    trials = misbehaving[1]
    assert not bool(trials.loc["steady", "memory_growing"]) and trials.loc["steady", "peak_rss_mb"] > 0


def test_a_killed_segment_counts_up_to_the_last_file_it_wrote(tmp_path):
    # What a resume finds after SIGKILL, without the minutes of a real one (test-all runs that).
    from tuning import session
    from tuning.record import RunRecord, Segment

    rec = RunRecord(space="s", strategy="asha", seed=0, num_samples=1, max_epochs=1, wall_time_s=100.0,
                    segments=[{"started": 1000.0, "wall_s": 100.0, "ended": "finished"},
                              {"started": 5000.0, "wall_s": None, "ended": None}])
    for name, written in (("results.jsonl", 5090), ("report.md", 5120), ("trials.csv", 9999)):
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, (written, written))  # trials.csv: not a file a running run rewrites
    session._close_killed_segment(rec, tmp_path)
    assert rec.segments[-1] == Segment(started=5000.0, wall_s=120.0, ended="killed")
    assert rec.wall_time_s == 220.0
    session._close_killed_segment(rec, tmp_path)  # closed: a second look changes nothing
    assert rec.wall_time_s == 220.0


def test_ctrl_c_just_after_the_search_ended_still_writes_the_tables_and_marks_the_run(tmp_path, monkeypatch):
    """Ctrl-C in the seconds between the search's end and its files (Ray stopping) left results.jsonl
    alone: no trials.csv, no epochs.csv, and run.json saying "running". A resume then finishes it."""
    import tuning
    from tuning import session

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    folder = tmp_path / "r"
    with monkeypatch.context() as m:
        m.setattr(session, "_metric_error", ctrl_c)  # the first step after the search loop
        with pytest.raises(KeyboardInterrupt):
            tuning.search(None, "counting_ones", strategy="random", num_samples=2, max_epochs=2, results_dir=folder)
    assert len(pd.read_csv(folder / "trials.csv")) == 2 and len(pd.read_csv(folder / "epochs.csv")) == 4
    run = json.loads((folder / "run.json").read_text())
    assert run["status"] == "interrupted" and run["segments"][-1]["ended"] == "interrupted"
    assert tuning.resume(folder).status == "finished"
