"""Bad objectives and constraints (issue 41, item 9), each through the command line (a real
`python -m tuning.run` in a folder of its own, with no --results-dir, so that any file written
anywhere under it would show) and through tuning.search: exit 2 and one line, or TuningError,
and nothing written.

A trainer of your own can only be checked by running it: its run stops at its first result with
exit 2 and one line, and keeps run.json saying why (docs/multi-objective.md, "What is refused")."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import tuning
from conftest import ROOT
from tuning.cli import TuningError

TESTS = ROOT / "tests"

# One space file per declaration, each refused while the space loads: before Ray, data or a folder.
MISMATCHED_MODES = "SPACE = Space(params={'lr': LogUniform(1e-4, 1e-2)}, metric=['accuracy', 'latency_ms'], mode=['max'])"
BAD_DIRECTION = ("SPACE = Space(params={'lr': LogUniform(1e-4, 1e-2)}, "
                 "objectives={'accuracy': 'max', 'latency_ms': 'fastest'})")


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _space_file(folder: Path, body: str) -> Path:
    path = folder / "space.py"
    path.write_text(f"from tuning.spaces import LogUniform, Space, Uniform\n{body}\n")
    return path


def _cli(folder: Path, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning.run", *args], cwd=folder, capture_output=True, text=True,
                          timeout=600, env=env)


def _one_line(proc: subprocess.CompletedProcess, *needles) -> str:
    """Exit 2, no traceback, and exactly one error line holding every needle."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("tuning.run: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


# (command-line arguments after --space, tuning.search's keywords, what the line says)
CASES = {
    "objective_never_reported_by_cifar": (
        ["cifar_mo", "--objective", "accuracy:max", "--objective", "energy_j:min"],
        dict(space="cifar_mo", objectives={"accuracy": "max", "energy_j": "min"}),
        "objective 'energy_j' is never reported by the cifar trainer: use one of accuracy, eval_time_s"),
    "objective_never_reported_by_a_benchmark": (
        ["counting_ones", "--objective", "loss:min", "--objective", "energy_j:min"],
        dict(space="counting_ones", objectives={"loss": "min", "energy_j": "min"}),
        "objective 'energy_j' is never reported by the counting_ones trainer: use one of loss"),
    "objective_never_reported_by_a_multi_objective_benchmark": (  # once a run, then exit 2 with results written
        ["zdt", "--objective", "f1:min", "--objective", "f3:min"],
        dict(space="zdt", objectives={"f1": "min", "f3": "min"}),
        "objective 'f3' is never reported by the tuning.mobench:zdt1 trainer: use one of f1, f2"),
    "modes_not_matching_objectives": (
        ["{file}"], dict(space="{file}", body=MISMATCHED_MODES),
        "names 2 objectives but mode=['max'] has 1: give one 'min' or 'max' per metric"),
    "constraint_on_an_unknown_metric": (
        ["cifar_mo", "--constraint", "peak_mem_gb<=4"],
        dict(space="cifar_mo", constraints={"peak_mem_gb": ("<=", 4)}),
        "constrained metric 'peak_mem_gb' is never reported by the cifar trainer"),
    "direction_in_the_space": (
        ["{file}"], dict(space="{file}", body=BAD_DIRECTION),
        "objective 'latency_ms' has direction 'fastest': use 'min' or 'max'"),
    "direction_on_the_command_line": (
        ["cifar_mo", "--objective", "accuracy:max", "--objective", "latency_ms:fastest"],
        dict(space="cifar_mo", objectives={"accuracy": "max", "latency_ms": "fastest"}),
        "latency_ms"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_command_line_refuses_in_one_line_and_writes_nothing(tmp_path, case):
    args, kw, says = CASES[case]
    space = str(_space_file(tmp_path, kw["body"])) if "body" in kw else None
    before = _tree(tmp_path)
    proc = _cli(tmp_path, "--space", *[space if a == "{file}" else a for a in args])
    line = _one_line(proc, says if case != "direction_on_the_command_line" else "give NAME:min or NAME:max")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # refused before anything started
    assert _tree(tmp_path) == before, line  # no results folder, no data, nothing else


@pytest.mark.parametrize("case", CASES)
def test_tuning_search_raises_one_line_and_writes_nothing(tmp_path, case):
    _, kw, says = CASES[case]
    kw = dict(kw)
    if "body" in kw:
        kw["space"] = str(_space_file(tmp_path, kw.pop("body")))
    before = _tree(tmp_path)
    folder = tmp_path / "r"
    with pytest.raises(TuningError) as err:
        tuning.search(None, **kw, data_dir=str(tmp_path / "data"), results_dir=folder)
    message = str(err.value)
    assert says in message and "\n" not in message
    if case == "direction_on_the_command_line":  # from Python it is the space's own check
        assert "has direction 'fastest': use 'min' or 'max'" in message
    assert _tree(tmp_path) == before and not folder.exists()


# ---------------------------------------------------------------- a trainer of your own

def _user_space(folder: Path, trainer: str, **declared) -> Path:
    settings = ", ".join(f"{k}={v!r}" for k, v in declared.items())
    return _space_file(folder, f"SPACE = Space(params={{'x': Uniform(0, 1), 'y': Uniform(0, 1)}}, "
                               f"trainer={trainer!r}, strategy='random', num_samples=2, max_epochs=2, "
                               f"gpus_per_trial=0, {settings})")


def _stopped_at_the_first_result(folder: Path, says: str) -> None:
    """What such a run keeps: run.json, stopped, with the line, and the first result; no best."""
    record = json.loads((folder / "run.json").read_text())
    assert record["status"].startswith("stopped") and says in record["error"]
    assert not (folder / "best_config.json").exists()
    assert not (folder / "pareto.csv").exists()  # its front would be of stand-in values
    rows = (folder / "results.jsonl").read_text().splitlines()
    assert 1 <= len(rows) <= 2  # the first result, and at most one from the trial beside it
    # The report is the run's end, not the live page ("the run is going"), and no trial is said to
    # have ended by itself or reached the full budget: one failed, any other was stopped with the run.
    md = (folder / "report.md").read_text()
    assert "LIVE" not in md and "Status: stopped: the trainer's metrics cannot be used" in md
    trials = pd.read_csv(folder / "trials.csv")
    assert not trials["ended_itself"].any() and "| full budget |" not in md and "ended by its trainer" not in md


def test_an_objective_a_users_trainer_never_reports_stops_at_its_first_result(tmp_path):
    """The command line, on tests/user_trainers.py's tradeoff_no_latency (tests/ on PYTHONPATH so
    Ray's workers import it)."""
    space = _user_space(tmp_path, "user_trainers:tradeoff_no_latency",
                        objectives={"loss": "min", "latency_ms": "min"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = _cli(tmp_path, "--space", str(space), "--results-dir", str(tmp_path / "r"), env=env)
    says = "the trainer reported no 'latency_ms'"
    _one_line(proc, says, "drop it from the space's objectives and constraints", "files kept in")
    _stopped_at_the_first_result(tmp_path / "r", says)


def test_a_constraint_on_a_metric_a_users_trainer_never_reports_stops_at_its_first_result(ray_here, tmp_path):
    space = _user_space(tmp_path, "user_trainers:tradeoff", objectives={"loss": "min", "latency_ms": "min"},
                        constraints={"energy_j": ("<=", 1.0)})
    with pytest.raises(TuningError) as err:
        tuning.search(None, str(space), results_dir=tmp_path / "r")
    says = "the trainer reported no 'energy_j'"
    assert says in str(err.value) and "\n" not in str(err.value)
    _stopped_at_the_first_result(tmp_path / "r", says)


def test_a_bound_on_the_trials_own_memory_needs_no_report_from_the_trainer(ray_here, tmp_path):
    """peak_rss_mb comes with every result (this process's), as docs/tracking.md's example bounds
    it; a trainer of one's own that did not report it was stopped: "the trainer reported no 'peak_rss_mb'"."""
    space = _user_space(tmp_path, "user_trainers:tradeoff", constraints={"peak_rss_mb": ("<=", 1e6)})
    result = tuning.search(None, str(space), results_dir=tmp_path / "r")
    assert result.status == "finished" and result.trials["feasible"].all() and len(result.pareto) >= 1
    assert (result.trials["peak_rss_mb"] > 0).all()
