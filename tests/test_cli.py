"""The command lines: every numeric flag of every command refuses a value that makes no sense
(one line naming the flag, exit 2, no traceback, nothing written), every --help prints, and
tuning.run's checks against the Ray it runs on. tuning.run's other bad input: test_bad_input.py."""

import ast
import os
import subprocess
import sys

import pytest

from cli_helpers import refused
from conftest import ROOT
from tuning import doctor, run
from tuning.compare import runner as compare
from tuning.bench import calibration, gpucheck
from tuning.bench import measure as bench
from tuning.report import comparison as report

# Each command, as it names itself in its errors: its main and the module declaring its flags.
COMMANDS = {"tuning.run": (run.main, "tuning/run.py"), "tuning.compare": (compare.main, "tuning/compare/runner.py"),
            "tuning.report": (report.main, "tuning/report/comparison.py"),
            "tuning.bench": (bench.main, "tuning/bench/measure.py"),
            "tuning.bench.gpucheck": (gpucheck.main, "tuning/bench/gpucheck.py"),
            "tuning.bench.calibration": (calibration.main, "tuning/bench/calibration.py"),
            "tuning.doctor": (doctor.main, "tuning/doctor.py")}

# Values that make no sense, by what a flag takes (tuning/cli.py's checks; run's --time-budget).
BAD = {
    "count": ["0", "-2", "1.5", "nan"],
    "at least 0": ["-1", "nan"],
    "at least 5": ["4", "0"],
    "positive": ["0", "-1", "nan", "inf", "ten"],
    "0 or more": ["-0.5", "nan", "inf"],
    "fraction": ["0", "1.5", "nan"],
    "duration": ["0s", "0.0h", "5x", "inf"],
    "positive list": ["1e-3,0", "1e-3,nan"],
    "count list": ["64,0", "64,1.5"],
}

# Every numeric flag of every command: (command, arguments that reach it, flag, what it takes).
# Paths are relative: the test runs in an empty folder, which must stay empty.
FLAGS = [
    *[("tuning.run", ["--space", "counting_ones"], flag, kind) for flag, kind in [
        ("--add-samples", "count"), ("--warm-start-top", "count"), ("--time-budget", "duration"),
        ("--num-samples", "count"), ("--max-epochs", "count"), ("--seed", "at least 0"),
        ("--cpus-per-trial", "positive"), ("--gpus-per-trial", "0 or more"), ("--workers-per-trial", "count"),
        ("--max-failures", "at least 0"), ("--max-concurrent-trials", "count")]],
    ("tuning.compare", ["experiments/counting_ones"], "--seeds", "count"),
    ("tuning.compare", ["experiments/counting_ones"], "--budget", "positive"),
    *[("tuning.bench.gpucheck", [], flag, kind) for flag, kind in [
        ("--target-accuracy", "fraction"), ("--lr", "positive"), ("--batch-size", "count"),
        ("--budget-s", "positive"), ("--deadline", "positive")]],
    ("tuning.bench.calibration", ["probe"], "--images", "at least 5"),
    ("tuning.bench.calibration", ["probe"], "--seed", "at least 0"),
    ("tuning.bench.calibration", ["examples", "examples.png"], "--seed", "at least 0"),
    ("tuning.bench.calibration", ["table", "run"], "--early-epoch", "count"),
    *[("tuning.bench.calibration", ["proxy", "run"], flag, kind) for flag, kind in [
        ("--early-epoch", "count"), ("--train", "count"), ("--val", "count"), ("--epochs", "count"),
        ("--lr", "positive list"), ("--batch-size", "count list"), ("--seed", "at least 0"),
        ("--jobs", "count"), ("--threads", "count")]],
]
# report, bench and doctor take no numbers.


@pytest.mark.parametrize("command,before,flag,value", [
    pytest.param(command, before, flag, value, id=f"{command}-{flag}={value}")
    for command, before, flag, kind in FLAGS for value in BAD[kind]])
def test_a_numeric_flag_refuses_a_value_that_makes_no_sense(capsys, tmp_path, monkeypatch, command, before, flag,
                                                            value):
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, COMMANDS[command][0], [*before, flag, value], f"{flag} must be ", value)
    assert line.startswith(f"{command}: error: {flag} must be ") and ", got " in line
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


NUMBER_CHECKS = {"int_at_least", "positive_int", "non_negative_int", "positive_float", "non_negative_float",
                 "fraction", "comma_separated", "_duration"}


def _numeric_flags(path) -> set[str]:
    """The flags a module declares with a number's type: int or float (unchecked), or a check."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            kind = next((k.value for k in node.keywords if k.arg == "type"), None)
            if isinstance(kind, ast.Call):  # cli.int_at_least(5), cli.comma_separated(...)
                kind = kind.func
            name = getattr(kind, "attr", None) or getattr(kind, "id", None)
            if name in ("int", "float"):
                pytest.fail(f"{path} {node.args[0].value}: type={name} lets nonsense through: use a check "
                            "from tuning/cli.py")
            if name in NUMBER_CHECKS:
                found.add(node.args[0].value)
    return found


@pytest.mark.parametrize("main,argv,says", [
    (compare.main, [""], "the experiment '' names none"),  # was "no experiment at .py"
    (report.main, [""], "the folder '' names none"),  # was ". holds no runs.csv"
    (doctor.main, ["--json="], "'' names no file"),  # was " is a folder"
])
def test_an_empty_path_argument_is_named_as_empty(capsys, tmp_path, monkeypatch, main, argv, says):
    monkeypatch.chdir(tmp_path)  # '' was the current folder: nothing may be written there
    refused(capsys, main, argv, says)
    assert not any(tmp_path.iterdir())


def test_flags_holds_every_numeric_flag():
    # A new numeric flag is either in FLAGS (and so tested) or this fails.
    for command, (_, path) in COMMANDS.items():
        assert _numeric_flags(ROOT / path) == {flag for c, _, flag, _ in FLAGS if c == command}, command


@pytest.mark.parametrize("argv", [[c, "--help"] for c in COMMANDS] + [
    ["tuning.bench.calibration", sub, "--help"] for sub in ("table", "proxy", "probe", "examples")])
def test_every_help_prints(capsys, argv):
    # argparse formats a help string only when --help asks: a stray % in one is a traceback there.
    with pytest.raises(SystemExit) as exit_:
        COMMANDS[argv[0]][0](argv[1:])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m tuning.") and "--help" in out


def test_more_gpus_than_ray_sees(capsys, tmp_path, ray_2cpus):
    results = tmp_path / "results"
    refused(capsys, run.main, ["--space", "cifar_asha", "--smoke", "--gpus-per-trial", "1",
                               "--data-dir", str(tmp_path / "data"), "--results-dir", str(results)],
            "--gpus-per-trial 1", "0 GPUs")
    assert not results.exists()  # refused before anything was written


def test_more_cpus_than_ray_sees(capsys, tmp_path, ray_2cpus):
    refused(capsys, run.main, ["--space", "cifar_asha", "--smoke", "--cpus-per-trial", "3",
                               "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "r")],
            "--cpus-per-trial 3", "2 CPUs")


def test_workers_per_trial_must_split_the_batch_sizes(capsys, tmp_path, ray_2cpus):
    refused(capsys, run.main, ["--space", "cifar_asha", "--smoke", "--workers-per-trial", "3", "--cpus-per-trial",
                               "2", "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "r")],
            "do not all split evenly over 3 ranks")


def test_an_integer_range_of_batch_sizes_is_refused_over_several_ranks(capsys, tmp_path, ray_2cpus):
    # IntUniform(63, 65) ran, and its trial of 63 failed at run time (docs/ddp.md says it is refused).
    (tmp_path / "odd.py").write_text("from tuning.spaces import IntUniform, LogUniform, Space\n"
                                     "SPACE = Space(params={'lr': LogUniform(1e-3, 1e-2), "
                                     "'batch_size': IntUniform(63, 65)}, strategy='random', num_samples=2, "
                                     "max_epochs=1, cpus_per_trial=1)\n")
    refused(capsys, run.main, ["--space", str(tmp_path / "odd.py"), "--smoke", "--workers-per-trial", "2",
                               "--cpus-per-trial", "2", "--data-dir", str(tmp_path / "data"),
                               "--results-dir", str(tmp_path / "r")],
            "batch_size IntUniform(63, 65) draws sizes that do not split evenly over 2 ranks",
            "Choice([32, 64, 128, 256])")
    assert not (tmp_path / "r").exists()


def test_a_fixed_batch_size_must_split_too(capsys, tmp_path, ray_2cpus):
    # cifar_mo fixes batch_size 256: every trial's three ranks once failed on it, three times each.
    refused(capsys, run.main, ["--space", "cifar_mo", "--smoke", "--workers-per-trial", "3", "--cpus-per-trial",
                               "2", "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "r")],
            "the fixed batch_size 256 does not split evenly over 3 ranks")
    assert not (tmp_path / "r").exists()


def test_cpus_a_user_never_gave_are_said_to_come_from_the_ranks(capsys, tmp_path, ray_2cpus):
    refused(capsys, run.main, ["--space", "cifar_asha", "--smoke", "--workers-per-trial", "3",
                               "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "r")],
            "--cpus-per-trial 3 (the space's cpus_per_trial 1 for each of 3 ranks) is more than the 2 CPUs",
            "(--cpus-per-trial N: the ranks share N)")


def test_workers_per_trial_is_for_cpu_trials(capsys, tmp_path, ray_2cpus):
    refused(capsys, run.main, ["--space", "cifar_asha", "--smoke", "--workers-per-trial", "2", "--gpus-per-trial",
                               "0.5", "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "r")],
            "--workers-per-trial 2 is for CPU trials")


def test_a_storage_folder_is_made_absolute_for_tune(tmp_path, monkeypatch):
    from tuning import cli

    monkeypatch.chdir(tmp_path)
    assert cli.storage_path("shared/tune") == str(tmp_path / "shared" / "tune")  # Tune refuses relative paths
    assert cli.storage_path(f"file://{tmp_path}/shared") == f"file://{tmp_path}/shared"


def test_a_file_uri_is_checked_as_the_folder_it_names(tmp_path):
    # It skipped the check: pyarrow's NotADirectoryError as a traceback, after run.json was written.
    import argparse

    from tuning import cli

    (tmp_path / "afile").write_text("")
    with pytest.raises(argparse.ArgumentTypeError, match="is a file, not a folder"):
        cli.storage_path(f"file://{tmp_path}/afile/sub")


def test_sigterm_while_ray_starts_stops_the_command_as_at_any_other_moment(tmp_path):
    """ray.init installs a SIGTERM handler of its own that exits with status 15 and no word; a
    SIGTERM in that window now takes the command's path: 'interrupted', exit 143. Ray's handler is
    what ray.init would run; the signal is real, sent to this child process by itself."""
    code = ("import os, signal, sys, ray\n"
            "from tuning.backend import cluster\n"
            "from tuning import run\n"
            "def init(**kw):  # what ray.init does on SIGTERM: its handler, then the signal arrives\n"
            "    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "ray.init = init\n"
            "sys.exit(run.main(['--space', 'counting_ones', '--smoke', '--results-dir', 'r']))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 143, proc.stderr[-2000:]
    assert "tuning.run: interrupted outside the search loop" in proc.stderr and "Traceback" not in proc.stderr
